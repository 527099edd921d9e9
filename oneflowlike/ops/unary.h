#pragma once
// Elementwise functions of one tensor: neg, abs, exp, log, sqrt, rsqrt, tanh, relu, sigmoid,
// silu, gelu, and the backward ops their gradients use (tanh_grad, sigmoid_grad, relu_grad,
// silu_grad, gelu_grad, abs_grad), each one fused pass instead of a chain of elementwise ops.

#include <string>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct GeluParams {
  std::string approximate = "none";  // "none" (exact, erf) or "tanh"
  OFL_PARAMS(GeluParams, approximate)
};

namespace functional {
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
/// x * sigmoid(x) (SiLU, "swish"), as torch.nn.functional.silu.
Tensor silu(const Tensor& x);
/// approximate: "none" or "tanh", as in torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");

/// dy * (1 - y^2) with y = tanh(x).
Tensor tanh_grad(const Tensor& y, const Tensor& dy);
/// dy * y * (1 - y) with y = sigmoid(x).
Tensor sigmoid_grad(const Tensor& y, const Tensor& dy);
/// dy where y > 0, else 0, with y = relu(x).
Tensor relu_grad(const Tensor& y, const Tensor& dy);
/// dy * gelu'(x).
Tensor gelu_grad(const Tensor& x, const Tensor& dy, const std::string& approximate = "none");
/// dy * silu'(x).
Tensor silu_grad(const Tensor& x, const Tensor& dy);
/// dy * sign(x).
Tensor abs_grad(const Tensor& x, const Tensor& dy);
}  // namespace functional

}  // namespace ofl
