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

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace ofl::philox {

using Block = std::array<uint32_t, 4>;

constexpr uint32_t kM0 = 0xD2511F53u;  // round multipliers
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;  // key schedule increments (golden ratio, sqrt(3) - 1)
constexpr uint32_t kW1 = 0xBB67AE85u;
constexpr int kRounds = 10;

/// Philox4x32 with `rounds` rounds on counter `ctr` and key (k0, k1).
inline Block philox4x32(Block ctr, uint32_t k0, uint32_t k1, int rounds = kRounds) {
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
inline Block element_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t counter = offset + index;  // wraps at 2^64, as the offsets do
  return philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// Uniform in [0, 1) from the top 24 bits of `a`: every value is an exact float.
inline float uniform_float(uint32_t a) { return static_cast<float>(a >> 8) * 0x1.0p-24f; }

/// Uniform in [0, 1) from 53 bits of (a, b): every value is an exact double.
inline double uniform_double(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) | (b >> 11);  // 32 + 21 = 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

/// Standard uniform in [0, 1) of element `index`, as T (float or double precision).
template <class T>
T uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  const Block r = element_bits(seed, offset, index);
  if constexpr (sizeof(T) == sizeof(double)) {
    return uniform_double(r[0], r[1]);
  } else {
    return uniform_float(r[0]);
  }
}

/// Standard normal of element `index` by Box-Muller (the cosine half) from two uniforms:
/// u1 in (0, 1] so that log(u1) is finite, u2 in [0, 1).
template <class T>
T normal(uint64_t seed, uint64_t offset, uint64_t index) {
  const Block r = element_bits(seed, offset, index);
  T u1, u2;
  if constexpr (sizeof(T) == sizeof(double)) {
    u1 = 1.0 - uniform_double(r[0], r[1]);
    u2 = uniform_double(r[2], r[3]);
  } else {
    u1 = 1.0f - uniform_float(r[0]);
    u2 = uniform_float(r[1]);
  }
  constexpr T kTwoPi = static_cast<T>(2 * std::numbers::pi);
  return std::sqrt(T(-2) * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace ofl::philox
