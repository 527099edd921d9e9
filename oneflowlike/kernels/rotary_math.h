#pragma once
// The rotation of one pair, written once for the CPU and CUDA rotary kernels
// (Note [Rotary embedding] in ops/rotary.h).

#include <cstdint>

#include "oneflowlike/common/host_device.h"

namespace ofl::rotary_math {

/// The offsets of pair i's two values in a row of head_dim values.
struct PairOffsets {
  int64_t first, second;
};
OFL_HOST_DEVICE inline PairOffsets pair_offsets(int64_t i, int64_t head_dim, bool interleaved) {
  return interleaved ? PairOffsets{2 * i, 2 * i + 1} : PairOffsets{i, i + head_dim / 2};
}

/// (x1, x2) rotated by the angle with cosine c and sine s (s already negated for the inverse).
template <class V>
OFL_HOST_DEVICE inline void rotate(V x1, V x2, V c, V s, V* y1, V* y2) {
  *y1 = x1 * c - x2 * s;
  *y2 = x2 * c + x1 * s;
}

}  // namespace ofl::rotary_math
