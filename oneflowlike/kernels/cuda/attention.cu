// CUDA kernels of fused attention (Note [Fused attention] in ops/attention.h), computing what
// kernels/cpu/attention.cpp computes, in float32 for the 16-bit dtypes. A warp takes one row:
//  - forward: one query row walks its keys with the online softmax, each lane holding its
//    slice of the output row; lse = m + log(l);
//  - backward: D_i = dout_i . out_i per query row; then dq per query row (walking keys) and
//    dk, dv per key row (walking the query rows of its query heads, those at or after it under
//    is_causal), each recomputing p = exp(s - lse). Every sum has one owner and one order: no
//    atomics, deterministic.
// These are straightforward kernels, correct rather than fast: one score per warp reduction.
// cuDNN's fused attention is not used yet.

#include <type_traits>

#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/attention.h"

namespace ofl::cuda_kernels {

namespace {

constexpr int kMaxSlots = 8;  // per thread of a warp: head dims up to 256
constexpr int64_t kMaxHeadDim = 8 * 32;

template <class T>
using lse_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class N>
struct AttentionArgs {
  using V = compute_t<N>;
  const N* q;
  const N* k;
  const N* v;
  const N* mask;  // null: none
  MaskStrides ms;
  AttentionDims d;
  V scale;
  bool causal;

  // Where query row r = (b, h, i) starts, and its key/value head's keys.
  __device__ void locate(int64_t r, int64_t* b, int64_t* h, int64_t* i, const N** krows,
                         const N** vrows) const {
    *i = r % d.queries;
    *h = r / d.queries % d.heads;
    *b = r / (d.queries * d.heads);
    const int64_t kv = *b * d.kv_heads + *h / (d.heads / d.kv_heads);
    *krows = k + kv * d.keys * d.head_dim;
    *vrows = v + kv * d.keys * d.value_dim;
  }
  // The score of query row r (at qrow) against key j (its key row at krow).
  template <class Team>
  __device__ V score(const Team& team, const N* qrow, const N* krow, int64_t b, int64_t h,
                     int64_t i, int64_t j) const {
    V dot = 0;
    for (int64_t c = team.rank(); c < d.head_dim; c += team.size()) {
      dot += load(qrow, c) * load(krow, c);
    }
    V s = team.all_reduce(dot, Sum{}) * scale;
    if (mask != nullptr) s += load(mask, b * ms.batch + h * ms.head + i * ms.query + j * ms.key);
    return s;
  }
  __device__ int64_t keys_of(int64_t i) const {
    return causal ? (i + 1 < d.keys ? i + 1 : d.keys) : d.keys;
  }
};

// (q, k, v[, mask]) -> (out, lse), one query row per team.
template <class N, class L>
struct AttentionRow {
  using V = compute_t<N>;
  AttentionArgs<N> a;
  N* out;
  L* lse;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    int64_t b, h, i;
    const N *krows, *vrows;
    a.locate(r, &b, &h, &i, &krows, &vrows);
    const N* qrow = a.q + r * a.d.head_dim;
    V acc[kMaxSlots];
    for (int t = 0; t < kMaxSlots; ++t) acc[t] = 0;
    V m = -INFINITY, l = 0;
    const int64_t last = a.keys_of(i);
    for (int64_t j = 0; j < last; ++j) {
      const V s = a.score(team, qrow, krows + j * a.d.head_dim, b, h, i, j);
      if (s == -INFINITY) continue;
      const V top = s > m ? s : m;
      const V rescale = exp(m - top), p = exp(s - top);
      l = l * rescale + p;
      m = top;
      const N* vrow = vrows + j * a.d.value_dim;
      int t = 0;
      for (int64_t c = team.rank(); c < a.d.value_dim; c += team.size(), ++t) {
        acc[t] = acc[t] * rescale + p * load(vrow, c);
      }
    }
    N* orow = out + r * a.d.value_dim;
    int t = 0;
    for (int64_t c = team.rank(); c < a.d.value_dim; c += team.size(), ++t) {
      store(orow, c, acc[t] / l);  // no key seen: 0 / 0, NaN as on the CPU
    }
    if (team.rank() == 0) lse[r] = static_cast<L>(m + log(l));
  }
};

// D_r = dout_r . out_r.
template <class N, class L>
struct RowDot {
  using V = compute_t<N>;
  const N* dout;
  const N* out;
  L* dsum;
  int64_t cols;
  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    V dot = 0;
    for (int64_t c = team.rank(); c < cols; c += team.size()) {
      dot += load(dout, r * cols + c) * load(out, r * cols + c);
    }
    dot = team.all_reduce(dot, Sum{});
    if (team.rank() == 0) dsum[r] = static_cast<L>(dot);
  }
};

// dq of query row r: sum over keys of scale * p (dp - D) k_j.
template <class N, class L>
struct AttentionDqRow {
  using V = compute_t<N>;
  AttentionArgs<N> a;
  const N* dout;
  const L* lse;
  const L* dsum;
  N* dq;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    int64_t b, h, i;
    const N *krows, *vrows;
    a.locate(r, &b, &h, &i, &krows, &vrows);
    const N* qrow = a.q + r * a.d.head_dim;
    const N* drow = dout + r * a.d.value_dim;
    const V row_lse = static_cast<V>(lse[r]), di = static_cast<V>(dsum[r]);
    V acc[kMaxSlots];
    for (int t = 0; t < kMaxSlots; ++t) acc[t] = 0;
    const int64_t last = a.keys_of(i);
    for (int64_t j = 0; j < last; ++j) {
      const N* krow = krows + j * a.d.head_dim;
      const V s = a.score(team, qrow, krow, b, h, i, j);
      if (s == -INFINITY) continue;
      const V p = exp(s - row_lse);
      V dot = 0;
      for (int64_t c = team.rank(); c < a.d.value_dim; c += team.size()) {
        dot += load(drow, c) * load(vrows + j * a.d.value_dim, c);
      }
      const V ds = p * (team.all_reduce(dot, Sum{}) - di) * a.scale;
      int t = 0;
      for (int64_t c = team.rank(); c < a.d.head_dim; c += team.size(), ++t) {
        acc[t] += ds * load(krow, c);
      }
    }
    int t = 0;
    for (int64_t c = team.rank(); c < a.d.head_dim; c += team.size(), ++t) {
      store(dq + r * a.d.head_dim, c, acc[t]);
    }
  }
};

// dk and dv of key row r = (b, kv head, j): sums over the query rows of its query heads.
template <class N, class L>
struct AttentionDkvRow {
  using V = compute_t<N>;
  AttentionArgs<N> a;
  const N* dout;
  const L* lse;
  const L* dsum;
  N* dk;
  N* dv;

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const AttentionDims& d = a.d;
    const int64_t j = r % d.keys, kv = r / d.keys % d.kv_heads, b = r / (d.keys * d.kv_heads);
    const N* krow = a.k + r * d.head_dim;
    const N* vrow = a.v + r * d.value_dim;
    V dk_acc[kMaxSlots], dv_acc[kMaxSlots];
    for (int t = 0; t < kMaxSlots; ++t) dk_acc[t] = dv_acc[t] = 0;
    const int64_t group = d.heads / d.kv_heads;
    for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
      for (int64_t i = a.causal ? j : 0; i < d.queries; ++i) {
        const int64_t q_row = (b * d.heads + h) * d.queries + i;
        const N* qrow = a.q + q_row * d.head_dim;
        const V s = a.score(team, qrow, krow, b, h, i, j);
        if (s == -INFINITY) continue;
        const V p = exp(s - static_cast<V>(lse[q_row]));
        const N* drow = dout + q_row * d.value_dim;
        V dot = 0;
        int t = 0;
        for (int64_t c = team.rank(); c < d.value_dim; c += team.size(), ++t) {
          const V g = load(drow, c);
          dv_acc[t] += p * g;
          dot += g * load(vrow, c);
        }
        const V ds = p * (team.all_reduce(dot, Sum{}) - static_cast<V>(dsum[q_row])) * a.scale;
        t = 0;
        for (int64_t c = team.rank(); c < d.head_dim; c += team.size(), ++t) {
          dk_acc[t] += ds * load(qrow, c);
        }
      }
    }
    int t = 0;
    for (int64_t c = team.rank(); c < d.head_dim; c += team.size(), ++t) {
      store(dk + r * d.head_dim, c, dk_acc[t]);
    }
    t = 0;
    for (int64_t c = team.rank(); c < d.value_dim; c += team.size(), ++t) {
      store(dv + r * d.value_dim, c, dv_acc[t]);
    }
  }
};

template <class T>
AttentionArgs<native_t<T>> attention_args(const KernelContext& ctx, int q_at, int mask_at) {
  const AttentionDims d = attention_dims(ctx.in(q_at), ctx.in(q_at + 1), ctx.in(q_at + 2));
  OFL_CHECK(d.head_dim <= kMaxHeadDim && d.value_dim <= kMaxHeadDim,
            "[scaled_dot_product_attention] the CUDA kernels take head dims up to ", kMaxHeadDim,
            ". However, got q ", ctx.in(q_at).shape().to_string(), " and v ",
            ctx.in(q_at + 2).shape().to_string(), ".");
  const auto& p = ctx.p<AttentionParams>();
  AttentionArgs<native_t<T>> a{data<T>(ctx.in(q_at)),
                               data<T>(ctx.in(q_at + 1)),
                               data<T>(ctx.in(q_at + 2)),
                               nullptr,
                               {},
                               d,
                               static_cast<compute_t<native_t<T>>>(p.scale),
                               p.is_causal};
  if (mask_at >= 0) {
    a.mask = data<T>(ctx.in(mask_at));
    a.ms = attention_mask_strides(ctx.in(mask_at).shape());
  }
  return a;
}

template <class T>
struct AttentionKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    const auto a = attention_args<T>(ctx, 0, ctx.inputs.size() == 4 ? 3 : -1);
    launch_rows(ctx, "scaled_dot_product_attention", a.d.batch * a.d.heads * a.d.queries,
                std::max(a.d.head_dim, a.d.value_dim),
                AttentionRow<N, lse_t<T>>{a, data<T>(ctx.out(0)),
                                          static_cast<lse_t<T>*>(ctx.out(1).raw_data())});
  }
};

template <class T>
struct AttentionGradKernel {
  static void run(const KernelContext& ctx) {
    using N = native_t<T>;
    using L = lse_t<T>;
    const auto a = attention_args<T>(ctx, 1, ctx.inputs.size() == 7 ? 6 : -1);
    const int64_t rows = a.d.batch * a.d.heads * a.d.queries;
    const N* dout = data<T>(ctx.in(0));
    const L* lse = static_cast<const L*>(ctx.in(5).raw_data());
    Scratch dsum(ctx, std::max<int64_t>(rows, 1) * sizeof(L));
    const int64_t width = std::max(a.d.head_dim, a.d.value_dim);
    launch_rows(ctx, "scaled_dot_product_attention_grad (D)", rows, a.d.value_dim,
                RowDot<N, L>{dout, data<T>(ctx.in(4)), dsum.as<L>(), a.d.value_dim});
    launch_rows(ctx, "scaled_dot_product_attention_grad (dq)", rows, width,
                AttentionDqRow<N, L>{a, dout, lse, dsum.as<L>(), data<T>(ctx.out(0))});
    launch_rows(ctx, "scaled_dot_product_attention_grad (dk, dv)",
                a.d.batch * a.d.kv_heads * a.d.keys, width,
                AttentionDkvRow<N, L>{a, dout, lse, dsum.as<L>(), data<T>(ctx.out(1)),
                                      data<T>(ctx.out(2))});
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("scaled_dot_product_attention", kCUDA, AttentionKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked", kCUDA, AttentionKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_grad", kCUDA, AttentionGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked_grad", kCUDA, AttentionGradKernel,
                    OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
