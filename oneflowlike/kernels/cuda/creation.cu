// CUDA kernels of fill, arange and cast (kernels/cpu/creation.cpp). Values reach float16 and
// bfloat16 through float32, rounded to nearest even, as the CPU converts them.

#include <cmath>
#include <type_traits>

#include "oneflowlike/kernels/cuda/common.cuh"
#include "oneflowlike/ops/creation.h"

namespace ofl::cuda_kernels {

namespace {

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

// Element i of output 0 is element first + i of the logical arange: a piece of a split arange
// holds the values of its logical positions. start + k * step is one fused multiply-add, as
// the CPU computes it (std::fma), so both give the same double before it is converted.
template <class T>
struct ArangeKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const auto& p = ctx.p<ArangeParams>();
    const int64_t first = ctx.output_region ? (*ctx.output_region)[0].begin : 0;
    const double start = p.start, step = p.step;
    N* y = data<T>(ctx.out(0));
    launch_for_each(ctx, "arange", ctx.out(0).numel(), [=] __device__(int64_t i) {
      store(y, i, fma(static_cast<double>(first + i), step, start));
    });
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

OFL_REGISTER_KERNEL("fill", kCUDA, FillKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);
OFL_REGISTER_KERNEL("arange", kCUDA, ArangeKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t);
OFL_REGISTER_KERNEL("cast", kCUDA, CastKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);

}  // namespace ofl::cuda_kernels
