#pragma once
// Index ops along one dim: gather (torch.gather) and index_select, and their gradients, which
// scatter-add into zeros (gather_grad, index_select_grad; deterministic, no atomics).
//
// index_select is embedding's contract along any dim: x viewed as (outer, V, inner) gives
// (outer, n, inner) slices picked by n indices; embedding is outer = 1. Both share the kernels
// of kernels/cpu/index_slices.h and kernels/cuda/index_slices.cuh.

#include <cstdint>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct IndexParams {
  int64_t dim = 0;  // negative counts from the end
  OFL_PARAMS(IndexParams, dim)
};

/// The gradients of gather and index_select: dy scatter-added into zeros shaped input_shape.
struct IndexGradParams {
  int64_t dim = 0;
  Shape input_shape;  // the logical shape of the gathered-from input x
  OFL_PARAMS(IndexGradParams, dim, input_shape)
};

/// A shape seen around one axis: (outer, extent, inner). A 0-d shape is (1, 1, 1).
struct AxisExtents {
  int64_t outer = 1, extent = 1, inner = 1;
};
inline AxisExtents axis_extents(const Shape& s, int axis) {
  if (s.ndim() == 0) return {};
  return {s.count(0, axis), s[axis], s.count(axis + 1, s.ndim())};
}

namespace functional {
/// out[p] = x[p with p[dim] replaced by index[p]]: index int32/int64 of x's rank, out shaped
/// like index (torch.gather). IndexError for an index outside [0, x.shape[dim]).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// x's slices along dim picked by a 1-d (or 0-d) index: out.shape[dim] = index.numel().
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// zeros(input_shape), then dx[p with p[dim] = index[p]] += dy[p] for every p of index.
Tensor gather_grad(const Tensor& dy, const Tensor& index, int64_t dim, const Shape& input_shape);
/// zeros(input_shape), then dx[..., index[t], ...] += dy[..., t, ...] along dim.
Tensor index_select_grad(const Tensor& dy, const Tensor& index, int64_t dim,
                         const Shape& input_shape);
}  // namespace functional

}  // namespace ofl
