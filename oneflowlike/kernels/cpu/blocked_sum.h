#pragma once
// Note [Blocked sums]: a sum of floats along a row goes in blocks of kSumBlock elements, each
// block summed in kSumLanes interleaved double accumulators (a chain of one add per element
// neither vectorises nor keeps the adder busy), the block sums then added in order. The blocks
// run in parallel, so one long row (a gradient's sum of squares for clipping) uses every thread.
// The order of the additions depends only on the row's length, never on the thread count: a sum
// is the same whichever threads computed it. reduce_sum (kernels/cpu/reduce.cpp) and
// multi_tensor_sum_squares (kernels/cpu/optimizer.cpp) sum this way, so a sum of squares equals
// reduce_sum(x * x) bit for bit.

#include <array>
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

/// The sums over i < n of the kTerms values term(i) gives (a std::array<double, kTerms>), each
/// in kSumLanes interleaved double lanes, added in order at the end: the order of the
/// additions depends on n alone. For row-wise sums inside a kernel (layer_norm's mean and
/// variance), where an `omp simd reduction` over doubles made GCC keep its partial sums on
/// the stack and gather its operands.
template <int kTerms, class F>
std::array<double, kTerms> lane_sums(int64_t n, F term) {
  double lanes[kTerms][kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int k = 0; k < kSumLanes; ++k) {
      const std::array<double, kTerms> v = term(i + k);
      for (int t = 0; t < kTerms; ++t) lanes[t][k] += v[t];
    }
  }
  for (int k = 0; i < n; ++i, ++k) {
    const std::array<double, kTerms> v = term(i);
    for (int t = 0; t < kTerms; ++t) lanes[t][k] += v[t];
  }
  std::array<double, kTerms> sums{};
  for (int t = 0; t < kTerms; ++t) {
    for (double lane : lanes[t]) sums[t] += lane;
  }
  return sums;
}

/// sum of f(x[i]) over one block (at most kSumBlock elements), in double.
template <class T, class F = Identity>
double block_sum(const T* x, int64_t n, F f = {}) {
  return lane_sums<1>(
      n, [&](int64_t i) { return std::array<double, 1>{static_cast<double>(f(x[i]))}; })[0];
}

}  // namespace ofl::cpu
