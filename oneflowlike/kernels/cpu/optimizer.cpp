// CPU kernels of the fused optimizer updates; each element is independent, so the loops split
// over threads. Formulas follow torch.optim (single-tensor path) step for step.

#include "oneflowlike/ops/optimizer.h"

#include <cmath>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Inputs: param, grad, momentum_buffer, lr ().
template <class T>
struct SgdUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<SgdParams>();
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* buffer = ctx.in(2).data<T>();
    const T lr = *ctx.in(3).data<T>();
    const T momentum = static_cast<T>(p.momentum);
    const T keep = static_cast<T>(1.0 - p.dampening);
    const T weight_decay = static_cast<T>(p.weight_decay);
    const bool use_momentum = p.momentum != 0, nesterov = p.nesterov;
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T d = grad[i];
        if (weight_decay != T(0)) d += weight_decay * param[i];
        if (use_momentum) {
          const T b = momentum * buffer[i] + keep * d;
          buffer[i] = b;
          d = nesterov ? d + momentum * b : b;
        }
        param[i] -= lr * d;
      }
    });
  }
};

// Inputs: param, grad, exp_avg, exp_avg_sq, lr (), step ().
template <class T>
struct AdamUpdateKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<AdamParams>();
    T* param = ctx.in(0).data<T>();
    const T* grad = ctx.in(1).data<T>();
    T* exp_avg = ctx.in(2).data<T>();
    T* exp_avg_sq = ctx.in(3).data<T>();
    const double lr = static_cast<double>(*ctx.in(4).data<T>());
    const double step = static_cast<double>(*ctx.in(5).data<T>());
    const double bias_correction1 = 1.0 - std::pow(p.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(p.beta2, step);
    const T step_size = static_cast<T>(lr / bias_correction1);
    const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    const T one_minus_beta1 = static_cast<T>(1.0 - p.beta1);
    const T beta2 = static_cast<T>(p.beta2), one_minus_beta2 = static_cast<T>(1.0 - p.beta2);
    const T epsilon = static_cast<T>(p.epsilon);
    const bool decoupled = p.decoupled_weight_decay;
    const T weight_decay = static_cast<T>(p.weight_decay);
    const T decay_factor = static_cast<T>(1.0 - lr * p.weight_decay);
    const bool use_weight_decay = p.weight_decay != 0;
    parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T g = grad[i];
        T x = param[i];
        if (use_weight_decay) {
          if (decoupled) {
            x *= decay_factor;
          } else {
            g += weight_decay * x;
          }
        }
        const T m = exp_avg[i] + one_minus_beta1 * (g - exp_avg[i]);
        const T v = beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const T denom = std::sqrt(v) / bias_correction2_sqrt + epsilon;
        param[i] = x - step_size * (m / denom);
      }
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("sgd_update", kCPU, SgdUpdateKernel, float, double);
OFL_REGISTER_KERNEL("adam_update", kCPU, AdamUpdateKernel, float, double);

}  // namespace ofl::cpu
