// CUDA kernels of layer_norm and its backward ops, computing what kernels/cpu/layer_norm.cpp
// computes. x is viewed as (rows, cols), rows the number of elements of mean (this rank's
// part). The statistics take two passes over a row, as on the CPU (no cancellation for large
// means), in float32 for float32 and the 16-bit dtypes, float64 for double; the 16-bit dtypes
// normalise with the float32 statistics and store them rounded. The parameter gradients are
// column sums in two passes (Note [Column reductions] in reduce.cuh): deterministic, no atomics.

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/layer_norm.h"

namespace ofl::cuda_kernels {

namespace {

template <class V>
__device__ __forceinline__ V inverse_sqrt(V v) {
  return V(1) / sqrt(v);  // correctly rounded sqrt and division, unlike rsqrt
}

// Inputs (x, weight, bias) -> (y, mean, inv_std).
template <class N>
struct LayerNormRow {
  using V = compute_t<N>;
  const N* x;
  const N* w;
  const N* bias;
  N* y;
  N* mean;
  N* inv_std;
  int64_t cols;
  V epsilon;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* xr = x + r * cols;
    N* yr = y + r * cols;
    V sum = 0;
    for (int64_t c = team.rank(); c < cols; c += team.size()) sum += load(xr, c);
    sum = team.all_reduce(sum, Sum{});
    const V mu = cols > 0 ? sum / static_cast<V>(cols) : V(0);
    V squares = 0;
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      const V d = load(xr, c) - mu;
      squares += d * d;
    }
    squares = team.all_reduce(squares, Sum{});
    const V var = cols > 0 ? squares / static_cast<V>(cols) : V(0);
    const V is = inverse_sqrt(var + epsilon);
    if (team.rank() == 0) {
      store(mean, r, mu);
      store(inv_std, r, is);
    }
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      store(yr, c, (load(xr, c) - mu) * is * load(w, c) + load(bias, c));
    }
  }
};

template <class T>
struct LayerNormKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(0), ctx.out(1));
    launch_rows(ctx, "layer_norm", rows, cols,
                LayerNormRow<N>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.in(2)),
                                data<T>(ctx.out(0)), data<T>(ctx.out(1)), data<T>(ctx.out(2)), cols,
                                static_cast<compute_t<N>>(ctx.p<LayerNormParams>().epsilon)});
  }
};

// Inputs (dy, x, mean, inv_std, weight) -> dx. With g = dy * weight and xhat the normalised x:
//   dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)).
template <class N>
struct LayerNormGradRow {
  using V = compute_t<N>;
  const N* dy;
  const N* x;
  const N* mean;
  const N* inv_std;
  const N* w;
  N* dx;
  int64_t cols;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* dyr = dy + r * cols;
    const N* xr = x + r * cols;
    N* dxr = dx + r * cols;
    const V m = load(mean, r), is = load(inv_std, r);
    SumPair<V> sums{0, 0};  // (sum of g, sum of g * xhat)
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      const V g = load(dyr, c) * load(w, c);
      sums = sums + SumPair<V>{g, g * ((load(xr, c) - m) * is)};
    }
    sums = team.all_reduce(sums, Sum{});
    const V mean_g = sums.first / static_cast<V>(cols);
    const V mean_g_xhat = sums.second / static_cast<V>(cols);
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      const V xhat = (load(xr, c) - m) * is;
      store(dxr, c, is * (load(dyr, c) * load(w, c) - mean_g - xhat * mean_g_xhat));
    }
  }
};

template <class T>
struct LayerNormGradKernel {
  static void run(const KernelContext& ctx) {
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    launch_rows(ctx, "layer_norm_grad", rows, cols,
                LayerNormGradRow<native_t<T>>{data<T>(ctx.in(0)), data<T>(ctx.in(1)),
                                              data<T>(ctx.in(2)), data<T>(ctx.in(3)),
                                              data<T>(ctx.in(4)), data<T>(ctx.out(0)), cols});
  }
};

// (dy * xhat, dy) at row r, column c: the terms of dweight[c] and dbias[c].
template <class N>
struct ParamGradTerms {
  using V = compute_t<N>;
  const N* dy;
  const N* x;
  const N* mean;
  const N* inv_std;
  int64_t cols;
  __device__ __forceinline__ SumPair<V> operator()(int64_t, int64_t r, int64_t c) const {
    const int64_t k = r * cols + c;
    const V d = load(dy, k);
    return {d * ((load(x, k) - load(mean, r)) * load(inv_std, r)), d};
  }
};

template <class N>
struct StoreParamGrads {
  N* dw;
  N* db;
  __device__ __forceinline__ void operator()(int64_t c, SumPair<compute_t<N>> sums) const {
    store(dw, c, sums.first);
    store(db, c, sums.second);
  }
};

// Inputs (dy, x, mean, inv_std) -> (dweight, dbias): column sums of dy * xhat and of dy.
template <class T>
struct LayerNormParamGradKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    using V = compute_t<N>;
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    if (rows == 0) {  // no rows here: the sums are zero (all-zero bits in every float dtype)
      const cudaStream_t stream = stream_of(ctx);
      for (int k = 0; k < 2; ++k) {
        cuda::check(cudaMemsetAsync(ctx.out(k).raw_data(), 0, ctx.out(k).nbytes(), stream),
                    "cudaMemsetAsync", device_of(ctx));
      }
      return;
    }
    reduce_columns(ctx, "layer_norm_param_grad", ColumnShape{1, rows, cols}, SumPair<V>{0, 0},
                   ParamGradTerms<N>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.in(2)),
                                     data<T>(ctx.in(3)), cols},
                   Sum{}, StoreParamGrads<N>{data<T>(ctx.out(0)), data<T>(ctx.out(1))});
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("layer_norm", kCUDA, LayerNormKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("layer_norm_grad", kCUDA, LayerNormGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("layer_norm_param_grad", kCUDA, LayerNormParamGradKernel, OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
