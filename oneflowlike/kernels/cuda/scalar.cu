// CUDA kernels of the tensor-scalar ops (kernels/cpu/scalar.cpp): maps over contiguous tensors
// with 16-byte vector loads, computing in float32 for float16 and bfloat16.

#include "oneflowlike/kernels/cuda/elementwise.cuh"
#include "oneflowlike/kernels/cuda/unary_functions.cuh"
#include "oneflowlike/ops/scalar.h"

namespace ofl::cuda_kernels {

namespace {

// y[i] = f(x[i]) in the compute type.
template <class T, class F>
void unary(const KernelContext& ctx, const char* what, F f) {
  launch_map(ctx, what, ctx.out(0).numel(), f, data<T>(ctx.out(0)), data<T>(ctx.in(0)));
}

// The scalar converted to the compute type once, as the CPU kernels convert it to T (for
// float16 and bfloat16, whose CPU reference is float32, to float).
template <class T>
compute_t<native_t<T>> scalar_of(const KernelContext& ctx) {
  return static_cast<compute_t<native_t<T>>>(ctx.p<ScalarParams>().scalar);
}

template <class T>
struct ScalarAddKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    const V s = scalar_of<T>(ctx);
    unary<T>(ctx, "scalar_add", [s] __device__(V x) -> V { return x + s; });
  }
};

template <class T>
struct ScalarMulKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    const V s = scalar_of<T>(ctx);
    unary<T>(ctx, "scalar_mul", [s] __device__(V x) -> V { return x * s; });
  }
};

template <class V>
__device__ __forceinline__ V power(V x, V s) {
  if constexpr (std::is_same_v<V, float>) {
    return ::powf(x, s);
  } else {
    return ::pow(x, s);
  }
}

// The CPU's special exponents, so that x ** 2 is x * x on both devices.
template <class T>
struct ScalarPowKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    const V s = scalar_of<T>(ctx);
    const char* what = "scalar_pow";
    if (s == V(2)) {
      unary<T>(ctx, what, [] __device__(V x) -> V { return x * x; });
    } else if (s == V(3)) {
      unary<T>(ctx, what, [] __device__(V x) -> V { return x * x * x; });
    } else if (s == V(1)) {
      unary<T>(ctx, what, [] __device__(V x) -> V { return x; });
    } else if (s == V(0.5)) {
      unary<T>(ctx, what, [] __device__(V x) -> V { return unary_fn::sqrt(x); });
    } else if (s == V(-1)) {
      unary<T>(ctx, what, [] __device__(V x) -> V { return V(1) / x; });
    } else {
      unary<T>(ctx, what, [s] __device__(V x) -> V { return power(x, s); });
    }
  }
};

template <class T>
struct ScalarRpowKernel {
  static void run(const KernelContext& ctx) {
    using V = compute_t<native_t<T>>;
    const V s = scalar_of<T>(ctx);
    unary<T>(ctx, "scalar_rpow", [s] __device__(V x) -> V { return power(s, x); });
  }
};

}  // namespace

// The CPU's dtypes, and float16 and bfloat16 (computed in float32).
#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("scalar_add", kCUDA, ScalarAddKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_mul", kCUDA, ScalarMulKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_pow", kCUDA, ScalarPowKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scalar_rpow", kCUDA, ScalarRpowKernel, OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
