// CPU kernels of layer_norm and its backward ops. x is viewed as (rows, cols) with rows the
// number of elements of mean; statistics accumulate in double. float16 and bfloat16 run the
// float32 row functions on widened rows (Note [Native bfloat16 rows] in wide_rows.h).

#include "oneflowlike/ops/layer_norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/cpu/row_blocks.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// One row: y, and the row's mean and inv_std.
template <class T>
void forward_row(const T* xr, const T* w, const T* bias, T* yr, T* mean, T* inv_std, int64_t cols,
                 double eps) {
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
  *mean = m;
  *inv_std = is;
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * is * w[c] + bias[c];
}

// One row of dx. With g = dy * weight and xhat the normalised x:
//   dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)).
template <class T>
void input_grad_row(const T* dyr, const T* xr, T m, T is, const T* w, T* dxr, int64_t cols) {
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

// One row's terms of the parameter gradients: acc[c] += dy * xhat, acc[cols + c] += dy.
template <class T>
void param_grad_row(const T* dyr, const T* xr, T m, T is, int64_t cols, double* acc) {
  double* acc_b = acc + cols;
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    acc[c] += dyr[c] * ((xr[c] - m) * is);
    acc_b[c] += dyr[c];
  }
}

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
      if constexpr (is_16bit_float<T>) {
        const float* wf = WideRows::widened(0, w, cols);
        const float* bf = WideRows::widened(1, bias, cols);
        float* yf = WideRows::row(2, cols);
        for (int64_t r = begin; r < end; ++r) {
          const float* xf = WideRows::widened(3, x + r * cols, cols);
          float m, is;
          forward_row<float>(xf, wf, bf, yf, &m, &is, cols, eps);
          WideRows::round(yf, y + r * cols, cols);
          mean[r] = T(m);
          inv_std[r] = T(is);
        }
        WideRows::trim();
      } else {
        for (int64_t r = begin; r < end; ++r) {
          forward_row<T>(x + r * cols, w, bias, y + r * cols, mean + r, inv_std + r, cols, eps);
        }
      }
    });
  }
};

// Inputs (dy, x, mean, inv_std, weight) -> dx.
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
      if constexpr (is_16bit_float<T>) {
        const float* wf = WideRows::widened(0, w, cols);
        float* dxf = WideRows::row(1, cols);
        for (int64_t r = begin; r < end; ++r) {
          const float* dyf = WideRows::widened(2, dy + r * cols, cols);
          const float* xf = WideRows::widened(3, x + r * cols, cols);
          input_grad_row<float>(dyf, xf, static_cast<float>(mean[r]),
                                static_cast<float>(inv_std[r]), wf, dxf, cols);
          WideRows::round(dxf, dx + r * cols, cols);
        }
        WideRows::trim();
      } else {
        for (int64_t r = begin; r < end; ++r) {
          input_grad_row<T>(dy + r * cols, x + r * cols, mean[r], inv_std[r], w, dx + r * cols,
                            cols);
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
          if constexpr (is_16bit_float<T>) {
            const float* dyf = WideRows::widened(0, dy + r * cols, cols);
            const float* xf = WideRows::widened(1, x + r * cols, cols);
            param_grad_row<float>(dyf, xf, static_cast<float>(mean[r]),
                                  static_cast<float>(inv_std[r]), cols, acc);
          } else {
            param_grad_row<T>(dy + r * cols, x + r * cols, mean[r], inv_std[r], cols, acc);
          }
        });
    // 16-bit types through float, as the Widened kernel rounded the float32 kernel's outputs.
    using Out = row_compute_of<T>;
    for (int64_t c = 0; c < cols; ++c) {
      dw[c] = static_cast<T>(static_cast<Out>(sums[c]));
      db[c] = static_cast<T>(static_cast<Out>(sums[cols + c]));
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("layer_norm", kCPU, LayerNormKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("layer_norm_grad", kCPU, LayerNormGradKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("layer_norm_param_grad", kCPU, LayerNormParamGradKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cpu
