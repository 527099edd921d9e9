// CPU kernels of where and masked_fill: pure selection, so every dtype is supported.

#include "oneflowlike/ops/where.h"

#include "oneflowlike/kernels/cpu/broadcast.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Masks are read as bytes (GCC does not vectorise a select on bool loads) and both values are
// passed in, so loops become branch-free blends, not branches that random masks mispredict.
template <class T>
inline T select(uint8_t c, T a, T b) {
  return c != 0 ? a : b;
}

template <class T>
struct WhereKernel {
  static void run(const KernelContext& ctx) {
    const uint8_t* c = ctx.in(0).data<uint8_t>();
    const T* x = ctx.in(1).data<T>();
    const T* y = ctx.in(2).data<T>();
    T* out = ctx.out(0).data<T>();
    const Shape& shape = ctx.out(0).shape();
    if (ctx.in(0).shape() == shape && ctx.in(1).shape() == shape && ctx.in(2).shape() == shape) {
      parallel_for(shape.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = select(c[i], x[i], y[i]);
      });
      return;
    }
    for_each_broadcast_run<3>(shape, {&ctx.in(0).shape(), &ctx.in(1).shape(), &ctx.in(2).shape()},
                              [&](int64_t o, const std::array<int64_t, 3>& off,
                                  const std::array<int64_t, 3>& step, int64_t n) {
                                const uint8_t* pc = c + off[0];
                                const T* px = x + off[1];
                                const T* py = y + off[2];
                                T* po = out + o;
                                if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
                                  for (int64_t i = 0; i < n; ++i)
                                    po[i] = select(pc[i], px[i], py[i]);
                                } else {
                                  for (int64_t i = 0; i < n; ++i) {
                                    po[i] =
                                        select(pc[i * step[0]], px[i * step[1]], py[i * step[2]]);
                                  }
                                }
                              });
  }
};

template <class T>
T value_as(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
struct MaskedFillKernel {
  static void run(const KernelContext& ctx) {
    const T* x = ctx.in(0).data<T>();
    const uint8_t* m = ctx.in(1).data<uint8_t>();
    T* out = ctx.out(0).data<T>();
    const T value = value_as<T>(ctx.p<MaskedFillParams>().value);
    const Shape& shape = ctx.out(0).shape();
    if (ctx.in(1).shape() == shape) {
      parallel_for(shape.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = select(m[i], value, x[i]);
      });
      return;
    }
    for_each_broadcast_run<2>(shape, {&ctx.in(0).shape(), &ctx.in(1).shape()},
                              [&](int64_t o, const std::array<int64_t, 2>& off,
                                  const std::array<int64_t, 2>& step, int64_t n) {
                                const T* px = x + off[0];
                                const uint8_t* pm = m + off[1];
                                T* po = out + o;
                                if (step[1] == 0) {  // one mask value for the whole run
                                  if (*pm) {
                                    for (int64_t i = 0; i < n; ++i) po[i] = value;
                                  } else {
                                    for (int64_t i = 0; i < n; ++i) po[i] = px[i * step[0]];
                                  }
                                } else {
                                  for (int64_t i = 0; i < n; ++i)
                                    po[i] = select(pm[i * step[1]], value, px[i * step[0]]);
                                }
                              });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("where", kCPU, WhereKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);
OFL_REGISTER_KERNEL("masked_fill", kCPU, MaskedFillKernel, float, double, float16, bfloat16, int8_t,
                    int32_t, int64_t, bool);

}  // namespace ofl::cpu
