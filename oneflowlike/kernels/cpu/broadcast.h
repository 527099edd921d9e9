#pragma once
// Iteration over NumPy-broadcast operands. Axes are first coalesced (adjacent axes merge when
// every operand either spans both or broadcasts both), so (N, C) + (C,) becomes two loops
// with unit inner strides, and equal shapes become one flat loop.

#include <array>
#include <cstdint>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/shape.h"

namespace ofl::cpu {

constexpr int kMaxBroadcastDims = 8;

/// Strides (in elements) of `operands` input shapes against `out`, after coalescing.
template <int N>
struct BroadcastPlan {
  int ndim = 0;
  std::array<int64_t, kMaxBroadcastDims> dims{};
  std::array<std::array<int64_t, kMaxBroadcastDims>, N> strides{};

  BroadcastPlan(const Shape& out, const std::array<const Shape*, N>& in) {
    // Per input, per output axis: the stride it advances by (0 where broadcast).
    std::array<std::array<int64_t, kMaxBroadcastDims>, N> raw{};
    const int nd = out.ndim();
    for (int k = 0; k < N; ++k) {
      const Shape& s = *in[k];
      int64_t stride = 1;
      for (int i = nd - 1; i >= 0; --i) {
        const int j = s.ndim() - nd + i;
        const int64_t extent = j >= 0 ? s[j] : 1;
        raw[k][i] = (extent == 1 && out[i] != 1) ? 0 : stride;
        stride *= extent;
      }
    }
    for (int i = 0; i < nd; ++i) {
      if (out[i] == 1) continue;  // size-1 axes contribute nothing
      bool merge = ndim > 0;
      for (int k = 0; k < N && merge; ++k) {
        // Merging axis i into the previous one works when the strides stay consistent.
        merge = (raw[k][i] == 0) == (strides[k][ndim - 1] == 0) &&
                (raw[k][i] == 0 || strides[k][ndim - 1] == raw[k][i] * out[i]);
      }
      if (merge) {
        dims[ndim - 1] *= out[i];
        for (int k = 0; k < N; ++k) strides[k][ndim - 1] = raw[k][i];
      } else {
        dims[ndim] = out[i];
        for (int k = 0; k < N; ++k) strides[k][ndim] = raw[k][i];
        ++ndim;
      }
    }
    if (ndim == 0) {  // a scalar
      ndim = 1;
      dims[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 1;
    }
  }
};

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
