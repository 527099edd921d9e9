#pragma once
// Reductions over a set of axes: reduce_sum, reduce_mean, reduce_max, reduce_min.

#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct ReduceParams {
  std::vector<int64_t> axes;  // empty: all axes
  bool keepdims = false;
  OFL_PARAMS(ReduceParams, axes, keepdims)
};

namespace functional {
Tensor reduce_sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
Tensor reduce_mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
Tensor reduce_max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
Tensor reduce_min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
}  // namespace functional

}  // namespace ofl
