#pragma once
// The running state of a softmax normaliser, shared by the CPU cross-entropy kernel and the CUDA
// softmax and cross-entropy kernels (GPU.md, "Make the untested part small").

#include <math.h>

#include "oneflowlike/common/host_device.h"

namespace ofl {

// Note [Online softmax]
// ~~~~~~~~~~~~~~~~~~~~~
// log(sum_j exp(x_j)) in one pass: keep the largest value seen, m, and s = sum_j exp(x_j - m);
// a new maximum rescales s by exp(m_old - m_new). Two states of disjoint parts of a row
// combine the same way, so threads each fold a strided part and a tree combines them.
// The empty state is (m = -inf, s = 0); it contributes nothing to a combination and skips
// -inf values, so no term computes exp(-inf - -inf). Otherwise s >= 1. Non-finite rows come
// out as the two-pass formula (max, then sum of exp(x - max)) gives them: a row of only -inf
// keeps s = 0, so its softmax is 0/0 = NaN; a NaN, or a +inf (whose own term is
// exp(inf - inf)), makes s NaN. V is float or double: the 16-bit dtypes compute in float.
template <class V>
struct OnlineSoftmax {
  V max;  // the largest value folded in; -inf while empty
  V sum;  // sum of exp(x - max) over the values folded in; 0 while empty

  static OFL_HOST_DEVICE OnlineSoftmax empty() { return {-static_cast<V>(INFINITY), V(0)}; }

  OFL_HOST_DEVICE void add(V x) {
    if (x > max) {
      // x's own term exp(x - x): 1, or NaN for x = +inf.
      sum = sum * exp_of(max - x) + (x - x + V(1));
      max = x;
    } else if (sum != V(0) || x != x) {
      // Skipped only while empty for x = -inf. A NaN x is never > max and makes sum NaN.
      sum += exp_of(x - max);
    }
  }

  static OFL_HOST_DEVICE OnlineSoftmax combine(OnlineSoftmax a, OnlineSoftmax b) {
    const V m = a.max > b.max ? a.max : b.max;
    const V sa = a.sum == V(0) ? V(0) : a.sum * exp_of(a.max - m);
    const V sb = b.sum == V(0) ? V(0) : b.sum * exp_of(b.max - m);
    return {m, sa + sb};
  }

  /// log(sum_j exp(x_j)) = max + log(sum): -inf for an empty row or a row of -inf.
  OFL_HOST_DEVICE V log_sum_exp() const { return max + log_of(sum); }

  static OFL_HOST_DEVICE float exp_of(float x) { return expf(x); }
  static OFL_HOST_DEVICE double exp_of(double x) { return exp(x); }
  static OFL_HOST_DEVICE float log_of(float x) { return logf(x); }
  static OFL_HOST_DEVICE double log_of(double x) { return log(x); }
};

}  // namespace ofl
