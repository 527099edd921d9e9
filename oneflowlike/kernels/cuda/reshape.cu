// CUDA kernel of expand (kernels/cpu/reshape.cpp; reshape is a view and has no kernel): each
// output element reads its input element through the CPU's coalesced broadcast plan. It only
// moves elements, so it is instantiated per element size, not per dtype.

#include "oneflowlike/kernels/cuda/elementwise.cuh"

namespace ofl::cuda_kernels {

namespace {

template <class T>
struct ExpandKernel {
  static void run(const KernelContext& ctx) {
    using B = bits_t<T>;
    const B* x = bits<T>(ctx.in(0));
    B* y = bits<T>(ctx.out(0));
    const Shape& out = ctx.out(0).shape();
    if (out.numel() == 0) return;
    const BroadcastIndex<1> index = broadcast_index<1>("expand", out, {&ctx.in(0).shape()});
    launch_for_each(ctx, "expand", out.numel(), [=] __device__(int64_t i) {
      int64_t off[1];
      index.offsets(i, off);
      y[i] = x[off[0]];
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("expand", kCUDA, ExpandKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);

}  // namespace ofl::cuda_kernels
