// CUDA kernel of fused_elementwise (ops/fused.h): one thread per element runs the whole chain in
// registers, one read and one write, instead of the CPU's one loop per step over a cached block
// (kernels/cpu/fused.cpp). The chain is parsed on the host by the parser the CPU kernel uses and
// passed to the kernel as a small array of steps, kMaxStepsPerLaunch at a time: a longer chain
// runs as several launches, the later ones in place on the output. The loop over the steps is
// unrolled so that every step is read from the kernel's parameters at a fixed offset (a dynamic
// index could make nvcc copy the whole array to local memory in every thread), and the step
// itself is one out-of-line function, so the unrolled copies stay small.
//
// Each step calls the device function of its unary op (kernels/cuda/unary_functions.cuh, whose
// formulas are kernels/unary_math.h's, shared with the CPU), so a fused chain computes what the
// separate CUDA ops would; the scalars are converted to T once and x^2 is x * x, as on the CPU.
// The CPU's transcendental functions are vectorised polynomials and the GPU's are CUDA's libm,
// so the two devices agree to a few ulp, not bit for bit. The per-element switch costs nothing
// on the GPU (every thread takes the same branch); on the CPU it would stop the loops
// vectorising, which is why the CPU runs one loop per step instead.

#include <algorithm>
#include <vector>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/kernels/cuda/unary_functions.cuh"
#include "oneflowlike/ops/fused.h"

namespace ofl::cuda_kernels {

namespace {

constexpr int kMaxStepsPerLaunch = 8;

template <class T>
struct DeviceStep {
  FusedStep::Kind kind;
  bool square;  // scalar_pow by exactly 2, computed as x * x (as the CPU does)
  T scalar;     // the step's scalar converted to T, as the CPU converts it
};

// Up to kMaxStepsPerLaunch steps, passed by value as a kernel argument.
template <class T>
struct Program {
  int count = 0;
  DeviceStep<T> steps[kMaxStepsPerLaunch];
};

template <class T>
__device__ __noinline__ T apply_step(DeviceStep<T> step, T x) {
  switch (step.kind) {
    case FusedStep::Kind::kNeg:
      return unary_fn::neg(x);
    case FusedStep::Kind::kExp:
      return unary_fn::exp(x);
    case FusedStep::Kind::kLog:
      return unary_fn::log(x);
    case FusedStep::Kind::kSqrt:
      return unary_fn::sqrt(x);
    case FusedStep::Kind::kRsqrt:
      return unary_fn::rsqrt(x);
    case FusedStep::Kind::kTanh:
      return unary_fn::tanh(x);
    case FusedStep::Kind::kRelu:
      return unary_fn::relu(x);
    case FusedStep::Kind::kSigmoid:
      return unary_fn::sigmoid(x);
    case FusedStep::Kind::kGelu:
      return unary_fn::gelu(x);
    case FusedStep::Kind::kGeluTanh:
      return unary_fn::gelu_tanh(x);
    case FusedStep::Kind::kScalarAdd:
      return x + step.scalar;
    case FusedStep::Kind::kScalarMul:
      return x * step.scalar;
    case FusedStep::Kind::kScalarPow:
      return step.square ? x * x : host_device::pow(x, step.scalar);
  }
  return x;
}

// The 16-bit dtypes run the chain in float32 (C) and round once per launch, as the CPU's
// widened kernel (Note [Widened kernels] in kernels/cpu/widened.h) rounds once.
template <class T>
struct FusedElementwiseKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    using C = compute_t<N>;
    const std::vector<FusedStep> steps = parse_fused_steps(ctx.p<FusedElementwiseParams>().steps);
    const int64_t n = ctx.out(0).numel();
    const N* x = data<T>(ctx.in(0));
    N* y = data<T>(ctx.out(0));
    // An empty chain is the identity: one launch with no steps copies x to y.
    size_t first = 0;
    do {
      Program<C> program;
      program.count = static_cast<int>(std::min<size_t>(steps.size() - first, kMaxStepsPerLaunch));
      for (int k = 0; k < program.count; ++k) {
        const FusedStep& s = steps[first + k];
        program.steps[k] = {s.kind, s.kind == FusedStep::Kind::kScalarPow && s.scalar == 2,
                            static_cast<C>(s.scalar)};
      }
      const N* in = first == 0 ? x : y;  // later launches continue in place
      launch_for_each(ctx, "fused_elementwise", n, [=] __device__(int64_t i) {
        C v = load(in, i);
#pragma unroll
        for (int k = 0; k < kMaxStepsPerLaunch; ++k) {
          if (k < program.count) v = apply_step(program.steps[k], v);
        }
        store(y, i, v);
      });
      first += program.count;
    } while (first < steps.size());
  }
};

}  // namespace

OFL_REGISTER_KERNEL("fused_elementwise", kCUDA, FusedElementwiseKernel, float, double, float16,
                    bfloat16);

}  // namespace ofl::cuda_kernels
