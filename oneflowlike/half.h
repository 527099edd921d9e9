#pragma once
// Storage types for float16 (IEEE binary16) and bfloat16. They only convert to and from
// float; arithmetic happens in float32. Conversions round to nearest even.

#include <cstdint>
#include <cstring>

namespace ofl {

namespace half_bits {

[[gnu::always_inline]] inline uint32_t of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
[[gnu::always_inline]] inline float to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
[[gnu::always_inline]] inline uint32_t mask_if(bool c) { return 0u - static_cast<uint32_t>(c); }

}  // namespace half_bits

// Note [Vectorisable float16 conversions]: float16's conversions are written without branches,
// each case computed and the right one picked by bit masks, so that GCC vectorises a loop that
// converts (as it does bfloat16's shift) and the native 16-bit loops serve float16 too (Note
// [Native bfloat16 loops] in kernels/cpu/widened.h). GCC 12 keeps F16C's instructions scalar
// in a loop, and the earlier branching conversion, out of line, was ~10x slower than a memcpy.
// Both give F16C's bits (round to nearest even, subnormals kept), tested for every float16 and
// for float32 values around every rounding boundary and at a stride through all of them
// (tests/cpp/core/dtype_test.cpp; all 2^32 were compared once, outside the tests); a NaN becomes
// float16's quiet NaN with its sign, where F16C keeps some payload bits.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  // Always inlined: left out of line (GCC did in the larger kernels), a call per element stops
  // the loop's vectorisation.
  [[gnu::always_inline]] explicit float16(float f) {
    using namespace half_bits;
    const uint32_t u = of(f);
    const uint32_t a = u & 0x7fffffffu;
    // A normal half: float32's exponent rebased by 112, the 13 dropped bits rounded to even.
    const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    // Below 2^-14 a half is subnormal, its unit 2^-24: the unit of float32's last bit at 0.5,
    // so adding 0.5 leaves the rounded half in the low bits (the FPU rounds to even).
    const uint32_t subnormal = of(to_float(a) + 0.5f) - of(0.5f);
    // From 65520 up, infinity; NaN a quiet NaN.
    const uint32_t huge = 0x7c00u | (mask_if(a > 0x7f800000u) & 0x200u);
    const uint32_t is_huge = mask_if(a >= 0x477ff000u);
    const uint32_t is_subnormal = mask_if(a < 0x38800000u);
    const uint32_t h =
        (huge & is_huge) | (subnormal & is_subnormal) | (normal & ~(is_huge | is_subnormal));
    bits = static_cast<uint16_t>(h | ((u >> 16) & 0x8000u));
  }
  [[gnu::always_inline]] explicit operator float() const {
    using namespace half_bits;
    const uint32_t magnitude = static_cast<uint32_t>(bits & 0x7fffu) << 13;
    const uint32_t exponent = magnitude & (0x1fu << 23);
    // A normal half: the exponent rebased by 112. Infinity and NaN: all exponent bits set.
    const uint32_t normal = magnitude + (112u << 23);
    const uint32_t special = normal + (112u << 23);
    // A subnormal (or zero) half m * 2^-24: 2^-14 (1 + m/1024) - 2^-14, exact in float32.
    const uint32_t subnormal = of(to_float(magnitude + (113u << 23)) - 0x1p-14f);
    const uint32_t is_special = mask_if(exponent == (0x1fu << 23));
    const uint32_t is_subnormal = mask_if(exponent == 0);
    const uint32_t x = (special & is_special) | (subnormal & is_subnormal) |
                       (normal & ~(is_special | is_subnormal));
    return to_float(x | (static_cast<uint32_t>(bits & 0x8000u) << 16));
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

/// The largest T (float16 or bfloat16) below `x`, as a float: what a uniform draw in [low, x)
/// that rounds up to x becomes (Note [16-bit random values] in ops/random.h).
template <class T>
float largest_below(float x) {
  T t(x);
  while (static_cast<float>(t) >= x) {
    if (static_cast<float>(t) > 0) {
      --t.bits;  // a smaller magnitude
    } else if (t.bits == 0) {
      t.bits = 0x8001;  // +0 -> the negative value nearest zero
    } else {
      ++t.bits;  // -0 or negative: a larger magnitude
    }
  }
  return static_cast<float>(t);
}

/// n float32 values to float16 (round to nearest even, as float16(float)) and back, 8 at a time
/// with F16C where the build has it (x86-64-v3): 3-4x the vectorised loops of the scalar
/// conversions. NaNs stay NaNs (their payload bits may differ from the scalar conversion's).
void floats_to_halves(const float* x, float16* y, int64_t n);
void halves_to_floats(const float16* x, float* y, int64_t n);

}  // namespace ofl
