#pragma once
// Storage types for float16 (IEEE binary16) and bfloat16. They only convert to and from
// float; arithmetic happens in float32. Conversions round to nearest even.

#include <cstdint>
#include <cstring>

namespace ofl {

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
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
/// with F16C where the build has it (x86-64-v3): the scalar conversions are ~10x slower than a
/// memcpy. NaNs stay NaNs (their payload bits may differ from the scalar conversion's).
void floats_to_halves(const float* x, float16* y, int64_t n);
void halves_to_floats(const float16* x, float* y, int64_t n);

}  // namespace ofl
