// CPU kernels of layer_norm and its backward ops. x is viewed as (rows, cols) with rows the
// number of elements of mean; statistics accumulate in double.

#include "oneflowlike/ops/layer_norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/cpu/row_blocks.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Inputs (x, weight, bias) -> (y, mean, inv_std).
template <class T>
struct LayerNormKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    const T* w = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    T* y = ctx.out(0).data<T>();
    T* mean = ctx.out(1).data<T>();
    T* inv_std = ctx.out(2).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(0), ctx.out(1));
    const double eps = ctx.p<LayerNormParams>().epsilon;
    parallel_for(rows, items_per_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        const double sum = lane_sums<1>(
            cols, [&](int64_t c) { return std::array<double, 1>{static_cast<double>(xr[c])}; })[0];
        const double mu = cols > 0 ? sum / cols : 0.0;
        // Two passes: no cancellation for large means.
        const double sq = lane_sums<1>(cols, [&](int64_t c) {
          const double d = xr[c] - mu;
          return std::array<double, 1>{d * d};
        })[0];
        const double var = cols > 0 ? sq / cols : 0.0;
        const T m = static_cast<T>(mu);
        const T is = static_cast<T>(1.0 / std::sqrt(var + eps));
        mean[r] = m;
        inv_std[r] = is;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * is * w[c] + bias[c];
      }
    });
  }
};

// Inputs (dy, x, mean, inv_std, weight) -> dx. With g = dy * weight and xhat the normalised x:
//   dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)).
template <class T>
struct LayerNormGradKernel {
  static void run(const KernelContext& ctx) {
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    const T* mean = ctx.in(2).data<T>();
    const T* inv_std = ctx.in(3).data<T>();
    const T* w = ctx.in(4).data<T>();
    T* dx = ctx.out(0).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    parallel_for(rows, items_per_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* dyr = dy + r * cols;
        const T* xr = x + r * cols;
        T* dxr = dx + r * cols;
        const T m = mean[r], is = inv_std[r];
        const auto [sum_g, sum_g_xhat] = lane_sums<2>(cols, [&](int64_t c) {
          const double g = dyr[c] * w[c];
          return std::array<double, 2>{g, g * ((xr[c] - m) * is)};
        });
        const T mean_g = static_cast<T>(sum_g / cols);
        const T mean_g_xhat = static_cast<T>(sum_g_xhat / cols);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
          const T xhat = (xr[c] - m) * is;
          dxr[c] = is * (dyr[c] * w[c] - mean_g - xhat * mean_g_xhat);
        }
      }
    });
  }
};

// Inputs (dy, x, mean, inv_std) -> (dweight, dbias): column sums of dy * xhat and of dy, by
// row blocks (Note [Row-blocked column sums]).
template <class T>
struct LayerNormParamGradKernel {
  static void run(const KernelContext& ctx) {
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    const T* mean = ctx.in(2).data<T>();
    const T* inv_std = ctx.in(3).data<T>();
    T* dw = ctx.out(0).data<T>();
    T* db = ctx.out(1).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    const std::vector<double> sums =
        row_blocked_column_sums(rows, cols, /*terms=*/2, [&](int64_t r, double* acc) {
          const T* dyr = dy + r * cols;
          const T* xr = x + r * cols;
          const T m = mean[r], is = inv_std[r];
          double* acc_b = acc + cols;
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) {
            acc[c] += dyr[c] * ((xr[c] - m) * is);
            acc_b[c] += dyr[c];
          }
        });
    for (int64_t c = 0; c < cols; ++c) {
      dw[c] = static_cast<T>(sums[c]);
      db[c] = static_cast<T>(sums[cols + c]);
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("layer_norm", kCPU, LayerNormKernel, float, double);
OFL_REGISTER_KERNEL("layer_norm_grad", kCPU, LayerNormGradKernel, float, double);
OFL_REGISTER_KERNEL("layer_norm_param_grad", kCPU, LayerNormParamGradKernel, float, double);

// float16 and bfloat16 through the float32 kernels (Note [Widened kernels] in widened.h).
OFL_REGISTER_WIDENED_KERNEL("layer_norm", LayerNormKernel);
OFL_REGISTER_WIDENED_KERNEL("layer_norm_grad", LayerNormGradKernel);
OFL_REGISTER_WIDENED_KERNEL("layer_norm_param_grad", LayerNormParamGradKernel);

}  // namespace ofl::cpu
