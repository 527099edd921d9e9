#pragma once
// Iteration over NumPy-broadcast operands, over the coalesced axes of broadcast_plan.h: (N, C)
// + (C,) becomes two loops with unit inner strides, and equal shapes become one flat loop.

#include <array>
#include <cstdint>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/broadcast_plan.h"
#include "oneflowlike/shape.h"

namespace ofl::cpu {

/// Calls fn(out_offset, {in offsets}, {in inner strides}, count) over runs of the innermost
/// axis, in parallel over the outer index.
template <int N, class F>
void for_each_broadcast_run(const Shape& out, const std::array<const Shape*, N>& in, F&& fn) {
  const BroadcastPlan<N> plan(out, in);
  const int64_t inner = plan.dims[plan.ndim - 1];
  const int64_t outer = out.numel() / (inner == 0 ? 1 : inner);
  if (inner == 0 || out.numel() == 0) return;
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = plan.strides[k][plan.ndim - 1];
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / inner);
  parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      std::array<int64_t, N> offsets{};
      int64_t rest = o;
      for (int d = plan.ndim - 2; d >= 0; --d) {
        const int64_t idx = rest % plan.dims[d];
        rest /= plan.dims[d];
        for (int k = 0; k < N; ++k) offsets[k] += idx * plan.strides[k][d];
      }
      fn(o * inner, offsets, inner_strides, inner);
    }
  });
}

}  // namespace ofl::cpu
