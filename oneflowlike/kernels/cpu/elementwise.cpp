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
  // Always inlined: with float16's conversions inside, GCC left g out of line, a call per
  // element that stopped the loops' vectorisation (20x slower).
  const auto g = [&f](T x, T y) __attribute__((always_inline)) {
    return static_cast<Out>(f(static_cast<C>(x), static_cast<C>(y)));
  };
  const T* a = ctx.in(0).data<T>();
  const T* b = ctx.in(1).data<T>();
  Out* y = ctx.out(0).data<Out>();
  const Shape& out = ctx.out(0).shape();
  if (ctx.in(0).shape() == out && ctx.in(1).shape() == out) {  // the common flat case
    if constexpr (std::is_same_v<T, float16> && std::is_same_v<Out, float16>) {
      parallel_for(out.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        // Note [float16 blocks] in widened.h.
        float16_blocks<2>({a, b}, y, begin, end, [&](auto& v, int64_t n) {
          for (int64_t i = 0; i < n; ++i) v[0][i] = f(v[0][i], v[1][i]);
        });
      });
      return;
    }
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

OFL_REGISTER_KERNEL("add", kCPU, AddKernel, float, double, int8_t, int32_t, int64_t, bfloat16,
                    float16);
OFL_REGISTER_KERNEL("sub", kCPU, SubKernel, float, double, int8_t, int32_t, int64_t, bfloat16,
                    float16);
OFL_REGISTER_KERNEL("mul", kCPU, MulKernel, float, double, int8_t, int32_t, int64_t, bfloat16,
                    float16);
OFL_REGISTER_KERNEL("div", kCPU, DivKernel, float, double, bfloat16, float16);
OFL_REGISTER_KERNEL("equal", kCPU, EqualKernel, float, double, int8_t, int32_t, int64_t, bool,
                    bfloat16, float16);
OFL_REGISTER_KERNEL("greater", kCPU, GreaterKernel, float, double, int8_t, int32_t, int64_t,
                    bfloat16, float16);
OFL_REGISTER_KERNEL("less", kCPU, LessKernel, float, double, int8_t, int32_t, int64_t, bfloat16,
                    float16);

}  // namespace ofl::cpu
