#pragma once
// Philox4x32-10, the counter-based generator of Salmon et al. 2011, "Parallel random numbers: as
// easy as 1, 2, 3". A random value is a pure function of (key, counter), so any element of a
// random tensor can be computed alone, on any rank, in any order.
//
// Note [Random element counters]: element e of a random tensor made with (seed, offset) takes
// its bits from one Philox block, key = seed and counter = offset + e (a 64-bit count in words
// 0 and 1; words 2 and 3 are zero). e is the LOGICAL row-major flat index, so a tensor split
// across ranks holds exactly the values of the whole one, and an op that draws n elements
// reserves n counters (next_offset in ops/random.h) so that the next op gets fresh ones.
//
// Note [Random values on every device]: everything below is OFL_HOST_DEVICE, and the CPU and
// CUDA kernels of the random ops both compute their elements with the *_value functions at the
// end, so a draw gives the same values on either device. The bits and the uniforms are integer
// arithmetic and exact scalings: bit-identical. uniform_value and dropout_keeps are too (one
// fma, exact compares), and so is normal_value in float32 (and the 16-bit dtypes, which round
// it): its log and cos are polynomials in operations both round alike (Note [Box-Muller in
// float arithmetic] in box_muller.h; checked across the CPU builds, not yet on a GPU). In float64
// it goes through libm's log and cos, which the host's libm and CUDA's compute with different
// last-ulp errors (CUDA: log 1 ulp, cos 2 ulp): a CUDA float64 normal may differ from the CPU's by
// a few ulp (tests/python/test_cuda_random_optim_fused.py allows 1e-13 in float64).

#include <cstdint>
#include <numbers>

#include "oneflowlike/box_muller.h"
#include "oneflowlike/common/host_device.h"

namespace ofl::philox {

/// Four 32-bit words: a counter or the bits it gives.
struct Block {
  uint32_t word[4];
  OFL_HOST_DEVICE uint32_t operator[](int i) const { return word[i]; }
  bool operator==(const Block&) const = default;
};

constexpr uint32_t kM0 = 0xD2511F53u;  // round multipliers
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;  // key schedule increments (golden ratio, sqrt(3) - 1)
constexpr uint32_t kW1 = 0xBB67AE85u;
constexpr int kRounds = 10;

/// Philox4x32 with `rounds` rounds on counter `ctr` and key (k0, k1).
OFL_HOST_DEVICE inline Block philox4x32(Block ctr, uint32_t k0, uint32_t k1, int rounds = kRounds) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ k0, lo1, hi0 ^ ctr[3] ^ k1, lo0};
  }
  return ctr;
}

/// The 128 random bits of element `index` of a tensor drawn with (seed, offset).
OFL_HOST_DEVICE inline Block element_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t counter = offset + index;  // wraps at 2^64, as the offsets do
  return philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// Uniform in [0, 1) from the top 24 bits of `a`: every value is an exact float.
OFL_HOST_DEVICE inline float uniform_float(uint32_t a) {
  return static_cast<float>(a >> 8) * 0x1.0p-24f;
}

/// Uniform in [0, 1) from 53 bits of (a, b): every value is an exact double.
OFL_HOST_DEVICE inline double uniform_double(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) | (b >> 11);  // 32 + 21 = 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

/// Standard uniform in [0, 1) from an element's bits `r`, as T (float or double precision).
template <class T>
OFL_HOST_DEVICE T uniform_from_bits(const Block& r) {
  if constexpr (sizeof(T) == sizeof(double)) {
    return uniform_double(r[0], r[1]);
  } else {
    return uniform_float(r[0]);
  }
}

/// Standard normal by Box-Muller (the cosine half) from an element's bits `r`: two uniforms,
/// u1 in (0, 1] so that log(u1) is finite, u2 in [0, 1). In T's precision: float through
/// Note [Box-Muller in float arithmetic], double through libm's log and cos (Note [Random
/// values on every device]).
template <class T>
OFL_HOST_DEVICE OFL_INLINE T normal_from_bits(const Block& r) {
  if constexpr (sizeof(T) == sizeof(double)) {
    const double u1 = 1.0 - uniform_double(r[0], r[1]);
    const double u2 = uniform_double(r[2], r[3]);
    constexpr double kTwoPi = 2 * std::numbers::pi;
    return host_device::sqrt(-2.0 * host_device::log(u1)) * host_device::cos(kTwoPi * u2);
  } else {
    const float u1 = 1.0f - uniform_float(r[0]);  // u2 = (r[1] >> 8) 2^-24, as uniform_float
    return host_device::sqrt(-2.0f * log_of_unit(u1)) * cos_two_pi(r[1] >> 8);
  }
}

// The values of the random ops' elements (ops/random.h), shared by their CPU and CUDA kernels:
// each from the element's bits (element_bits, or the CPU's element_bits_lanes in
// kernels/cpu/philox_lanes.h, which gives the same bits sixteen elements at a time).

/// random_normal from an element's bits: mean + std * normal, with one rounding (an fma).
template <class T>
OFL_HOST_DEVICE OFL_INLINE T normal_value(const Block& bits, T mean, T std) {
  return host_device::fma(std, normal_from_bits<T>(bits), mean);
}

/// random_uniform in [low, high) from an element's bits: low + (high - low) * u with one
/// rounding (an fma); a value that rounds up to high becomes below_high, the largest T below
/// high (low when high <= low).
template <class T>
OFL_HOST_DEVICE T uniform_value(const Block& bits, T low, T high, T below_high) {
  const T v = host_device::fma(high - low, uniform_from_bits<T>(bits), low);
  return v < high ? v : below_high;
}

/// Whether dropout with probability p keeps the element of these bits. The mask uses 53-bit
/// uniforms whatever the tensor's dtype, so every dtype drops the same elements.
OFL_HOST_DEVICE inline bool dropout_keeps(const Block& bits, double p) {
  return uniform_from_bits<double>(bits) >= p;
}

}  // namespace ofl::philox
