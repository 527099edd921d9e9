// CUDA kernels of the elementwise families: unary ops and their gradients, the broadcasting
// binary ops, tensor-scalar ops, fill and cast. Each computes what its CPU kernel computes
// (kernels/cpu/unary.cpp, elementwise.cpp, scalar.cpp, creation.cpp), in float32 for the 16-bit
// dtypes.

#include <array>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/unary.h"

namespace ofl::cuda_kernels {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <class V>
__device__ __forceinline__ V normal_cdf(V x) {
  return V(0.5) * (V(1) + erf(x * V(kInvSqrt2)));
}
template <class V>
__device__ __forceinline__ V normal_pdf(V x) {
  return V(kInvSqrt2Pi) * exp(V(-0.5) * x * x);
}

// y[i] = f(x[i]) in the compute type.
template <class T, class F>
void unary(const KernelContext& ctx, const char* what, F f) {
  using N = native_t<T>;
  const N* x = data<T>(ctx.in(0));
  N* y = data<T>(ctx.out(0));
  launch_for_each(ctx, what, ctx.out(0).numel(),
                  [=] __device__(int64_t i) { store(y, i, f(load(x, i))); });
}

// dx[i] = f(saved[i], dy[i]): input 0 is the saved forward value (y or x), input 1 the gradient.
template <class T, class F>
void backward(const KernelContext& ctx, const char* what, F f) {
  using N = native_t<T>;
  const N* s = data<T>(ctx.in(0));
  const N* dy = data<T>(ctx.in(1));
  N* dx = data<T>(ctx.out(0));
  launch_for_each(ctx, what, ctx.out(0).numel(),
                  [=] __device__(int64_t i) { store(dx, i, f(load(s, i), load(dy, i))); });
}

#define OFL_CUDA_UNARY(Name, op, expr)                                       \
  template <class T>                                                         \
  struct Name {                                                              \
    static void run(const KernelContext& ctx) {                              \
      using V = compute_t<native_t<T>>;                                      \
      unary<T>(ctx, op, [] __device__(V x) -> V { return expr; });           \
    }                                                                        \
  };
OFL_CUDA_UNARY(NegKernel, "neg", -x)
OFL_CUDA_UNARY(AbsKernel, "abs", x < V(0) ? V(-x) : x)
OFL_CUDA_UNARY(ExpKernel, "exp", exp(x))
OFL_CUDA_UNARY(LogKernel, "log", log(x))
OFL_CUDA_UNARY(SqrtKernel, "sqrt", sqrt(x))
OFL_CUDA_UNARY(RsqrtKernel, "rsqrt", V(1) / sqrt(x))
OFL_CUDA_UNARY(TanhKernel, "tanh", tanh(x))
OFL_CUDA_UNARY(ReluKernel, "relu", x > V(0) ? x : V(0))
OFL_CUDA_UNARY(SigmoidKernel, "sigmoid", V(1) / (V(1) + exp(-x)))
#undef OFL_CUDA_UNARY

bool gelu_is_tanh(const KernelContext& ctx) { return ctx.p<GeluParams>().approximate == "tanh"; }

template <class T>
struct GeluKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    if (gelu_is_tanh(ctx)) {
      unary<T>(ctx, "gelu", [] __device__(V x) -> V {
        const V inner = V(kSqrt2OverPi) * (x + V(kGeluCubic) * x * x * x);
        return V(0.5) * x * (V(1) + tanh(inner));
      });
    } else {
      unary<T>(ctx, "gelu", [] __device__(V x) -> V { return x * normal_cdf(x); });
    }
  }
};

#define OFL_CUDA_BACKWARD(Name, op, expr)                                          \
  template <class T>                                                               \
  struct Name {                                                                    \
    static void run(const KernelContext& ctx) {                                    \
      using V = compute_t<native_t<T>>;                                            \
      backward<T>(ctx, op, [] __device__(V s, V dy) -> V { return expr; });        \
    }                                                                              \
  };
OFL_CUDA_BACKWARD(TanhGradKernel, "tanh_grad", dy*(V(1) - s * s))
OFL_CUDA_BACKWARD(SigmoidGradKernel, "sigmoid_grad", dy* s*(V(1) - s))
OFL_CUDA_BACKWARD(ReluGradKernel, "relu_grad", s > V(0) ? dy : V(0))
OFL_CUDA_BACKWARD(AbsGradKernel, "abs_grad", s > V(0) ? dy : (s < V(0) ? V(-dy) : V(0)))
#undef OFL_CUDA_BACKWARD

template <class T>
struct GeluGradKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    if (gelu_is_tanh(ctx)) {
      backward<T>(ctx, "gelu_grad", [] __device__(V x, V dy) -> V {
        const V x2 = x * x;
        const V t = tanh(V(kSqrt2OverPi) * (x + V(kGeluCubic) * x2 * x));
        const V du = V(kSqrt2OverPi) * (V(1) + V(3) * V(kGeluCubic) * x2);
        return dy * (V(0.5) * (V(1) + t) + V(0.5) * x * (V(1) - t * t) * du);
      });
    } else {
      backward<T>(ctx, "gelu_grad", [] __device__(V x, V dy) -> V {
        return dy * (normal_cdf(x) + x * normal_pdf(x));
      });
    }
  }
};

// Where output element i reads each input: numpy broadcasting, inputs aligned to the right,
// stride 0 along the axes an input repeats.
constexpr int kMaxDims = 8;
struct BroadcastIndex {
  int ndim = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[2][kMaxDims] = {};
  __device__ void offsets(int64_t i, int64_t* a, int64_t* b) const {
    *a = 0;
    *b = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t coord = i % dims[d];
      i /= dims[d];
      *a += coord * strides[0][d];
      *b += coord * strides[1][d];
    }
  }
};

BroadcastIndex broadcast_index(const KernelContext& ctx) {
  const Shape& out = ctx.out(0).shape();
  OFL_CHECK(out.ndim() <= kMaxDims, "[cuda] broadcasting ops take at most ", kMaxDims,
            " axes. However, got an output of shape ", out.to_string(), ".");
  BroadcastIndex index;
  index.ndim = out.ndim();
  for (int d = 0; d < out.ndim(); ++d) index.dims[d] = out.dims()[d];
  for (int k = 0; k < 2; ++k) {
    const Shape& in = ctx.in(k).shape();
    int64_t stride = 1;
    for (int d = in.ndim() - 1; d >= 0; --d) {
      const int od = d + out.ndim() - in.ndim();
      index.strides[k][od] = in.dims()[d] == 1 ? 0 : stride;
      stride *= in.dims()[d];
    }
  }
  return index;
}

// y = f(a, b) with broadcasting; Out is the output's registry type (T, or bool for comparisons).
template <class T, class Out, class F>
void binary(const KernelContext& ctx, const char* what, F f) {
  using N = native_t<T>;
  using NO = native_t<Out>;
  const N* a = data<T>(ctx.in(0));
  const N* b = data<T>(ctx.in(1));
  NO* y = data<Out>(ctx.out(0));
  const Shape& out = ctx.out(0).shape();
  if (ctx.in(0).shape() == out && ctx.in(1).shape() == out) {
    launch_for_each(ctx, what, out.numel(),
                    [=] __device__(int64_t i) { store(y, i, f(load(a, i), load(b, i))); });
    return;
  }
  const BroadcastIndex index = broadcast_index(ctx);
  launch_for_each(ctx, what, out.numel(), [=] __device__(int64_t i) {
    int64_t ia, ib;
    index.offsets(i, &ia, &ib);
    store(y, i, f(load(a, ia), load(b, ib)));
  });
}

#define OFL_CUDA_BINARY(Name, op, Out, expr)                                      \
  template <class T>                                                              \
  struct Name {                                                                   \
    static void run(const KernelContext& ctx) {                                   \
      using V = compute_t<native_t<T>>;                                           \
      binary<T, Out>(ctx, op, [] __device__(V a, V b) { return expr; });          \
    }                                                                             \
  };
OFL_CUDA_BINARY(AddKernel, "add", T, a + b)
OFL_CUDA_BINARY(SubKernel, "sub", T, a - b)
OFL_CUDA_BINARY(MulKernel, "mul", T, a* b)
OFL_CUDA_BINARY(DivKernel, "div", T, a / b)
OFL_CUDA_BINARY(EqualKernel, "equal", bool, a == b)
OFL_CUDA_BINARY(GreaterKernel, "greater", bool, a > b)
OFL_CUDA_BINARY(LessKernel, "less", bool, a < b)
#undef OFL_CUDA_BINARY

// The scalar converted to the compute type once, as the CPU kernels convert it to T.
template <class T>
compute_t<native_t<T>> scalar_of(const KernelContext& ctx) {
  return static_cast<compute_t<native_t<T>>>(ctx.p<ScalarParams>().scalar);
}

#define OFL_CUDA_SCALAR(Name, op, expr)                                            \
  template <class T>                                                               \
  struct Name {                                                                    \
    static void run(const KernelContext& ctx) {                                    \
      using V = compute_t<native_t<T>>;                                            \
      const V s = scalar_of<T>(ctx);                                               \
      unary<T>(ctx, op, [s] __device__(V x) -> V { return expr; });                \
    }                                                                              \
  };
OFL_CUDA_SCALAR(ScalarAddKernel, "scalar_add", x + s)
OFL_CUDA_SCALAR(ScalarMulKernel, "scalar_mul", x* s)
OFL_CUDA_SCALAR(ScalarPowKernel, "scalar_pow", pow(x, s))
OFL_CUDA_SCALAR(ScalarRpowKernel, "scalar_rpow", pow(s, x))
#undef OFL_CUDA_SCALAR

template <class T>
struct FillKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    N* y = data<T>(ctx.out(0));
    const double value = ctx.p<FillParams>().value;
    launch_for_each(ctx, "fill", ctx.out(0).numel(),
                    [=] __device__(int64_t i) { store(y, i, value); });
  }
};

template <class NF, class NT>
struct CastOp {
  const NF* x;
  NT* y;
  __device__ void operator()(int64_t i) const {
    if constexpr (std::is_same_v<NT, bool>) {
      store(y, i, load(x, i) != compute_t<NF>(0));
    } else {
      store(y, i, load(x, i));
    }
  }
};

template <class From, class To>
void cast_to(const KernelContext& ctx) {
  const CastOp<native_t<From>, native_t<To>> op{data<From>(ctx.in(0)), data<To>(ctx.out(0))};
  launch_for_each(ctx, "cast", ctx.in(0).numel(), op);
}

template <class From>
struct CastKernel {
  static void run(const KernelContext& ctx) {
    visit_dtype(ctx.out(0).dtype(), [&]<class To>() { cast_to<From, To>(ctx); });
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16
OFL_REGISTER_KERNEL("neg", kCUDA, NegKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("abs", kCUDA, AbsKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("exp", kCUDA, ExpKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("log", kCUDA, LogKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("sqrt", kCUDA, SqrtKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("rsqrt", kCUDA, RsqrtKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("tanh", kCUDA, TanhKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("relu", kCUDA, ReluKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("sigmoid", kCUDA, SigmoidKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("gelu", kCUDA, GeluKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("tanh_grad", kCUDA, TanhGradKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("sigmoid_grad", kCUDA, SigmoidGradKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("relu_grad", kCUDA, ReluGradKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("abs_grad", kCUDA, AbsGradKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("gelu_grad", kCUDA, GeluGradKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("add", kCUDA, AddKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("sub", kCUDA, SubKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("mul", kCUDA, MulKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("div", kCUDA, DivKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("equal", kCUDA, EqualKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("greater", kCUDA, GreaterKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("less", kCUDA, LessKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_add", kCUDA, ScalarAddKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_mul", kCUDA, ScalarMulKernel, OFL_FLOATS, double, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_pow", kCUDA, ScalarPowKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("scalar_rpow", kCUDA, ScalarRpowKernel, OFL_FLOATS, double);
OFL_REGISTER_KERNEL("fill", kCUDA, FillKernel, OFL_FLOATS, double, int8_t, int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("cast", kCUDA, CastKernel, OFL_FLOATS, double, int8_t, int32_t, int64_t, bool);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
