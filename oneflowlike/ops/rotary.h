#pragma once
// Rotary position embedding (RoPE, Su et al.; LLaMA applies it to q and k).
//
// Note [Rotary embedding]: x (..., T, ..., D) with its sequence axis `seq_axis` (not the last)
// and an even head size D; cos and sin (T, D/2), the caller's tables (LLaMA's
// cos(t * base^(-2i/D)), or any scaled variant). Each row of D values is rotated pair by pair
// by the angle of its position t: y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, pairs (i, i + D/2)
// (rotate-half, as Hugging Face's LLaMA) or (2i, 2i + 1) when `interleaved` (the original
// complex-number form). `inverse` rotates the other way (sin negated): the rotation is
// orthogonal, so that is also the gradient. Tables as inputs keep the op free of positions: under
// S(seq_axis) each rank gets its rows of the tables by SBP, as it gets its rows of x.

#include <vector>

#include "oneflowlike/common/host_device.h"
#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct RotaryParams {
  int64_t seq_axis = -2;
  bool interleaved = false;
  bool inverse = false;
  OFL_PARAMS(RotaryParams, seq_axis, interleaved, inverse)
};

/// x viewed as (outer, T, inner, D): the sizes a rotary kernel loops over (this rank's part).
struct RotaryDims {
  int64_t outer = 1, seq = 1, inner = 1, head_dim = 0;
  OFL_HOST_DEVICE int64_t rows() const { return outer * seq * inner; }
  /// The position of row r (a row is D contiguous values).
  OFL_HOST_DEVICE int64_t position(int64_t r) const { return (r / inner) % seq; }
};
RotaryDims rotary_dims(const Shape& x, int64_t seq_axis);

namespace functional {
/// x rotated by the angles whose cosines and sines are cos and sin (T, D/2).
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                        int64_t seq_axis = -2, bool interleaved = false, bool inverse = false);
}  // namespace functional

}  // namespace ofl
