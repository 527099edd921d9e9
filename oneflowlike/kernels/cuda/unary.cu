// CUDA kernels of the unary ops and their backward ops (kernels/cpu/unary.cpp): maps over
// contiguous tensors with 16-byte vector loads, computing in float32 for float16 and bfloat16.
// The per-element functions are unary_functions.cuh's, their formulas shared with the CPU.

#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/kernels/cuda/unary_functions.cuh"
#include "oneflowlike/ops/unary.h"

namespace ofl::cuda_kernels {

namespace {

// y[i] = f(x[i]) in the compute type.
template <class T, class F>
void unary(const KernelContext& ctx, const char* what, F f) {
  launch_map(ctx, what, ctx.out(0).numel(), f, data<T>(ctx.out(0)), data<T>(ctx.in(0)));
}

// dx[i] = f(saved[i], dy[i]): input 0 is the saved forward value (y or x), input 1 the gradient.
template <class T, class F>
void backward(const KernelContext& ctx, const char* what, F f) {
  launch_map(ctx, what, ctx.out(0).numel(), f, data<T>(ctx.out(0)), data<T>(ctx.in(0)),
             data<T>(ctx.in(1)));
}

#define OFL_CUDA_UNARY(Name, op, fn)                                          \
  template <class T>                                                          \
  struct Name {                                                               \
    static void run(const KernelContext& ctx) {                               \
      using V = compute_t<native_t<T>>;                                       \
      unary<T>(ctx, op, [] __device__(V x) -> V { return unary_fn::fn(x); }); \
    }                                                                         \
  };
OFL_CUDA_UNARY(NegKernel, "neg", neg)
OFL_CUDA_UNARY(AbsKernel, "abs", abs)
OFL_CUDA_UNARY(ExpKernel, "exp", exp)
OFL_CUDA_UNARY(LogKernel, "log", log)
OFL_CUDA_UNARY(SqrtKernel, "sqrt", sqrt)
OFL_CUDA_UNARY(RsqrtKernel, "rsqrt", rsqrt)
OFL_CUDA_UNARY(TanhKernel, "tanh", tanh)
OFL_CUDA_UNARY(ReluKernel, "relu", relu)
OFL_CUDA_UNARY(SigmoidKernel, "sigmoid", sigmoid)
OFL_CUDA_UNARY(SiluKernel, "silu", silu)
#undef OFL_CUDA_UNARY

bool gelu_is_tanh(const KernelContext& ctx) { return ctx.p<GeluParams>().approximate == "tanh"; }

template <class T>
struct GeluKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    if (gelu_is_tanh(ctx)) {
      unary<T>(ctx, "gelu", [] __device__(V x) -> V { return unary_fn::gelu_tanh(x); });
    } else {
      unary<T>(ctx, "gelu", [] __device__(V x) -> V { return unary_fn::gelu(x); });
    }
  }
};

#define OFL_CUDA_BACKWARD(Name, op, fn)                                                      \
  template <class T>                                                                         \
  struct Name {                                                                              \
    static void run(const KernelContext& ctx) {                                              \
      using V = compute_t<native_t<T>>;                                                      \
      backward<T>(ctx, op, [] __device__(V s, V dy) -> V { return unary_math::fn(s, dy); }); \
    }                                                                                        \
  };
OFL_CUDA_BACKWARD(TanhGradKernel, "tanh_grad", tanh_grad)
OFL_CUDA_BACKWARD(SigmoidGradKernel, "sigmoid_grad", sigmoid_grad)
OFL_CUDA_BACKWARD(ReluGradKernel, "relu_grad", relu_grad)
OFL_CUDA_BACKWARD(AbsGradKernel, "abs_grad", abs_grad)
#undef OFL_CUDA_BACKWARD

template <class T>
struct SiluGradKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    backward<T>(ctx, "silu_grad",
                [] __device__(V x, V dy) -> V { return unary_fn::silu_grad(x, dy); });
  }
};

template <class T>
struct GeluGradKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    if (gelu_is_tanh(ctx)) {
      backward<T>(ctx, "gelu_grad", [] __device__(V x, V dy) -> V {
        return unary_math::gelu_tanh_grad<DeviceMath>(x, dy);
      });
    } else {
      backward<T>(ctx, "gelu_grad", [] __device__(V x, V dy) -> V {
        return unary_math::gelu_grad<DeviceMath>(x, dy);
      });
    }
  }
};

}  // namespace

// The CPU's dtypes, and float16 and bfloat16 (computed in float32) for the floating ops.
#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("neg", kCUDA, NegKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("abs", kCUDA, AbsKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("exp", kCUDA, ExpKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("log", kCUDA, LogKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("sqrt", kCUDA, SqrtKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("rsqrt", kCUDA, RsqrtKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("tanh", kCUDA, TanhKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("relu", kCUDA, ReluKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("sigmoid", kCUDA, SigmoidKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("silu", kCUDA, SiluKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("gelu", kCUDA, GeluKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("tanh_grad", kCUDA, TanhGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("sigmoid_grad", kCUDA, SigmoidGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("relu_grad", kCUDA, ReluGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("abs_grad", kCUDA, AbsGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("gelu_grad", kCUDA, GeluGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("silu_grad", kCUDA, SiluGradKernel, OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
