// CPU kernels of the broadcasting binary ops.

#include "oneflowlike/kernels/cpu/broadcast.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// y = f(a, b) with broadcasting; f computes in compute_of<T> (Note [Native bfloat16 loops] in
// widened.h) and its result is converted to Out.
template <class T, class Out, class F>
void binary_kernel(const KernelContext& ctx, F f) {
  using C = compute_of<T>;
  const auto g = [&f](T x, T y) {
    return static_cast<Out>(f(static_cast<C>(x), static_cast<C>(y)));
  };
  const T* a = ctx.in(0).data<T>();
  const T* b = ctx.in(1).data<T>();
  Out* y = ctx.out(0).data<Out>();
  const Shape& out = ctx.out(0).shape();
  if (ctx.in(0).shape() == out && ctx.in(1).shape() == out) {  // the common flat case
    parallel_for(out.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = g(a[i], b[i]);
    });
    return;
  }
  for_each_broadcast_run<2>(out, {&ctx.in(0).shape(), &ctx.in(1).shape()},
                            [&](int64_t o, const std::array<int64_t, 2>& off,
                                const std::array<int64_t, 2>& step, int64_t n) {
                              const T* pa = a + off[0];
                              const T* pb = b + off[1];
                              Out* py = y + o;
                              if (step[0] == 1 && step[1] == 1) {
                                for (int64_t i = 0; i < n; ++i) py[i] = g(pa[i], pb[i]);
                              } else if (step[0] == 1 && step[1] == 0) {
                                const T vb = *pb;
                                for (int64_t i = 0; i < n; ++i) py[i] = g(pa[i], vb);
                              } else if (step[0] == 0 && step[1] == 1) {
                                const T va = *pa;
                                for (int64_t i = 0; i < n; ++i) py[i] = g(va, pb[i]);
                              } else {
                                for (int64_t i = 0; i < n; ++i) {
                                  py[i] = g(pa[i * step[0]], pb[i * step[1]]);
                                }
                              }
                            });
}

template <class T>
struct AddKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, T>(ctx, [](auto x, auto y) { return x + y; });
  }
};
template <class T>
struct SubKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, T>(ctx, [](auto x, auto y) { return x - y; });
  }
};
template <class T>
struct MulKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, T>(ctx, [](auto x, auto y) { return x * y; });
  }
};
template <class T>
struct DivKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, T>(ctx, [](auto x, auto y) { return x / y; });
  }
};
template <class T>
struct EqualKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, bool>(ctx, [](auto x, auto y) { return x == y; });
  }
};
template <class T>
struct GreaterKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, bool>(ctx, [](auto x, auto y) { return x > y; });
  }
};
template <class T>
struct LessKernel {
  static void run(const KernelContext& ctx) {
    binary_kernel<T, bool>(ctx, [](auto x, auto y) { return x < y; });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("add", kCPU, AddKernel, float, double, int8_t, int32_t, int64_t, bfloat16);
OFL_REGISTER_KERNEL("sub", kCPU, SubKernel, float, double, int8_t, int32_t, int64_t, bfloat16);
OFL_REGISTER_KERNEL("mul", kCPU, MulKernel, float, double, int8_t, int32_t, int64_t, bfloat16);
OFL_REGISTER_KERNEL("div", kCPU, DivKernel, float, double, bfloat16);
OFL_REGISTER_KERNEL("equal", kCPU, EqualKernel, float, double, int8_t, int32_t, int64_t, bool,
                    bfloat16);
OFL_REGISTER_KERNEL("greater", kCPU, GreaterKernel, float, double, int8_t, int32_t, int64_t,
                    bfloat16);
OFL_REGISTER_KERNEL("less", kCPU, LessKernel, float, double, int8_t, int32_t, int64_t, bfloat16);

// float16 through the float32 kernels (Note [Widened kernels] in widened.h); bfloat16 in its
// own loops (Note [Native bfloat16 loops]; the comparisons compare the float32 values).
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("add", AddKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("sub", SubKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("mul", MulKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("div", DivKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("equal", EqualKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("greater", GreaterKernel);
OFL_REGISTER_WIDENED_FLOAT16_KERNEL("less", LessKernel);

}  // namespace ofl::cpu
