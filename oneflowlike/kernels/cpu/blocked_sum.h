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
#include <cstring>
#include <type_traits>

#include "oneflowlike/kernels/cpu/vec_math.h"

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

/// max(a, b) as a bit select, which GCC vectorises where it leaves a ?: (or std::max) on floats
/// scalar under -ftrapping-math: a NaN b is passed over, a NaN a kept.
template <class T>
[[gnu::always_inline]] inline T lane_max_of(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return vec_math::detail::at_least(a, b);
  } else {
    return a < b ? b : a;
  }
}

/// The largest of x[0..n), n >= 1, in sixteen interleaved lanes. A NaN at x[0] makes it NaN;
/// elsewhere a NaN is passed over (callers that must see it, softmax and cross-entropy, meet it
/// again in exp(x - max)). Float lanes are GCC vectors (a ?: on vectors is a compare and a blend;
/// GCC vectorised neither an omp simd max reduction nor an array of selects here).
template <class T>
T lane_max(const T* x, int64_t n) {
  int64_t i = 0;
  T m = x[0];
  if constexpr (std::is_same_v<T, float>) {
    // Two vectors of eight (one AVX2 register each): the sixteen lanes stay in registers.
    using Lanes = float __attribute__((vector_size(8 * sizeof(float))));
    Lanes lo, hi;
    for (int k = 0; k < 8; ++k) lo[k] = hi[k] = x[0];
    for (; i + 16 <= n; i += 16) {
      Lanes a, b;
      std::memcpy(&a, x + i, sizeof(a));
      std::memcpy(&b, x + i + 8, sizeof(b));
      lo = lo < a ? a : lo;
      hi = hi < b ? b : hi;
    }
    for (int k = 0; k < 8; ++k) m = lane_max_of(lane_max_of(m, lo[k]), hi[k]);
  }
  for (; i < n; ++i) m = lane_max_of(m, x[i]);
  return m;
}

/// A row's max and the sum of exp(x - max) over it, for log_softmax and cross-entropy: the max
/// exact (lane_max), the exponentials vectorised (vec_math::exp, 1 ulp in float32), summed in
/// double lanes. NaN or +inf anywhere in the row makes the sum NaN, and so does a row of only
/// -inf (exp(-inf - -inf)), where Note [Online softmax] keeps 0: a loss or log_softmax made from
/// it is NaN either way.
template <class T>
struct RowExpSum {
  T max;
  double sum;
};

template <class T>
RowExpSum<T> row_exp_sum(const T* x, int64_t n) {
  const T m = n > 0 ? lane_max(x, n) : T(0);
  const double sum = lane_sums<1>(n, [&](int64_t j) {
    return std::array<double, 1>{static_cast<double>(vec_math::exp(x[j] - m))};
  })[0];
  return {m, sum};
}

/// sum of f(x[i]) over one block (at most kSumBlock elements), in double.
template <class T, class F = Identity>
double block_sum(const T* x, int64_t n, F f = {}) {
  return lane_sums<1>(
      n, [&](int64_t i) { return std::array<double, 1>{static_cast<double>(f(x[i]))}; })[0];
}

}  // namespace ofl::cpu
