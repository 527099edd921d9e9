#pragma once
// Ops that move elements without computing on them: transpose (a general permute), slice (and
// its backward slice_grad), concat and split.

#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct TransposeParams {
  std::vector<int64_t> perm;  // output axis j is input axis perm[j]; negative counts from the end
  OFL_PARAMS(TransposeParams, perm)
};

/// One entry per axis, already normalised: 0 <= start <= stop <= extent, step >= 1.
/// The output extent of an axis is ceil((stop - start) / step).
struct SliceParams {
  std::vector<int64_t> start;
  std::vector<int64_t> stop;
  std::vector<int64_t> step;
  OFL_PARAMS(SliceParams, start, stop, step)
};

/// The backward of slice: zeros of like_shape with dy written where slice read.
struct SliceGradParams {
  Shape like_shape;
  std::vector<int64_t> start;
  std::vector<int64_t> stop;
  std::vector<int64_t> step;
  OFL_PARAMS(SliceGradParams, like_shape, start, stop, step)
};

struct ConcatParams {
  int64_t axis = 0;  // negative counts from the end
  OFL_PARAMS(ConcatParams, axis)
};

struct SplitParams {
  int64_t axis = 0;            // negative counts from the end
  std::vector<int64_t> sizes;  // extent of each output along axis; they sum to the input's
  OFL_PARAMS(SplitParams, axis, sizes)
};

namespace functional {
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
Tensor slice(const Tensor& x, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
             const std::vector<int64_t>& step);
Tensor slice_grad(const Tensor& dy, const Shape& like_shape, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& stop, const std::vector<int64_t>& step);
/// Promotes mixed dtypes (promote_types) before calling the op, as torch.cat does.
Tensor concat(const std::vector<Tensor>& inputs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes);
}  // namespace functional

}  // namespace ofl
