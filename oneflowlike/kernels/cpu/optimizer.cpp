// CPU kernels of the fused optimizer updates; each element is independent, so the loops split
// over threads. The per-element math is kernels/optimizer_update.h, which the CUDA kernels share.

#include "oneflowlike/ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/kernels/optimizer_update.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// The skippable updates' last input (Note [Dynamic loss scaling]): nonzero skips the update.
template <class T>
bool skipped(const KernelContext& ctx, size_t inputs) {
  return ctx.inputs.size() > inputs && *ctx.in(static_cast<int>(inputs)).data<T>() != T(0);
}

// Inputs: param, grad, momentum_buffer, lr () [, skip ()].
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    if (skipped<T>(ctx, 4)) return;
    const auto coefficients = optimizer_update::sgd_coefficients<T>(ctx.p<SgdParams>());
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* buffer = ctx.in(2).data<T>();
    const T lr = *ctx.in(3).data<T>();
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      const auto c = coefficients;  // a local copy: stores to param cannot alias it
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::sgd_element(c, lr, grad[i], param[i], buffer[i]);
      }
    });
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step () [, skip ()].
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    if (skipped<T>(ctx, 6)) return;
    const auto coefficients = optimizer_update::adam_coefficients<T>(
        optimizer_update::adam_hyperparameters(ctx.p<AdamParams>()),
        /*lr=*/static_cast<double>(*ctx.in(4).data<T>()),
        /*step=*/static_cast<double>(*ctx.in(5).data<T>()));
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* exp_avg = ctx.in(2).data<T>();
    T* exp_avg_sq = ctx.in(3).data<T>();
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      const auto c = coefficients;
      for (int64_t i = begin; i < end; ++i) {
        optimizer_update::adam_element(c, grad[i], param[i], exp_avg[i], exp_avg_sq[i]);
      }
    });
  }
};

// x -> the number of its inf and nan elements, as float32.
template <class T>
struct CountNonfiniteKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    const int64_t n = ctx.in(0).numel();
    // One count per chunk of the elements, each written by whoever runs the chunk.
    const int64_t chunks = std::max<int64_t>(1, (n + kParallelGrain - 1) / kParallelGrain);
    std::vector<int64_t> parts(chunks, 0);
    parallel_for(chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
          // Widened without rounding: float16 and bfloat16 through float, the rest as they are.
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            parts[c] += !std::isfinite(x[i]);
          } else {
            parts[c] += !std::isfinite(static_cast<float>(x[i]));
          }
        }
      }
    });
    int64_t total = 0;
    for (int64_t p : parts) total += p;
    *ctx.out(0).data<float>() = static_cast<float>(total);
  }
};

// Inputs: scale (), good_steps (), steps (), found (), the first three updated in place.
template <class T>
struct LossScaleUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<LossScaleParams>();
    optimizer_update::loss_scale_element(
        static_cast<float>(p.growth_factor), static_cast<float>(p.backoff_factor),
        static_cast<float>(p.growth_interval), *ctx.in(3).data<float>(), *ctx.in(0).data<float>(),
        *ctx.in(1).data<float>(), *ctx.in(2).data<float>());
  }
};

// assign(dst, src): a copy into dst's storage, in place.
template <class T>
struct AssignKernel {
  static void run(const KernelContext& ctx) {
    std::memcpy(ctx.in(0).raw_data(), ctx.in(1).raw_data(), ctx.in(0).nbytes());
  }
};

}  // namespace

OFL_REGISTER_KERNEL("assign", kCPU, AssignKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCPU, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("sgd_update_skippable", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update_skippable", kCPU, AdamUpdateKernel, float, double);
OFL_REGISTER_KERNEL("count_nonfinite", kCPU, CountNonfiniteKernel, float, double, float16,
                    bfloat16);
OFL_REGISTER_KERNEL("loss_scale_update", kCPU, LossScaleUpdateKernel, float);

}  // namespace ofl::cpu
