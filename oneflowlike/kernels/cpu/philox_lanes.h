#pragma once
// Philox bits for sixteen elements at a time on the CPU.
//
// Note [Philox in lanes]: an element's bits are one Philox4x32-10 block of its own counter (Note
// [Random element counters] in philox.h), ten rounds of two 32 x 32 -> 64-bit products and
// xors, about 50 cycles an element done one at a time: random_uniform and dropout ran at 17 ns
// an element (4x PyTorch's rand), random_normal at 30. Computed for kPhiloxLanes consecutive
// counters at once, as loops over the lanes, the rounds compile to vector products (vpmuludq),
// eight or sixteen lanes a time. The arithmetic is the integer arithmetic of philox4x32, so the
// bits, and every value made from them, are the same as element_bits gives (tested).

#include <cstdint>

#include "oneflowlike/philox.h"

namespace ofl::cpu {

constexpr int kPhiloxLanes = 16;

/// The bits of elements index .. index + kPhiloxLanes - 1 of a draw with (seed, offset): lane i
/// of word w is philox::element_bits(seed, offset, index + i)[w].
struct PhiloxLanes {
  uint32_t word[4][kPhiloxLanes];
  philox::Block block(int lane) const {
    return {word[0][lane], word[1][lane], word[2][lane], word[3][lane]};
  }
};

[[gnu::always_inline]] inline void element_bits_lanes(uint64_t seed, uint64_t offset,
                                                      uint64_t index, PhiloxLanes& out) {
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
#pragma omp simd
  for (int i = 0; i < kPhiloxLanes; ++i) {
    const uint64_t counter = offset + index + static_cast<uint64_t>(i);  // wraps, as element_bits
    c0[i] = static_cast<uint32_t>(counter);
    c1[i] = static_cast<uint32_t>(counter >> 32);
    c2[i] = 0u;
    c3[i] = 0u;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < philox::kRounds; ++r) {
    if (r > 0) {
      k0 += philox::kW0;
      k1 += philox::kW1;
    }
#pragma omp simd
    for (int i = 0; i < kPhiloxLanes; ++i) {
      const uint64_t p0 = static_cast<uint64_t>(philox::kM0) * c0[i];
      const uint64_t p1 = static_cast<uint64_t>(philox::kM1) * c2[i];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
      c1[i] = static_cast<uint32_t>(p1);
      c3[i] = static_cast<uint32_t>(p0);
      c0[i] = n0;
      c2[i] = n2;
    }
  }
#pragma omp simd
  for (int i = 0; i < kPhiloxLanes; ++i) {
    out.word[0][i] = c0[i];
    out.word[1][i] = c1[i];
    out.word[2][i] = c2[i];
    out.word[3][i] = c3[i];
  }
}

}  // namespace ofl::cpu
