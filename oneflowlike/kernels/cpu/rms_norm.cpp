// CPU kernels of rms_norm and its backward ops. x is viewed as (rows, cols) with rows the
// number of elements of inv_rms; sums accumulate in double, as layer_norm's do.

#include "oneflowlike/ops/rms_norm.h"

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
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        const double sq = lane_sums<1>(cols, [&](int64_t c) {
          return std::array<double, 1>{static_cast<double>(xr[c]) * xr[c]};
        })[0];
        const double mean_sq = cols > 0 ? sq / cols : 0.0;
        const T ir = static_cast<T>(1.0 / std::sqrt(mean_sq + eps));
        inv_rms[r] = ir;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * ir * w[c];
      }
    });
  }
};

// Inputs (dy, x, inv_rms, weight) -> dx = inv_rms * (g - xhat * mean(g * xhat)), g = dy * w.
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
      for (int64_t r = begin; r < end; ++r) {
        const T* dyr = dy + r * cols;
        const T* xr = x + r * cols;
        T* dxr = dx + r * cols;
        const T ir = inv_rms[r];
        const double sum_g_xhat = lane_sums<1>(cols, [&](int64_t c) {
          return std::array<double, 1>{static_cast<double>(dyr[c] * w[c]) * (xr[c] * ir)};
        })[0];
        const T mean_g_xhat = static_cast<T>(sum_g_xhat / cols);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
          dxr[c] = ir * (dyr[c] * w[c] - (xr[c] * ir) * mean_g_xhat);
        }
      }
    });
  }
};

// Inputs (dy, x, inv_rms) -> dweight, the column sums of dy * xhat. Parallel over blocks of
// columns; each walks all rows, so writes never collide.
template <class T>
struct RmsNormParamGradKernel {
  static void run(const KernelContext& ctx) {
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    const T* inv_rms = ctx.in(2).data<T>();
    T* dw = ctx.out(0).data<T>();
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    // Note [Row-blocked column sums].
    const std::vector<double> sums =
        row_blocked_column_sums(rows, cols, /*terms=*/1, [&](int64_t r, double* acc) {
          const T* dyr = dy + r * cols;
          const T* xr = x + r * cols;
          const T ir = inv_rms[r];
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) acc[c] += dyr[c] * (xr[c] * ir);
        });
    for (int64_t c = 0; c < cols; ++c) dw[c] = static_cast<T>(sums[c]);
  }
};

}  // namespace

OFL_REGISTER_KERNEL("rms_norm", kCPU, RmsNormKernel, float, double);
OFL_REGISTER_KERNEL("rms_norm_grad", kCPU, RmsNormGradKernel, float, double);
OFL_REGISTER_KERNEL("rms_norm_param_grad", kCPU, RmsNormParamGradKernel, float, double);

// float16 and bfloat16 through the float32 kernels (Note [Widened kernels] in widened.h).
OFL_REGISTER_WIDENED_KERNEL("rms_norm", RmsNormKernel);
OFL_REGISTER_WIDENED_KERNEL("rms_norm_grad", RmsNormGradKernel);
OFL_REGISTER_WIDENED_KERNEL("rms_norm_param_grad", RmsNormParamGradKernel);

}  // namespace ofl::cpu
