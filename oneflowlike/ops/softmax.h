#pragma once
// softmax and log_softmax along one axis (numerically stable), and their backward ops
// softmax_grad(y, dy) and log_softmax_grad(y, dy), which take the forward output y.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct SoftmaxParams {
  int64_t axis = -1;  // negative counts from the end
  OFL_PARAMS(SoftmaxParams, axis)
};

namespace functional {
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
/// dx = y * (dy - sum(dy * y, axis)) for y = softmax(x).
Tensor softmax_grad(const Tensor& y, const Tensor& dy, int64_t axis = -1);
/// dx = dy - exp(y) * sum(dy, axis) for y = log_softmax(x).
Tensor log_softmax_grad(const Tensor& y, const Tensor& dy, int64_t axis = -1);
}  // namespace functional

}  // namespace ofl
