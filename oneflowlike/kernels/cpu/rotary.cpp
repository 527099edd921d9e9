// CPU kernel of rotary_embedding (Note [Rotary embedding] in ops/rotary.h): rows of head_dim
// values, each rotated pair by pair with its position's row of the cos and sin tables.

#include "oneflowlike/ops/rotary.h"

#include <algorithm>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/widened.h"
#include "oneflowlike/kernels/rotary_math.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Inputs (x, cos, sin) -> y. bfloat16 and float16 rotate in float32 and round each result once
// (the Widened kernel's bits, Note [Native bfloat16 loops] in widened.h).
template <class T>
struct RotaryKernel {
  static void run(const KernelContext& ctx) {
    const RotaryParams& p = ctx.p<RotaryParams>();
    const RotaryDims d = rotary_dims(ctx.in(0).shape(), p.seq_axis);
    const T* x = ctx.in(0).data<T>();
    const T* cos = ctx.in(1).data<T>();
    const T* sin = ctx.in(2).data<T>();
    T* y = ctx.out(0).data<T>();
    const int64_t half = d.head_dim / 2;
    using C = compute_of<T>;
    const C sign = p.inverse ? C(-1) : C(1);
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(d.head_dim, 1));
    parallel_for(d.rows(), grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * d.head_dim;
        T* yr = y + r * d.head_dim;
        const T* c = cos + d.position(r) * half;
        const T* s = sin + d.position(r) * half;
        for (int64_t i = 0; i < half; ++i) {
          const auto [a, b] = rotary_math::pair_offsets(i, d.head_dim, p.interleaved);
          C ya, yb;
          rotary_math::rotate(static_cast<C>(xr[a]), static_cast<C>(xr[b]), static_cast<C>(c[i]),
                              sign * static_cast<C>(s[i]), &ya, &yb);
          yr[a] = static_cast<T>(ya);
          yr[b] = static_cast<T>(yb);
        }
      }
    });
  }
};

}  // namespace

OFL_REGISTER_KERNEL("rotary_embedding", kCPU, RotaryKernel, float, double, bfloat16, float16);

}  // namespace ofl::cpu
