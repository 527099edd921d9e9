#pragma once
// Column sums over many rows, split over the threads by rows.
//
// Note [Row-blocked column sums]: the parameter gradients of the norms are column sums over
// every row of (rows, cols) operands. Splitting the columns made every thread read half of
// every row, which the ops before wrote split by rows, from the other core's cache: slower on
// two threads than on one (layer_norm_param_grad in the GPT step, docs/benchmarks.md). Here the
// rows go in blocks of kRowsPerBlock over the threads, each block summing into a partial of its
// own, and the partials are added in block order: a thread reads rows its core wrote, and the
// order of the additions depends on the shape only, never on the thread count.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "oneflowlike/common/parallel.h"

namespace ofl::cpu {

constexpr int64_t kRowsPerBlock = 64;

/// sums[k * cols + c] = sum over rows r of term k of row r at column c, for k < terms, where
/// add_row(r, partial) adds row r's terms into partial[k * cols + c] (in double).
template <class F>
std::vector<double> row_blocked_column_sums(int64_t rows, int64_t cols, int terms, F add_row) {
  const int64_t width = terms * cols;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
  parallel_for(blocks, items_per_grain(kRowsPerBlock * cols), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t r = b * kRowsPerBlock; r < std::min(rows, (b + 1) * kRowsPerBlock); ++r) {
        add_row(r, partial.data() + b * width);
      }
    }
  });
  std::vector<double> sums(static_cast<size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < width; ++i) sums[i] += partial[b * width + i];
  }
  return sums;
}

}  // namespace ofl::cpu
