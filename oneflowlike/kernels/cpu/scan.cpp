// CPU kernel of cumsum (Note [Running sums] in ops/scan.h). x is viewed as (outer, extent,
// inner) around dim; a unit of work is one outer index and a block of up to kColumns inner
// columns, whose running sums advance together along dim (contiguous loads when inner > 1).

#include "oneflowlike/ops/scan.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/half.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/index_ops.h"

namespace ofl::cpu {

namespace {

constexpr int64_t kColumns = 64;

// The running sum's type: double for floating dtypes, int64 for integers.
template <class T>
using sum_of = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

template <class T>
sum_of<T> widen(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<sum_of<T>>(v);
  }
}

// The sum rounded once to T (a 16-bit dtype through float32, as the CUDA kernel stores it).
template <class T>
T narrow(sum_of<T> s) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(s));
  } else {
    return static_cast<T>(s);
  }
}

template <class T>
struct CumsumKernel {
  static void run(const KernelContext& ctx) {
    const auto& p = ctx.p<CumsumParams>();
    const Tensor& x = ctx.in(0);
    if (x.numel() == 0) return;
    const AxisExtents v = axis_extents(x.shape(), normalize_axis(p.dim, x.ndim(), "cumsum"));
    const T* src = x.data<T>();
    T* dst = ctx.out(0).data<T>();
    const int64_t blocks = (v.inner + kColumns - 1) / kColumns;
    parallel_for(v.outer * blocks, items_per_grain(v.extent * std::min(v.inner, kColumns)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t unit = begin; unit < end; ++unit) {
                     const int64_t o = unit / blocks, c0 = unit % blocks * kColumns;
                     const int64_t width = std::min(kColumns, v.inner - c0);
                     sum_of<T> sums[kColumns] = {};
                     for (int64_t s = 0; s < v.extent; ++s) {
                       const int64_t t = p.reverse ? v.extent - 1 - s : s;
                       const int64_t at = (o * v.extent + t) * v.inner + c0;
                       for (int64_t c = 0; c < width; ++c) {
                         sums[c] += widen(src[at + c]);
                         dst[at + c] = narrow<T>(sums[c]);
                       }
                     }
                   }
                 });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("cumsum", kCPU, CumsumKernel, float, double, float16, bfloat16, int32_t,
                    int64_t);

}  // namespace ofl::cpu
