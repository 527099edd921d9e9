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

// One broadcast run with inner steps known at compile time (each 0 or 1 after coalescing),
// so a broadcast operand is a loop-invariant value and the loop still vectorises.
template <int kC, int kX, int kY, class T>
void where_run(const uint8_t* c, const T* x, const T* y, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = select(c[i * kC], x[i * kX], y[i * kY]);
}

template <class T>
void where_run(const std::array<int64_t, 3>& step, const uint8_t* c, const T* x, const T* y, T* out,
               int64_t n) {
  switch (step[0] * 4 + step[1] * 2 + step[2]) {
    case 0:
      return where_run<0, 0, 0>(c, x, y, out, n);
    case 1:
      return where_run<0, 0, 1>(c, x, y, out, n);
    case 2:
      return where_run<0, 1, 0>(c, x, y, out, n);
    case 3:
      return where_run<0, 1, 1>(c, x, y, out, n);
    case 4:
      return where_run<1, 0, 0>(c, x, y, out, n);
    case 5:
      return where_run<1, 0, 1>(c, x, y, out, n);
    case 6:
      return where_run<1, 1, 0>(c, x, y, out, n);
    default:
      return where_run<1, 1, 1>(c, x, y, out, n);
  }
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
        where_run<1, 1, 1>(c + begin, x + begin, y + begin, out + begin, end - begin);
      });
      return;
    }
    for_each_broadcast_run<3>(shape, {&ctx.in(0).shape(), &ctx.in(1).shape(), &ctx.in(2).shape()},
                              [&](int64_t o, const std::array<int64_t, 3>& off,
                                  const std::array<int64_t, 3>& step, int64_t n) {
                                OFL_ASSERT(step[0] <= 1 && step[1] <= 1 && step[2] <= 1);
                                where_run(step, c + off[0], x + off[1], y + off[2], out + o, n);
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
    // x has the output's shape, so its inner step is 1; the mask's is 0 or 1.
    for_each_broadcast_run<2>(shape, {&ctx.in(0).shape(), &ctx.in(1).shape()},
                              [&](int64_t o, const std::array<int64_t, 2>& off,
                                  const std::array<int64_t, 2>& step, int64_t n) {
                                OFL_ASSERT(step[0] == 1 && step[1] <= 1);
                                const T* px = x + off[0];
                                const uint8_t* pm = m + off[1];
                                T* po = out + o;
                                if (step[1] == 0) {  // one mask value for the whole run
                                  if (*pm) {
                                    for (int64_t i = 0; i < n; ++i) po[i] = value;
                                  } else {
                                    for (int64_t i = 0; i < n; ++i) po[i] = px[i];
                                  }
                                } else {
                                  for (int64_t i = 0; i < n; ++i)
                                    po[i] = select(pm[i], value, px[i]);
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
