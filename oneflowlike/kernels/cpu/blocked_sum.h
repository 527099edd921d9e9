#pragma once
// Note [Blocked sums]: a sum of floats along a row goes in blocks of kSumBlock elements, each
// block summed in kSumLanes interleaved double accumulators (a chain of one add per element
// neither vectorises nor keeps the adder busy), the block sums then added in order. The blocks
// run in parallel, so one long row (a gradient's sum of squares for clipping) uses every thread.
// The order of the additions depends only on the row's length, never on the thread count: a sum
// is the same whichever threads computed it. reduce_sum (kernels/cpu/reduce.cpp) and
// multi_tensor_sum_squares (kernels/cpu/optimizer.cpp) sum this way, so a sum of squares equals
// reduce_sum(x * x) bit for bit.

#include <cstdint>

namespace ofl::cpu {

constexpr int64_t kSumBlock = 16384;
constexpr int kSumLanes = 16;

struct Identity {
  template <class T>
  T operator()(T x) const {
    return x;
  }
};

/// sum of f(x[i]) over one block (at most kSumBlock elements), in double.
template <class T, class F = Identity>
double block_sum(const T* x, int64_t n, F f = {}) {
  double lanes[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int k = 0; k < kSumLanes; ++k) lanes[k] += static_cast<double>(f(x[i + k]));
  }
  for (int k = 0; i < n; ++i, ++k) lanes[k] += static_cast<double>(f(x[i]));
  double sum = 0;
  for (double lane : lanes) sum += lane;
  return sum;
}

}  // namespace ofl::cpu
