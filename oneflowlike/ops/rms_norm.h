#pragma once
// rms_norm over the trailing axes [begin_norm_axis, ndim), with an elementwise weight (LLaMA's
// RMSNorm, torch.nn.functional.rms_norm), and its backward ops rms_norm_grad (dx) and
// rms_norm_param_grad (dweight). It takes layer_norm's params (the same axis and epsilon).

#include <vector>

#include "oneflowlike/ops/layer_norm.h"
#include "oneflowlike/tensor.h"

namespace ofl {

namespace functional {
/// x (rows..., cols...), weight (cols...) -> {y, inv_rms}, inv_rms = 1 / sqrt(mean(x^2) + eps)
/// shaped (rows...), y = x * inv_rms * weight.
std::vector<Tensor> rms_norm(const Tensor& x, const Tensor& weight, int64_t begin_norm_axis = -1,
                             double epsilon = 1e-6);
/// dx from dy, x, the saved inv_rms, and weight.
Tensor rms_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& inv_rms, const Tensor& weight,
                     int64_t begin_norm_axis = -1, double epsilon = 1e-6);
/// dweight from dy, x and the saved inv_rms.
Tensor rms_norm_param_grad(const Tensor& dy, const Tensor& x, const Tensor& inv_rms,
                           int64_t begin_norm_axis = -1, double epsilon = 1e-6);
}  // namespace functional

}  // namespace ofl
