#pragma once
// cumsum: running sums along one dim (torch.cumsum).
//
// Note [Running sums]: each line along dim is summed in order, from its first element (from
// its last with reverse, which is the gradient: dx[i] = sum of dy[j] for j >= i), in double
// for every floating dtype (torch's CPU accumulates float32 in double too) and in int64 for
// integers, each output rounded once from the running sum. The CPU and CUDA kernels add in the
// same order, so they give the same bits. A split on dim is not offered: a piece's sums would
// miss the pieces before it. The sums are linear, so a partial sum stays one (P -> P).

#include <cstdint>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct CumsumParams {
  int64_t dim = 0;
  bool reverse = false;  // sum from the end of each line
  OFL_PARAMS(CumsumParams, dim, reverse)
};

namespace functional {
/// out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...] along dim (from the end: the sum
/// of x[..., i:, ...]), in x's dtype (floating, int32 or int64).
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse = false);
}  // namespace functional

}  // namespace ofl
