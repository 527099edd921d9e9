// CPU kernels of the tensor-scalar ops. The scalar is converted to the tensor's dtype once.

#include "oneflowlike/ops/scalar.h"

#include <cmath>

#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/widened.h"

namespace ofl::cpu {

namespace {

// pow is ~20x an add, so it pays for a thread sooner.
constexpr int64_t kPowGrain = kParallelGrain / 16;

template <class T>
T scalar_as(const KernelContext& ctx) {
  return static_cast<T>(ctx.p<ScalarParams>().scalar);
}

template <class T>
struct ScalarAddKernel {
  static void run(const KernelContext& ctx) {
    const T s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kParallelGrain, [s](T x) { return static_cast<T>(x + s); });
  }
};

template <class T>
struct ScalarMulKernel {
  static void run(const KernelContext& ctx) {
    const T s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kParallelGrain, [s](T x) { return static_cast<T>(x * s); });
  }
};

// The common exponents get multiply/sqrt loops that vectorise instead of calls to pow.
template <class T>
struct ScalarPowKernel {
  static void run(const KernelContext& ctx) {
    const T s = scalar_as<T>(ctx);
    if (s == T(2)) {
      unary_kernel<T>(ctx, kParallelGrain, [](T x) { return x * x; });
    } else if (s == T(3)) {
      unary_kernel<T>(ctx, kParallelGrain, [](T x) { return x * x * x; });
    } else if (s == T(1)) {
      unary_kernel<T>(ctx, kParallelGrain, [](T x) { return x; });
    } else if (s == T(0.5)) {
      unary_kernel<T>(ctx, kParallelGrain, [](T x) { return std::sqrt(x); });
    } else if (s == T(-1)) {
      unary_kernel<T>(ctx, kParallelGrain, [](T x) { return T(1) / x; });
    } else {
      unary_kernel<T>(ctx, kPowGrain, [s](T x) { return std::pow(x, s); });
    }
  }
};

template <class T>
struct ScalarRpowKernel {
  static void run(const KernelContext& ctx) {
    const T s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kPowGrain, [s](T x) { return std::pow(s, x); });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("scalar_add", kCPU, ScalarAddKernel, float, double, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_mul", kCPU, ScalarMulKernel, float, double, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_pow", kCPU, ScalarPowKernel, float, double);
OFL_REGISTER_KERNEL("scalar_rpow", kCPU, ScalarRpowKernel, float, double);

// float16 and bfloat16 through the float32 kernels (Note [Widened kernels] in widened.h).
OFL_REGISTER_WIDENED_KERNEL("scalar_add", ScalarAddKernel);
OFL_REGISTER_WIDENED_KERNEL("scalar_mul", ScalarMulKernel);
OFL_REGISTER_WIDENED_KERNEL("scalar_pow", ScalarPowKernel);
OFL_REGISTER_WIDENED_KERNEL("scalar_rpow", ScalarRpowKernel);

}  // namespace ofl::cpu
