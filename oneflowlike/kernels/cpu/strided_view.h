#pragma once
// Strided views for the shape ops (Note [Strided copy] in kernels/cpu/shape_ops.cpp): which
// element of a tensor each element of a contiguous copy reads or writes. Host code, shared by
// the CPU and the CUDA kernels so that both copy the same elements.

#include <cstdint>
#include <vector>

#include "oneflowlike/shape.h"

namespace ofl::cpu {

/// A strided view: element (i0, ..., ik) is at offset + sum(i * strides).
struct StridedView {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

/// Drops extent-1 axes and merges axis a into a+1 when they are adjacent in memory (Note
/// [Strided copy]). Keeps at least one axis.
inline StridedView coalesce(StridedView v) {
  StridedView out;
  out.offset = v.offset;
  for (size_t a = 0; a < v.dims.size(); ++a) {
    if (v.dims[a] == 1) continue;
    if (!out.dims.empty() && out.strides.back() == v.strides[a] * v.dims[a]) {
      out.dims.back() *= v.dims[a];
      out.strides.back() = v.strides[a];
    } else {
      out.dims.push_back(v.dims[a]);
      out.strides.push_back(v.strides[a]);
    }
  }
  if (out.dims.empty()) {
    out.dims.push_back(1);
    out.strides.push_back(1);
  }
  return out;
}

inline int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

/// The view of `x` that transpose's contiguous output reads, uncoalesced: output axis j is
/// input axis perm[j] (negative counts from the end).
inline StridedView transpose_view(const Shape& x, const std::vector<int64_t>& perm) {
  const int n = x.ndim();
  const std::vector<int64_t> in_strides = x.strides();
  StridedView view;
  for (int j = 0; j < n; ++j) {
    const int64_t axis = perm[j] < 0 ? perm[j] + n : perm[j];
    view.dims.push_back(x[axis]);
    view.strides.push_back(in_strides[axis]);
  }
  return view;
}

/// The view of `big` (the sliced tensor) that `small` (the slice) reads or writes, coalesced.
/// Extents come from `small`; start and step from params, which for a whole axis (start 0,
/// step 1) matches any per-rank piece.
inline StridedView slice_view(const Shape& big, const Shape& small,
                              const std::vector<int64_t>& start, const std::vector<int64_t>& step) {
  const std::vector<int64_t> strides = big.strides();
  StridedView view;
  for (int a = 0; a < big.ndim(); ++a) {
    view.dims.push_back(small[a]);
    view.strides.push_back(strides[a] * step[a]);
    view.offset += start[a] * strides[a];
  }
  return coalesce(std::move(view));
}

}  // namespace ofl::cpu
