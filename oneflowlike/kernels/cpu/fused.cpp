// CPU kernel of fused_elementwise: blocks of elements stay in cache while every step of the
// chain runs over them, one vectorisable loop per step. bfloat16 and float16 widen each block
// into a float32 block on the stack, run the float32 steps and round once: the Widened kernel's
// bits (the whole chain in float32) without whole-tensor copies.

#include "oneflowlike/ops/fused.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/unary_functions.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

constexpr int64_t kBlock = 1024;

// f flattened into the loop (Note [Vectorisable math] in vec_math.h), in the copy the unary
// kernels run (Note [AVX-512 loops] in unary_functions.h), so a fused chain gives the bits of
// its ops one by one on any CPU.
template <class T, class F>
[[gnu::flatten]] void apply_default(T* v, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) v[i] = f(v[i]);
}
template <class T, class F>
[[gnu::flatten, gnu::target("arch=x86-64-v4,prefer-vector-width=512")]] void apply_v4(T* v,
                                                                                      int64_t n,
                                                                                      F f) {
  for (int64_t i = 0; i < n; ++i) v[i] = f(v[i]);
}
template <class T, class F>
void apply(T* v, int64_t n, F f) {
  if (avx512_loops()) {
    apply_v4(v, n, f);
  } else {
    apply_default(v, n, f);
  }
}

template <class T>
void run_step(const FusedStep& step, T* v, int64_t n) {
  const T s = static_cast<T>(step.scalar);
  switch (step.kind) {
    case FusedStep::Kind::kNeg:
      return apply(v, n, [](T x) { return unary_fn::neg(x); });
    case FusedStep::Kind::kExp:
      return apply(v, n, [](T x) { return unary_fn::exp(x); });
    case FusedStep::Kind::kLog:
      return apply(v, n, [](T x) { return unary_fn::log(x); });
    case FusedStep::Kind::kSqrt:
      return apply(v, n, [](T x) { return unary_fn::sqrt(x); });
    case FusedStep::Kind::kRsqrt:
      return apply(v, n, [](T x) { return unary_fn::rsqrt(x); });
    case FusedStep::Kind::kTanh:
      return apply(v, n, [](T x) { return unary_fn::tanh(x); });
    case FusedStep::Kind::kRelu:
      return apply(v, n, [](T x) { return unary_fn::relu(x); });
    case FusedStep::Kind::kSigmoid:
      return apply(v, n, [](T x) { return unary_fn::sigmoid(x); });
    case FusedStep::Kind::kGelu:
      return apply(v, n, [](T x) { return unary_fn::gelu(x); });
    case FusedStep::Kind::kGeluTanh:
      return apply(v, n, [](T x) { return unary_fn::gelu_tanh(x); });
    case FusedStep::Kind::kScalarAdd:
      return apply(v, n, [s](T x) { return x + s; });
    case FusedStep::Kind::kScalarMul:
      return apply(v, n, [s](T x) { return x * s; });
    case FusedStep::Kind::kScalarPow:
      if (step.scalar == 2) return apply(v, n, [](T x) { return x * x; });
      return apply(v, n, [s](T x) { return std::pow(x, s); });
  }
}

template <class T>
struct FusedElementwiseKernel {
  static void run(const KernelContext& ctx) {
    const std::vector<FusedStep> steps = parse_fused_steps(ctx.p<FusedElementwiseParams>().steps);
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    const int64_t n = ctx.out(0).numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / kBlock / 4),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t b = begin; b < end; ++b) {
                     const int64_t first = b * kBlock, count = std::min(kBlock, n - first);
                     if constexpr (!std::is_same_v<compute_of<T>, T>) {
                       float block[kBlock];
                       for (int64_t i = 0; i < count; ++i) {
                         block[i] = static_cast<float>(x[first + i]);
                       }
                       for (const FusedStep& step : steps) run_step(step, block, count);
                       for (int64_t i = 0; i < count; ++i) y[first + i] = T(block[i]);
                     } else {
                       std::copy(x + first, x + first + count, y + first);
                       for (const FusedStep& step : steps) run_step(step, y + first, count);
                     }
                   }
                 });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("fused_elementwise", kCPU, FusedElementwiseKernel, float, double, bfloat16,
                    float16);

}  // namespace ofl::cpu
