// CUDA kernels of sparse_softmax_cross_entropy and its backward, computing what
// kernels/cpu/cross_entropy.cpp computes: one row of logits (the last axis) per team, whose
// log(sum(exp)) comes from one pass of Note [Online softmax] states; float32 for float32 and the
// 16-bit dtypes, float64 for double. Labels are int32 or int64.

#include <cstdio>

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/kernels/online_softmax.h"
#include "oneflowlike/ops/cross_entropy.h"

namespace ofl::cuda_kernels {

namespace {

// Note [Labels checked on the device]
// Labels are data that only the device reads, and a kernel cannot raise: a label outside
// [0, C) prints the CPU kernel's IndexError message (op, position, label) and traps. The trap
// aborts the kernel and leaves a sticky error on the device's context, which the next CUDA
// call's check (at the latest, copying a result back) raises as an ofl::Error naming that call;
// the process cannot use the device after that. One thread per row checks, so a bad row prints
// once.
__device__ void check_label(const char* op, int64_t label, int64_t position, int64_t classes) {
  if (label < 0 || label >= classes) {
    printf(
        "[%s] every label must be in [0, C) with C = %lld classes. However, got label %lld "
        "at position %lld.\n",
        op, static_cast<long long>(classes), static_cast<long long>(label),
        static_cast<long long>(position));
    __trap();
  }
}

template <class N, class V, class Team>
__device__ __forceinline__ OnlineSoftmax<V> row_state(const Team& team, const N* row,
                                                      int64_t classes) {
  OnlineSoftmax<V> state = OnlineSoftmax<V>::empty();
  for (int64_t j = team.rank(); j < classes; j += team.size()) state.add(load(row, j));
  return team.all_reduce(state, CombineSoftmax{});
}

// loss[r] = log(sum(exp(x[r]))) - x[r, label[r]].
template <class N, class I>
struct LossRow {
  using V = compute_t<N>;
  const N* x;
  const I* labels;
  N* loss;
  int64_t classes;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* row = x + r * classes;
    const OnlineSoftmax<V> state = row_state<N, V>(team, row, classes);
    if (team.rank() == 0) {
      const int64_t label = labels[r];
      check_label("sparse_softmax_cross_entropy", label, r, classes);
      store(loss, r, state.log_sum_exp() - load(row, label));
    }
  }
};

// dx[r, j] = (softmax(x[r])[j] - (j == label[r])) * dloss[r].
template <class N, class I>
struct LossGradRow {
  using V = compute_t<N>;
  const N* x;
  const I* labels;
  const N* dloss;
  N* dx;
  int64_t classes;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* row = x + r * classes;
    N* out = dx + r * classes;
    const OnlineSoftmax<V> state = row_state<N, V>(team, row, classes);
    const int64_t target = labels[r];
    if (team.rank() == 0) check_label("sparse_softmax_cross_entropy_grad", target, r, classes);
    const V log_sum = OnlineSoftmax<V>::log_of(state.sum);
    const V g = load(dloss, r);
    for (int64_t j = team.rank(); j < classes; j += team.size()) {
      const V p = OnlineSoftmax<V>::exp_of(load(row, j) - state.max - log_sum);
      store(out, j, (j == target ? p - V(1) : p) * g);
    }
  }
};

int64_t class_count(const Tensor& logits) { return logits.shape()[logits.ndim() - 1]; }

template <class T>
struct SparseSoftmaxCrossEntropyKernel {
  template <class I>
  static void run_with(const KernelContext& ctx) {
    const int64_t classes = class_count(ctx.in(0));
    launch_rows(ctx, "sparse_softmax_cross_entropy", ctx.in(1).numel(), classes,
                LossRow<native_t<T>, I>{data<T>(ctx.in(0)), ctx.in(1).data<I>(),
                                        data<T>(ctx.out(0)), classes});
  }
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      run_with<int32_t>(ctx);
    } else {
      run_with<int64_t>(ctx);
    }
  }
};

template <class T>
struct SparseSoftmaxCrossEntropyGradKernel {
  template <class I>
  static void run_with(const KernelContext& ctx) {
    const int64_t classes = class_count(ctx.in(0));
    launch_rows(ctx, "sparse_softmax_cross_entropy_grad", ctx.in(1).numel(), classes,
                LossGradRow<native_t<T>, I>{data<T>(ctx.in(0)), ctx.in(1).data<I>(),
                                            data<T>(ctx.in(2)), data<T>(ctx.out(0)), classes});
  }
  static void run(const KernelContext& ctx) {
    if (ctx.in(1).dtype() == DataType::kInt32) {
      run_with<int32_t>(ctx);
    } else {
      run_with<int64_t>(ctx);
    }
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("sparse_softmax_cross_entropy", kCUDA, SparseSoftmaxCrossEntropyKernel,
                    OFL_FLOATS);
OFL_REGISTER_KERNEL("sparse_softmax_cross_entropy_grad", kCUDA, SparseSoftmaxCrossEntropyGradKernel,
                    OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
