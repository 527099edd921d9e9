#pragma once
// layer_norm over the trailing axes [begin_norm_axis, ndim), with elementwise weight and bias,
// and its backward ops layer_norm_grad (dx) and layer_norm_param_grad (dweight, dbias).

#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct LayerNormParams {
  int64_t begin_norm_axis = -1;  // negative counts from the end
  double epsilon = 1e-5;
  OFL_PARAMS(LayerNormParams, begin_norm_axis, epsilon)
};

/// The rows and columns a layer_norm kernel works on: rows from the statistics (mean or inv_std),
/// columns from x; both what this rank holds. One place for the CPU and CUDA kernels.
struct LayerNormRowsCols {
  int64_t rows = 0, cols = 0;
};
inline LayerNormRowsCols layer_norm_rows_cols(const Tensor& x, const Tensor& stats) {
  const int64_t rows = stats.numel();
  return {rows, rows == 0 ? 0 : x.numel() / rows};
}

namespace functional {
/// x (rows..., cols...), weight and bias (cols...) -> {y, mean, inv_std}, mean and inv_std
/// shaped (rows...).
std::vector<Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               int64_t begin_norm_axis = -1, double epsilon = 1e-5);
/// dx from dy, x, the saved mean and inv_std, and weight.
Tensor layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& inv_std,
                       const Tensor& weight, int64_t begin_norm_axis = -1, double epsilon = 1e-5);
/// {dweight, dbias} from dy, x and the saved mean and inv_std.
std::vector<Tensor> layer_norm_param_grad(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                          const Tensor& inv_std, int64_t begin_norm_axis = -1,
                                          double epsilon = 1e-5);
}  // namespace functional

}  // namespace ofl
