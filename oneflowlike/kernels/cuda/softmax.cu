// CUDA kernels of softmax, log_softmax and their backward ops along any axis, computing what
// kernels/cpu/softmax.cpp computes (float32 for the 16-bit dtypes). The tensor is viewed as
// (outer, axis, inner); each line along the axis is one team's (launch_lines in reduce.cuh):
// the forward folds the line's Note [Online softmax] state and then writes, the backward folds
// one sum and then writes.

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/kernels/online_softmax.h"
#include "oneflowlike/ops/softmax.h"

namespace ofl::cuda_kernels {

namespace {

AxisView axis_view(const Shape& shape, int64_t axis) {
  if (shape.ndim() == 0) return {};
  const int a = static_cast<int>(axis < 0 ? axis + shape.ndim() : axis);
  return {shape.count(0, a), shape[a], shape.count(a + 1, shape.ndim())};
}

// softmax:      y = exp(x - max) * (1 / sum(exp(x - max))).
// log_softmax:  y = x - (max + log(sum(exp(x - max)))).
template <class N, bool kLog>
struct SoftmaxLine {
  using V = compute_t<N>;
  const N* x;
  N* y;
  int64_t extent;

  template <class Team>
  __device__ void operator()(const Team& team, Line line) const {
    OnlineSoftmax<V> state = OnlineSoftmax<V>::empty();
    if (line.active) {
      for (int64_t j = team.rank(); j < extent; j += team.size()) state.add(load(x, line.at(j)));
    }
    state = team.all_reduce(state, CombineSoftmax{});
    if (!line.active) return;
    if constexpr (kLog) {
      const V shift = state.log_sum_exp();
      for (int64_t j = team.rank(); j < extent; j += team.size()) {
        const int64_t k = line.at(j);
        store(y, k, load(x, k) - shift);
      }
    } else {
      const V inv = V(1) / state.sum;
      for (int64_t j = team.rank(); j < extent; j += team.size()) {
        const int64_t k = line.at(j);
        store(y, k, OnlineSoftmax<V>::exp_of(load(x, k) - state.max) * inv);
      }
    }
  }
};

// softmax_grad:      dx = y * (dy - sum(dy * y)).
// log_softmax_grad:  dx = dy - exp(y) * sum(dy).
template <class N, bool kLog>
struct SoftmaxBackwardLine {
  using V = compute_t<N>;
  const N* y;
  const N* dy;
  N* dx;
  int64_t extent;

  template <class Team>
  __device__ void operator()(const Team& team, Line line) const {
    V acc = 0;
    if (line.active) {
      for (int64_t j = team.rank(); j < extent; j += team.size()) {
        const int64_t k = line.at(j);
        acc += kLog ? load(dy, k) : load(dy, k) * load(y, k);
      }
    }
    const V s = team.all_reduce(acc, Sum{});
    if (!line.active) return;
    for (int64_t j = team.rank(); j < extent; j += team.size()) {
      const int64_t k = line.at(j);
      const V yk = load(y, k), dyk = load(dy, k);
      if constexpr (kLog) {
        store(dx, k, dyk - OnlineSoftmax<V>::exp_of(yk) * s);
      } else {
        store(dx, k, yk * (dyk - s));
      }
    }
  }
};

template <class T, bool kLog>
struct SoftmaxKernel {
  static void run(const KernelContext& ctx) {
    const AxisView v = axis_view(ctx.in(0).shape(), ctx.p<SoftmaxParams>().axis);
    if (v.extent == 0) return;
    launch_lines(ctx, kLog ? "log_softmax" : "softmax", v,
                 SoftmaxLine<native_t<T>, kLog>{data<T>(ctx.in(0)), data<T>(ctx.out(0)), v.extent});
  }
};

template <class T, bool kLog>
struct SoftmaxBackwardKernel {
  static void run(const KernelContext& ctx) {
    const AxisView v = axis_view(ctx.in(0).shape(), ctx.p<SoftmaxParams>().axis);
    if (v.extent == 0) return;
    launch_lines(ctx, kLog ? "log_softmax_grad" : "softmax_grad", v,
                 SoftmaxBackwardLine<native_t<T>, kLog>{data<T>(ctx.in(0)), data<T>(ctx.in(1)),
                                                        data<T>(ctx.out(0)), v.extent});
  }
};

template <class T>
using SoftmaxForward = SoftmaxKernel<T, false>;
template <class T>
using LogSoftmaxForward = SoftmaxKernel<T, true>;
template <class T>
using SoftmaxGradKernel = SoftmaxBackwardKernel<T, false>;
template <class T>
using LogSoftmaxGradKernel = SoftmaxBackwardKernel<T, true>;

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("softmax", kCUDA, SoftmaxForward, OFL_FLOATS);
OFL_REGISTER_KERNEL("log_softmax", kCUDA, LogSoftmaxForward, OFL_FLOATS);
OFL_REGISTER_KERNEL("softmax_grad", kCUDA, SoftmaxGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("log_softmax_grad", kCUDA, LogSoftmaxGradKernel, OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
