// CPU kernels of the tensor-scalar ops. The scalar is converted to the tensor's dtype once.

#include "oneflowlike/ops/scalar.h"

#include <cmath>

#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/widened.h"

namespace ofl::cpu {

namespace {

// pow is ~20x an add, so it pays for a thread sooner.
constexpr int64_t kPowGrain = kParallelGrain / 16;

// The scalar in the type the tensor computes in (compute_of: float32 for 16-bit types, Note
// [Native bfloat16 loops] in widened.h, as the Widened kernel's float32 kernel had it).
template <class T>
compute_of<T> scalar_as(const KernelContext& ctx) {
  return static_cast<compute_of<T>>(ctx.p<ScalarParams>().scalar);
}

template <class T>
struct ScalarAddKernel {
  static void run(const KernelContext& ctx) {
    using C = compute_of<T>;
    const C s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kParallelGrain, [s](C x) { return static_cast<C>(x + s); });
  }
};

template <class T>
struct ScalarMulKernel {
  static void run(const KernelContext& ctx) {
    using C = compute_of<T>;
    const C s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kParallelGrain, [s](C x) { return static_cast<C>(x * s); });
  }
};

// The common exponents get multiply/sqrt loops that vectorise instead of calls to pow.
template <class T>
struct ScalarPowKernel {
  static void run(const KernelContext& ctx) {
    using C = compute_of<T>;
    const C s = scalar_as<T>(ctx);
    if (s == C(2)) {
      unary_kernel<T>(ctx, kParallelGrain, [](C x) { return x * x; });
    } else if (s == C(3)) {
      unary_kernel<T>(ctx, kParallelGrain, [](C x) { return x * x * x; });
    } else if (s == C(1)) {
      unary_kernel<T>(ctx, kParallelGrain, [](C x) { return x; });
    } else if (s == C(0.5)) {
      unary_kernel<T>(ctx, kParallelGrain, [](C x) { return std::sqrt(x); });
    } else if (s == C(-1)) {
      unary_kernel<T>(ctx, kParallelGrain, [](C x) { return C(1) / x; });
    } else {
      unary_kernel<T>(ctx, kPowGrain, [s](C x) { return std::pow(x, s); });
    }
  }
};

template <class T>
struct ScalarRpowKernel {
  static void run(const KernelContext& ctx) {
    using C = compute_of<T>;
    const C s = scalar_as<T>(ctx);
    unary_kernel<T>(ctx, kPowGrain, [s](C x) { return std::pow(s, x); });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("scalar_add", kCPU, ScalarAddKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_mul", kCPU, ScalarMulKernel, float, double, bfloat16, float16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("scalar_pow", kCPU, ScalarPowKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("scalar_rpow", kCPU, ScalarRpowKernel, float, double, bfloat16, float16);

}  // namespace ofl::cpu
