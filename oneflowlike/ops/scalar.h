#pragma once
// Ops of a tensor and a Python number: x + s, x * s, x ** s, s ** x.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct ScalarParams {
  double scalar = 0.0;
  OFL_PARAMS(ScalarParams, scalar)
};

namespace functional {
/// x + scalar and x * scalar. The scalar is converted to x's dtype, except that an integer x
/// with a non-integral scalar is first cast to float32 (as torch promotes int + 0.5).
Tensor scalar_add(const Tensor& x, double scalar);
Tensor scalar_mul(const Tensor& x, double scalar);
/// x ** exponent and base ** x. Integer x is cast to float32 first (the kernels are floating).
Tensor scalar_pow(const Tensor& x, double exponent);
Tensor scalar_rpow(const Tensor& x, double base);
}  // namespace functional

}  // namespace ofl
