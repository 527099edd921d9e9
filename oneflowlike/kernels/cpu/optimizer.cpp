// CPU kernels of the fused optimizer updates; each element is independent, so the loops split
// over threads. The per-element math is kernels/optimizer_update.h, which the CUDA kernels share.

#include "oneflowlike/ops/optimizer.h"

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/optimizer_update.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Inputs: param, grad, momentum_buffer, lr ().
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
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

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step ().
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
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

}  // namespace

OFL_REGISTER_KERNEL("sgd_update", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCPU, AdamUpdateKernel, float, double);

}  // namespace ofl::cpu
