// CUDA kernels of rms_norm and its backward ops, computing what kernels/cpu/rms_norm.cpp
// computes. x is viewed as (rows, cols), rows the number of elements of inv_rms (this rank's
// part). Row sums in float32 for float32 and the 16-bit dtypes, float64 for double; dweight is
// a column sum in two passes (Note [Column reductions] in reduce.cuh): deterministic.

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/rms_norm.h"

namespace ofl::cuda_kernels {

namespace {

// Inputs (x, weight) -> (y, inv_rms).
template <class N>
struct RmsNormRow {
  using V = compute_t<N>;
  const N* x;
  const N* w;
  N* y;
  N* inv_rms;
  int64_t cols;
  V epsilon;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* xr = x + r * cols;
    N* yr = y + r * cols;
    V squares = 0;
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      const V v = load(xr, c);
      squares += v * v;
    }
    squares = team.all_reduce(squares, Sum{});
    const V mean_sq = cols > 0 ? squares / static_cast<V>(cols) : V(0);
    const V ir = V(1) / sqrt(mean_sq + epsilon);  // correctly rounded, unlike rsqrt
    if (team.rank() == 0) store(inv_rms, r, ir);
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      store(yr, c, load(xr, c) * ir * load(w, c));
    }
  }
};

template <class T>
struct RmsNormKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(0), ctx.out(1));
    launch_rows(ctx, "rms_norm", rows, cols,
                RmsNormRow<N>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.out(0)),
                              data<T>(ctx.out(1)), cols,
                              static_cast<compute_t<N>>(ctx.p<LayerNormParams>().epsilon)});
  }
};

// Inputs (dy, x, inv_rms, weight) -> dx = inv_rms * (g - xhat * mean(g * xhat)), g = dy * w.
template <class N>
struct RmsNormGradRow {
  using V = compute_t<N>;
  const N* dy;
  const N* x;
  const N* inv_rms;
  const N* w;
  N* dx;
  int64_t cols;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const N* dyr = dy + r * cols;
    const N* xr = x + r * cols;
    N* dxr = dx + r * cols;
    const V ir = load(inv_rms, r);
    V sum = 0;
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      sum += load(dyr, c) * load(w, c) * (load(xr, c) * ir);
    }
    sum = team.all_reduce(sum, Sum{});
    const V mean_g_xhat = sum / static_cast<V>(cols);
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      store(dxr, c, ir * (load(dyr, c) * load(w, c) - (load(xr, c) * ir) * mean_g_xhat));
    }
  }
};

template <class T>
struct RmsNormGradKernel {
  static void run(const KernelContext& ctx) {
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    launch_rows(
        ctx, "rms_norm_grad", rows, cols,
        RmsNormGradRow<native_t<T>>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.in(2)),
                                    data<T>(ctx.in(3)), data<T>(ctx.out(0)), cols});
  }
};

// dy * xhat at row r, column c: the term of dweight[c].
template <class N>
struct ParamGradTerm {
  using V = compute_t<N>;
  const N* dy;
  const N* x;
  const N* inv_rms;
  int64_t cols;
  __device__ __forceinline__ V operator()(int64_t, int64_t r, int64_t c) const {
    const int64_t k = r * cols + c;
    return load(dy, k) * (load(x, k) * load(inv_rms, r));
  }
};

template <class N>
struct StoreParamGrad {
  N* dw;
  __device__ __forceinline__ void operator()(int64_t c, compute_t<N> sum) const {
    store(dw, c, sum);
  }
};

// Inputs (dy, x, inv_rms) -> dweight: column sums of dy * xhat.
template <class T>
struct RmsNormParamGradKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    using V = compute_t<N>;
    const auto [rows, cols] = layer_norm_rows_cols(ctx.in(1), ctx.in(2));
    if (rows == 0) {  // no rows here: the sums are zero (all-zero bits in every float dtype)
      cuda::check(cudaMemsetAsync(ctx.out(0).raw_data(), 0, ctx.out(0).nbytes(), stream_of(ctx)),
                  "cudaMemsetAsync", device_of(ctx));
      return;
    }
    reduce_columns(
        ctx, "rms_norm_param_grad", ColumnShape{1, rows, cols}, V(0),
        ParamGradTerm<N>{data<T>(ctx.in(0)), data<T>(ctx.in(1)), data<T>(ctx.in(2)), cols}, Sum{},
        StoreParamGrad<N>{data<T>(ctx.out(0))});
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("rms_norm", kCUDA, RmsNormKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("rms_norm_grad", kCUDA, RmsNormGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("rms_norm_param_grad", kCUDA, RmsNormParamGradKernel, OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
