#pragma once
// Ops that order values along one dim and say where they came from: max_dim / min_dim (the
// maximum or minimum with its index, torch.max(x, dim)), topk and sort. Each gives
// (values, indices int64); the gradient of values scatters dy back to the indices (gather_grad).
// argmax, argmin and argsort are the indices of max_dim, min_dim and sort.
//
// Note [Orders and ties]: NaN counts as larger than every number (torch): max picks it, an
// ascending sort puts it last. Ties go to the smaller index: max and min give the first
// extremum (torch on the CPU), sort is stable (torch's stable=True: equal values keep their
// order, in a descending sort too), and topk lists equal values by index. So the results are
// one fixed function of the input, on the CPU and CUDA alike; stable=False is accepted and
// gives the stable order, one of the orders it allows.

#include <cstdint>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct DimReduceParams {
  int64_t dim = 0;
  bool keepdim = false;
  OFL_PARAMS(DimReduceParams, dim, keepdim)
};

struct TopkParams {
  int64_t k = 1;
  int64_t dim = -1;
  bool largest = true;
  bool sorted = true;  // the result is always sorted (Note [Orders and ties])
  OFL_PARAMS(TopkParams, k, dim, largest, sorted)
};

struct SortParams {
  int64_t dim = -1;
  bool descending = false;
  bool stable = false;  // the sort is always stable (Note [Orders and ties])
  OFL_PARAMS(SortParams, dim, descending, stable)
};

namespace functional {
/// {values, indices}: the maximum of x along dim and its first index (NaN wins).
std::vector<Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::vector<Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim = false);
/// The indices of max_dim / min_dim.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
/// {values, indices} of the k largest (smallest) values along dim, in order.
std::vector<Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                         bool sorted = true);
/// {values, indices}: x sorted along dim, stably.
std::vector<Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                         bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
}  // namespace functional

}  // namespace ofl
