// CPU kernels of the unary ops and their fused backward ops: flat loops over contiguous
// tensors, split over the cores when large. exp, tanh, sigmoid and gelu use vec_math so that
// their float loops vectorise (Note [Vectorisable math]).

#include "oneflowlike/ops/unary.h"

#include <cmath>
#include <numbers>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

bool avx512_loops() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}

namespace {

// Transcendental functions cost ~10x an add, so they pay for a thread sooner.
constexpr int64_t kTranscendentalGrain = kParallelGrain / 8;

// out[i] = f(a[i], dy[i]) for the backward ops, f computing in compute_of<T>, flattened into
// the loop as unary_loop's is (Note [Vectorisable math] in vec_math.h).
template <class T, class F>
[[gnu::flatten]] void backward_loop(const T* a, const T* dy, T* dx, int64_t begin, int64_t end,
                                    const F& f) {
  using C = compute_of<T>;
  for (int64_t i = begin; i < end; ++i) {
    dx[i] = static_cast<T>(f(static_cast<C>(a[i]), static_cast<C>(dy[i])));
  }
}

// Also compiled for x86-64-v4 (Note [AVX-512 loops] in unary_functions.h).
template <class T, class F>
[[gnu::flatten, gnu::target("arch=x86-64-v4,prefer-vector-width=512")]] void backward_loop_v4(
    const T* a, const T* dy, T* dx, int64_t begin, int64_t end, const F& f) {
  using C = compute_of<T>;
  for (int64_t i = begin; i < end; ++i) {
    dx[i] = static_cast<T>(f(static_cast<C>(a[i]), static_cast<C>(dy[i])));
  }
}

template <class T, class F>
void backward_kernel(const KernelContext& ctx, int64_t grain, F f) {
  const T* a = ctx.in(0).data<T>();
  const T* dy = ctx.in(1).data<T>();
  T* dx = ctx.out(0).data<T>();
  const bool wide = avx512_loops();
  parallel_for(ctx.out(0).numel(), grain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float16>) {  // Note [float16 blocks] in widened.h
      float16_blocks<2>({a, dy}, dx, begin, end, [&](auto& v, int64_t n) {
        if (wide) {
          backward_loop_v4(v[0], v[1], v[0], 0, n, f);
        } else {
          backward_loop(v[0], v[1], v[0], 0, n, f);
        }
      });
    } else if (wide) {
      backward_loop_v4(a, dy, dx, begin, end, f);
    } else {
      backward_loop(a, dy, dx, begin, end, f);
    }
  });
}

template <class T>
struct NegKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kParallelGrain, [](auto x) { return unary_fn::neg(x); });
  }
};
template <class T>
struct AbsKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kParallelGrain, [](auto x) { return unary_math::abs(x); });
  }
};
template <class T>
struct ExpKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::exp(x); });
  }
};
template <class T>
struct LogKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::log(x); });
  }
};
template <class T>
struct SqrtKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kParallelGrain, [](auto x) { return unary_fn::sqrt(x); });
  }
};
template <class T>
struct RsqrtKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kParallelGrain, [](auto x) { return unary_fn::rsqrt(x); });
  }
};
template <class T>
struct TanhKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::tanh(x); });
  }
};
template <class T>
struct ReluKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kParallelGrain, [](auto x) { return unary_fn::relu(x); });
  }
};
template <class T>
struct SigmoidKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::sigmoid(x); });
  }
};
template <class T>
struct SiluKernel {
  static void run(const KernelContext& ctx) {
    unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::silu(x); });
  }
};

// gelu(x) = x * Phi(x), Phi the standard normal CDF (vec_math::normal_cdf, accurate also in the
// lower tail where 1 + erf(x / sqrt 2) would cancel); "tanh" uses the approximation
// Phi(x) ~ (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2. The formulas, and those of the
// gradients below, are kernels/unary_math.h's, which the CUDA kernels share.

bool gelu_is_tanh(const KernelContext& ctx) { return ctx.p<GeluParams>().approximate == "tanh"; }

template <class T>
struct GeluKernel {
  static void run(const KernelContext& ctx) {
    if (gelu_is_tanh(ctx)) {
      unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::gelu_tanh(x); });
    } else {
      unary_kernel<T>(ctx, kTranscendentalGrain, [](auto x) { return unary_fn::gelu(x); });
    }
  }
};

template <class T>
struct TanhGradKernel {
  static void run(const KernelContext& ctx) {
    backward_kernel<T>(ctx, kParallelGrain,
                       [](auto y, auto dy) { return unary_math::tanh_grad(y, dy); });
  }
};
template <class T>
struct SigmoidGradKernel {
  static void run(const KernelContext& ctx) {
    backward_kernel<T>(ctx, kParallelGrain,
                       [](auto y, auto dy) { return unary_math::sigmoid_grad(y, dy); });
  }
};
template <class T>
struct ReluGradKernel {
  static void run(const KernelContext& ctx) {
    backward_kernel<T>(ctx, kParallelGrain,
                       [](auto y, auto dy) { return unary_math::relu_grad(y, dy); });
  }
};
template <class T>
struct AbsGradKernel {
  static void run(const KernelContext& ctx) {
    backward_kernel<T>(ctx, kParallelGrain,
                       [](auto x, auto dy) { return unary_math::abs_grad(x, dy); });
  }
};

template <class T>
struct SiluGradKernel {
  static void run(const KernelContext& ctx) {
    backward_kernel<T>(ctx, kTranscendentalGrain,
                       [](auto x, auto dy) { return unary_fn::silu_grad(x, dy); });
  }
};

template <class T>
struct GeluGradKernel {
  static void run(const KernelContext& ctx) {
    if (gelu_is_tanh(ctx)) {
      backward_kernel<T>(ctx, kTranscendentalGrain, [](auto x, auto dy) {
        return unary_math::gelu_tanh_grad<unary_fn::VecMath>(x, dy);
      });
    } else {
      backward_kernel<T>(ctx, kTranscendentalGrain, [](auto x, auto dy) {
        return unary_math::gelu_grad<unary_fn::VecMath>(x, dy);
      });
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("neg", kCPU, NegKernel, float, double, bfloat16, float16, int8_t, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("abs", kCPU, AbsKernel, float, double, bfloat16, float16, int8_t, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("exp", kCPU, ExpKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("log", kCPU, LogKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("sqrt", kCPU, SqrtKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("rsqrt", kCPU, RsqrtKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("tanh", kCPU, TanhKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("relu", kCPU, ReluKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("sigmoid", kCPU, SigmoidKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("gelu", kCPU, GeluKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("silu", kCPU, SiluKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("tanh_grad", kCPU, TanhGradKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("sigmoid_grad", kCPU, SigmoidGradKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("relu_grad", kCPU, ReluGradKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("abs_grad", kCPU, AbsGradKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("gelu_grad", kCPU, GeluGradKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("silu_grad", kCPU, SiluGradKernel, float, double, bfloat16, float16);

}  // namespace ofl::cpu
