// CUDA kernels of the broadcasting binary ops (kernels/cpu/elementwise.cpp), computing in
// float32 for float16 and bfloat16: equal shapes are one flat map with 16-byte vector loads,
// other shapes index each input through the CPU's coalesced broadcast plan.

#include "oneflowlike/kernels/cuda/elementwise.cuh"

namespace ofl::cuda_kernels {

namespace {

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
    launch_map(ctx, what, out.numel(), f, y, a, b);
    return;
  }
  const BroadcastIndex<2> index =
      broadcast_index<2>(what, out, {&ctx.in(0).shape(), &ctx.in(1).shape()});
  launch_for_each(ctx, what, out.numel(), [=] __device__(int64_t i) {
    int64_t off[2];
    index.offsets(i, off);
    store(y, i, f(load(a, off[0]), load(b, off[1])));
  });
}

#define OFL_CUDA_BINARY(Name, op, Out, expr)                             \
  template <class T>                                                     \
  struct Name {                                                          \
    static void run(const KernelContext& ctx) {                          \
      using V = compute_t<native_t<T>>;                                  \
      binary<T, Out>(ctx, op, [] __device__(V a, V b) { return expr; }); \
    }                                                                    \
  };
OFL_CUDA_BINARY(AddKernel, "add", T, a + b)
OFL_CUDA_BINARY(SubKernel, "sub", T, a - b)
OFL_CUDA_BINARY(MulKernel, "mul", T, a* b)
OFL_CUDA_BINARY(DivKernel, "div", T, a / b)
OFL_CUDA_BINARY(EqualKernel, "equal", bool, a == b)
OFL_CUDA_BINARY(GreaterKernel, "greater", bool, a > b)
OFL_CUDA_BINARY(LessKernel, "less", bool, a < b)
#undef OFL_CUDA_BINARY

}  // namespace

// The CPU's dtypes, and float16 and bfloat16 (computed in float32).
#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("add", kCUDA, AddKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("sub", kCUDA, SubKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("mul", kCUDA, MulKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("div", kCUDA, DivKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("equal", kCUDA, EqualKernel, OFL_FLOATS, int8_t, int32_t, int64_t, bool);
OFL_REGISTER_KERNEL("greater", kCUDA, GreaterKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
OFL_REGISTER_KERNEL("less", kCUDA, LessKernel, OFL_FLOATS, int8_t, int32_t, int64_t);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
