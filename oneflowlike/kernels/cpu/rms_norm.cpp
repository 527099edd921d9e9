// CPU kernels of rms_norm and its backward ops. x is viewed as (rows, cols) with rows the
// number of elements of inv_rms; sums accumulate in double, as layer_norm's do. float16 and
// bfloat16 run the float32 row functions on widened rows (Note [Native bfloat16 rows] in
// wide_rows.h).

#include "oneflowlike/ops/rms_norm.h"

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

// One row: y and the row's inv_rms.
template <class T>
void forward_row(const T* xr, const T* w, T* yr, T* inv_rms, int64_t cols, double eps) {
  const double sq = lane_sums<1>(cols, [&](int64_t c) {
    return std::array<double, 1>{static_cast<double>(xr[c]) * xr[c]};
  })[0];
  const double mean_sq = cols > 0 ? sq / cols : 0.0;
  const T ir = static_cast<T>(1.0 / std::sqrt(mean_sq + eps));
  *inv_rms = ir;
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * ir * w[c];
}

// One row of dx = inv_rms * (g - xhat * mean(g * xhat)), g = dy * w.
template <class T>
void input_grad_row(const T* dyr, const T* xr, T ir, const T* w, T* dxr, int64_t cols) {
  const double sum_g_xhat = lane_sums<1>(cols, [&](int64_t c) {
    return std::array<double, 1>{static_cast<double>(dyr[c] * w[c]) * (xr[c] * ir)};
  })[0];
  const T mean_g_xhat = static_cast<T>(sum_g_xhat / cols);
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    dxr[c] = ir * (dyr[c] * w[c] - (xr[c] * ir) * mean_g_xhat);
  }
}

// One row's dy * xhat, added into acc.
template <class T>
void param_grad_row(const T* dyr, const T* xr, T ir, int64_t cols, double* acc) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) acc[c] += dyr[c] * (xr[c] * ir);
}

// Inputs (x, weight) -> (y, inv_rms).
template <class T>
struct RmsNormKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    const T* w = ctx.in(1).data<T>();
    T* y = ctx.out(0).data<T>();
    T* inv_rms = ctx.out(1).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(0), ctx.out(1));
    const double eps = ctx.p<LayerNormParams>().epsilon;
    parallel_for(rows, items_per_grain(cols), [&](int64_t begin, int64_t end) {
      if constexpr (is_16bit_float<T>) {
        const float* wf = WideRows::widened(0, w, cols);
        float* yf = WideRows::row(1, cols);
        for (int64_t r = begin; r < end; ++r) {
          const float* xf = WideRows::widened(2, x + r * cols, cols);
          float ir;
          forward_row<float>(xf, wf, yf, &ir, cols, eps);
          WideRows::round(yf, y + r * cols, cols);
          inv_rms[r] = T(ir);
        }
        WideRows::trim();
      } else {
        for (int64_t r = begin; r < end; ++r) {
          forward_row<T>(x + r * cols, w, y + r * cols, inv_rms + r, cols, eps);
        }
      }
    });
  }
};

// Inputs (dy, x, inv_rms, weight) -> dx.
template <class T>
struct RmsNormGradKernel {
  static void run(const KernelContext& ctx) {
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    const T* inv_rms = ctx.in(2).data<T>();
    const T* w = ctx.in(3).data<T>();
    T* dx = ctx.out(0).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    parallel_for(rows, items_per_grain(cols), [&](int64_t begin, int64_t end) {
      if constexpr (is_16bit_float<T>) {
        const float* wf = WideRows::widened(0, w, cols);
        float* dxf = WideRows::row(1, cols);
        for (int64_t r = begin; r < end; ++r) {
          const float* dyf = WideRows::widened(2, dy + r * cols, cols);
          const float* xf = WideRows::widened(3, x + r * cols, cols);
          input_grad_row<float>(dyf, xf, static_cast<float>(inv_rms[r]), wf, dxf, cols);
          WideRows::round(dxf, dx + r * cols, cols);
        }
        WideRows::trim();
      } else {
        for (int64_t r = begin; r < end; ++r) {
          input_grad_row<T>(dy + r * cols, x + r * cols, inv_rms[r], w, dx + r * cols, cols);
        }
      }
    });
  }
};

// Inputs (dy, x, inv_rms) -> dweight, the column sums of dy * xhat, by row blocks (Note
// [Row-blocked column sums]).
template <class T>
struct RmsNormParamGradKernel {
  static void run(const KernelContext& ctx) {
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    const T* inv_rms = ctx.in(2).data<T>();
    T* dw = ctx.out(0).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    const std::vector<double> sums =
        row_blocked_column_sums(rows, cols, /*terms=*/1, [&](int64_t r, double* acc) {
          if constexpr (is_16bit_float<T>) {
            const float* dyf = WideRows::widened(0, dy + r * cols, cols);
            const float* xf = WideRows::widened(1, x + r * cols, cols);
            param_grad_row<float>(dyf, xf, static_cast<float>(inv_rms[r]), cols, acc);
          } else {
            param_grad_row<T>(dy + r * cols, x + r * cols, inv_rms[r], cols, acc);
          }
        });
    // 16-bit types through float, as the Widened kernel rounded the float32 kernel's outputs.
    using Out = row_compute_of<T>;
    for (int64_t c = 0; c < cols; ++c) dw[c] = static_cast<T>(static_cast<Out>(sums[c]));
  }
};

}  // namespace

OFL_REGISTER_KERNEL("rms_norm", kCPU, RmsNormKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("rms_norm_grad", kCPU, RmsNormGradKernel, float, double, float16, bfloat16);
OFL_REGISTER_KERNEL("rms_norm_param_grad", kCPU, RmsNormParamGradKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cpu
