#pragma once
// The slice gather and scatter-add that embedding and index_select share on the CPU: a source
// viewed as (outer, rows, inner), n int32/int64 indices, and the result (outer, n, inner).
//   gather_slices:      out[o, t, :] = src[o, index[t], :]
//   scatter_add_slices: out = 0; out[o, index[t], :] += src[o, t, :] for t in index order
// embedding is outer = 1 (rows of a table), index_select any dim. The scatter-add gives each
// thread its own columns, so the sums are race-free and deterministic.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "oneflowlike/common/error.h"
#include "oneflowlike/common/parallel.h"

namespace ofl::cpu {

/// (outer, rows, inner): the source's view around the indexed axis.
struct SliceView {
  int64_t outer = 1, rows = 1, inner = 1;
};

/// Indices are data, not shape, so inference cannot see them: check them here, on one thread
/// (an exception must not leave a parallel region). `what` names the bound ("num_embeddings").
template <class I>
void check_slice_indices(const char* op, const char* what, const I* index, int64_t n,
                         int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    OFL_CHECK_INDEX(index[i] >= 0 && index[i] < rows, "[", op, "] every index must be in [0, ",
                    what, ") with ", what, " = ", rows, ". However, got index ",
                    static_cast<int64_t>(index[i]), " at position ", i, ".");
  }
}

/// out (outer, n, inner) = src (outer, rows, inner) at index along the middle axis.
template <class T, class I>
void gather_slices(const char* op, const char* what, const T* src, SliceView v, const I* index,
                   int64_t n, T* out) {
  check_slice_indices(op, what, index, n, v.rows);
  const int64_t inner = v.inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1));
  parallel_for(v.outer * n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int64_t o = j / n, t = j % n;
      std::memcpy(out + j * inner, src + (o * v.rows + static_cast<int64_t>(index[t])) * inner,
                  inner * sizeof(T));
    }
  });
}

/// out (outer, rows, inner) = 0, then out[o, index[t], :] += src[o, t, :] in index order; src is
/// (outer, n, inner). Threads split the (outer, inner) columns.
template <class T, class I>
void scatter_add_slices(const char* op, const char* what, const T* src, SliceView v, const I* index,
                        int64_t n, T* out) {
  check_slice_indices(op, what, index, n, v.rows);
  std::fill(out, out + v.outer * v.rows * v.inner, T(0));
  const int64_t inner = v.inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1));
  parallel_for(v.outer * inner, grain, [&](int64_t begin, int64_t end) {
    // Columns [begin, end) of the (outer, inner) plane, one outer row piece at a time.
    for (int64_t c = begin; c < end;) {
      const int64_t o = c / inner, i0 = c % inner;
      const int64_t i1 = std::min(inner, i0 + (end - c));
      for (int64_t t = 0; t < n; ++t) {
        const T* s = src + (o * n + t) * inner;
        T* d = out + (o * v.rows + static_cast<int64_t>(index[t])) * inner;
        for (int64_t i = i0; i < i1; ++i) d[i] += s[i];
      }
      c += i1 - i0;
    }
  });
}

}  // namespace ofl::cpu
