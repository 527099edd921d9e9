#pragma once
// The slice gather and scatter-add that embedding and index_select share on the CPU: a source
// viewed as (outer, rows, inner), n int32/int64 indices, and the result (outer, n, inner).
//   gather_slices:      out[o, t, :] = src[o, index[t], :]
//   scatter_add_slices: out = 0; out[o, index[t], :] += src[o, t, :] for t in index order
// embedding is outer = 1 (rows of a table), index_select any dim. The scatter-add gives each
// thread its own columns (16-bit types: its own rows, Note [16-bit scatter-adds]), so the sums
// are race-free and deterministic.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"

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

// Note [16-bit scatter-adds]: float16 and bfloat16 sum in float32 and round each sum once, as
// the Widened kernel did (Note [Widened kernels] in widened.h), but without its float32 copy of
// the whole result: for an embedding's gradient that copy was the size of the table (a 32000 x
// 4096 table: 512 MiB a call). The positions are sorted by (row, position), so each touched row
// is one run of positions in index order; a thread sums the runs that start in its share into
// a float32 row of its scratch (Note [Native bfloat16 rows]) and rounds it into the row, and
// rows no index names stay zero. The sums run in the float32 kernel's order, from +0, so the
// results are its bits. A row named by most positions is summed by one thread.
template <class T, class I>
void scatter_add_rows_rounded(const T* src, SliceView v, const I* index, int64_t n, T* out) {
  std::fill(out, out + v.outer * v.rows * v.inner, T(0.0f));
  if (n == 0 || v.inner == 0) return;
  std::vector<std::pair<int64_t, int64_t>> order(static_cast<size_t>(n));  // (row, position)
  for (int64_t t = 0; t < n; ++t) order[t] = {static_cast<int64_t>(index[t]), t};
  std::sort(order.begin(), order.end());
  const int64_t inner = v.inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / inner);
  parallel_for(v.outer * n, grain, [&](int64_t begin, int64_t end) {
    float* acc = WideRows::row(0, inner);
    for (int64_t j = begin; j < end; ++j) {
      const int64_t o = j / n, p = j % n;
      const int64_t row = order[p].first;
      if (p > 0 && order[p - 1].first == row) continue;  // inside a run another j started
      std::fill(acc, acc + inner, 0.0f);
      for (int64_t q = p; q < n && order[q].first == row; ++q) {
        const float* s = WideRows::widened(1, src + (o * n + order[q].second) * inner, inner);
        for (int64_t i = 0; i < inner; ++i) acc[i] += s[i];
      }
      WideRows::round(acc, out + (o * v.rows + row) * inner, inner);
    }
    WideRows::trim();
  });
}

/// out (outer, rows, inner) = 0, then out[o, index[t], :] += src[o, t, :] in index order; src is
/// (outer, n, inner). Threads split the (outer, inner) columns; 16-bit types sum in float32
/// (Note [16-bit scatter-adds]).
template <class T, class I>
void scatter_add_slices(const char* op, const char* what, const T* src, SliceView v, const I* index,
                        int64_t n, T* out) {
  check_slice_indices(op, what, index, n, v.rows);
  if constexpr (is_16bit_float<T>) {
    scatter_add_rows_rounded(src, v, index, n, out);
  } else {
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
}

}  // namespace ofl::cpu
