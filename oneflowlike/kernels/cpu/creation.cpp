// CPU kernels of fill, arange and cast.

#include "oneflowlike/ops/creation.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Converts through float for the 16-bit types, which have no arithmetic of their own.
template <class To, class From>
To convert(From v) {
  if constexpr (kIsHalf<From> && kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (kIsHalf<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

template <class T>
struct FillKernel {
  static void run(const KernelContext& ctx) {
    const T value = convert<T>(ctx.p<FillParams>().value);
    T* y = ctx.out(0).data<T>();
    parallel_for(ctx.out(0).numel(), kParallelGrain,
                 [&](int64_t begin, int64_t end) { std::fill(y + begin, y + end, value); });
  }
};

// start + k * step as one fused multiply-add, so that every build (and the CUDA kernel) gets
// the same double whether or not the compiler would contract it.
template <class T>
struct ArangeKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<ArangeParams>();
    const int64_t first = ctx.output_region ? (*ctx.output_region)[0].begin : 0;
    T* y = ctx.out(0).data<T>();
    for (int64_t i = 0; i < ctx.out(0).numel(); ++i) {
      y[i] = convert<T>(std::fma(static_cast<double>(first + i), p.step, p.start));
    }
  }
};

template <class From>
struct CastKernel {
  static void run(const KernelContext& ctx) {
    const From* x = ctx.in(0).data<From>();
    visit_dtype(ctx.out(0).dtype(), [&]<class To>() {
      To* y = ctx.out(0).data<To>();
      parallel_for(ctx.in(0).numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        // float32 <-> float16: the vectorised conversions (half.h).
        if constexpr (std::is_same_v<From, float> && std::is_same_v<To, float16>) {
          floats_to_halves(x + begin, y + begin, end - begin);
        } else if constexpr (std::is_same_v<From, float16> && std::is_same_v<To, float>) {
          halves_to_floats(x + begin, y + begin, end - begin);
        } else {
          for (int64_t i = begin; i < end; ++i) y[i] = convert<To>(x[i]);
        }
      });
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("fill", kCPU, FillKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);
OFL_REGISTER_KERNEL("arange", kCPU, ArangeKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t);
OFL_REGISTER_KERNEL("cast", kCPU, CastKernel, float, double, float16, bfloat16, int8_t, int32_t,
                    int64_t, bool);

}  // namespace ofl::cpu
