#pragma once
// Broadcasting binary ops: add, sub, mul, div (differentiable) and the comparisons equal,
// greater, less (bool results, not differentiable).

#include "oneflowlike/tensor.h"

namespace ofl {

namespace functional {
/// These promote mixed dtypes (promote_types) before calling the op.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
}  // namespace functional

}  // namespace ofl
