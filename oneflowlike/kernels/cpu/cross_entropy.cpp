// CPU kernels of sparse_softmax_cross_entropy and its backward: two vectorised passes per row
// for log(sum(exp)) (and one more for the gradient). float16 and bfloat16 run the float32 rows on
// widened copies of one row each (Note [Native bfloat16 rows] in wide_rows.h): the Widened kernel's
// bits without the whole (rows, classes) float32 copies of the logits and their gradient, which
// for a language model's vocabulary are the largest operands of the step.

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "oneflowlike/common/parallel.h"
#include "oneflowlike/kernels/cpu/blocked_sum.h"
#include "oneflowlike/kernels/cpu/vec_math.h"
#include "oneflowlike/kernels/cpu/wide_rows.h"
#include "oneflowlike/op.h"

namespace ofl::cpu {

namespace {

// Labels are data: checked here, on one thread (an exception must not leave a parallel region).
template <class I>
void check_labels(const char* op, const I* labels, int64_t n, int64_t num_classes) {
  for (int64_t i = 0; i < n; ++i) {
    OFL_CHECK_INDEX(labels[i] >= 0 && labels[i] < num_classes, "[", op,
                    "] every label must be in [0, C) with C = ", num_classes,
                    " classes. However, got label ", static_cast<int64_t>(labels[i]),
                    " at position ", i, ".");
  }
}

// Row `x` of `c` values in the type it is computed in (row_compute_of, wide_rows.h): itself, or a
// 16-bit row widened into scratch row `slot`.
template <class T>
const row_compute_of<T>* compute_row(const T* x, int64_t c, int slot) {
  if constexpr (is_16bit_float<T>) {
    return WideRows::widened(slot, x, c);
  } else {
    return x;
  }
}

template <class T, class I>
void loss_rows(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  using C = row_compute_of<T>;
  const int64_t c = logits.shape()[logits.ndim() - 1];
  const int64_t rows = labels.numel();
  const I* label = labels.data<I>();
  check_labels("sparse_softmax_cross_entropy", label, rows, c);
  const T* x = logits.data<T>();
  T* y = loss.data<T>();
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(c, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const C* row = compute_row(x + r * c, c, 0);
      const RowExpSum<C> e = row_exp_sum(row, c);
      // Rounded to C first, as the Widened kernel's float32 output was.
      y[r] = static_cast<T>(static_cast<C>(std::log(e.sum) + static_cast<double>(e.max) -
                                           static_cast<double>(row[label[r]])));
    }
    if constexpr (is_16bit_float<T>) WideRows::trim();
  });
}

template <class T>
struct SparseSoftmaxCrossEntropyKernel {
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      loss_rows<T, int32_t>(ctx.in(0), ctx.in(1), ctx.out(0));
    } else {
      loss_rows<T, int64_t>(ctx.in(0), ctx.in(1), ctx.out(0));
    }
  }
};

template <class T, class I>
void loss_grad_rows(const Tensor& logits, const Tensor& labels, const Tensor& dloss,
                    const Tensor& dlogits) {
  const int64_t c = logits.shape()[logits.ndim() - 1];
  const int64_t rows = labels.numel();
  const I* label = labels.data<I>();
  check_labels("sparse_softmax_cross_entropy_grad", label, rows, c);
  using C = row_compute_of<T>;
  const T* x = logits.data<T>();
  const T* dy = dloss.data<T>();
  T* dx = dlogits.data<T>();
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(c, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const C* row = compute_row(x + r * c, c, 0);
      C* out = nullptr;
      if constexpr (is_16bit_float<T>) {
        out = WideRows::row(1, c);
      } else {
        out = dx + r * c;
      }
      const RowExpSum<C> e = row_exp_sum(row, c);
      const C m = e.max, inv_sum = static_cast<C>(1.0 / e.sum), g = static_cast<C>(dy[r]);
      // softmax(x) - onehot(target), times the loss's gradient; the target's term after the
      // loop, so that the loop has no branch.
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] = vec_math::exp(row[j] - m) * inv_sum * g;
      const int64_t target = label[r];
      out[target] = (vec_math::exp(row[target] - m) * inv_sum - C(1)) * g;
      if constexpr (is_16bit_float<T>) WideRows::round(out, dx + r * c, c);
    }
    if constexpr (is_16bit_float<T>) WideRows::trim();
  });
}

template <class T>
struct SparseSoftmaxCrossEntropyGradKernel {
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      loss_grad_rows<T, int32_t>(ctx.in(0), ctx.in(1), ctx.in(2), ctx.out(0));
    } else {
      loss_grad_rows<T, int64_t>(ctx.in(0), ctx.in(1), ctx.in(2), ctx.out(0));
    }
  }
};

}  // namespace

OFL_REGISTER_KERNEL("sparse_softmax_cross_entropy", kCPU, SparseSoftmaxCrossEntropyKernel, float,
                    double, float16, bfloat16);
OFL_REGISTER_KERNEL("sparse_softmax_cross_entropy_grad", kCPU, SparseSoftmaxCrossEntropyGradKernel,
                    float, double, float16, bfloat16);

}  // namespace ofl::cpu
