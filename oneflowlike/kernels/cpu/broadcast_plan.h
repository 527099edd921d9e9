#pragma once
// The axes of NumPy-broadcast operands, coalesced: adjacent axes merge when every operand
// either spans both or broadcasts both. Host code, shared by the CPU kernels (broadcast.h) and
// the CUDA kernels (kernels/cuda/elementwise.cuh), so both read the same elements.

#include <array>
#include <cstdint>

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

}  // namespace ofl::cpu
