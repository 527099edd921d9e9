// CUDA kernels of fused attention (Note [Fused attention] in ops/attention.h), computing what
// kernels/cpu/attention.cpp computes, in float32 for the 16-bit dtypes (float64 for float64).
//
// Note [Attention through batched products on the GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The products go to cuBLASLt (batched_product.h) and only the softmax steps are our kernels.
// Grouped-query heads make this one strided batch per product: query heads h of key/value head
// g are adjacent in q (B, H, L, E), so the G = H / Hk heads of a group are one (G*L, E) matrix
// against the group's (S, E) keys, and the batch runs over the B*Hk groups:
//  - forward: s = scale * q k^T (G*L, S); a row kernel adds the mask, applies is_causal, folds
//    the row's online softmax (Note [Online softmax]) and writes p = exp(s - max) / sum (0 for
//    masked entries) and lse = max + log(sum); out = p v.
//  - backward: D_i = dout_i . out_i; s recomputed, p = exp(s - lse); dv = p^T dout;
//    dp = dout v^T; ds = p (dp - D) scale; dq = ds k; dk = ds^T q. The sum over a group's query
//    heads that dk and dv need is the product's own sum over its G*L rows.
// The score matrices exist for a chunk of groups at a time, at most kScoreBytes per matrix
// where one group's (G*L, S) fits in it; a single larger group is made whole (G 8 at L = S =
// 8192: 2 GiB a matrix, two in the backward): the chunking bounds the memory of many groups,
// not of one long sequence. The flash-style kernels that never make them (and cuDNN's fused
// attention) are not written yet, and this scratch is not in the plan's memory report.
// Precision: every product accumulates in float32 (CUBLAS_COMPUTE_32F, no TF32); the scores
// and dp are float32, and out, dq, dk and dv are rounded once into the outputs' dtype by the
// products themselves. The softmax steps compute in float32. With float16 and bfloat16 operands
// the products read them as they are, at 16-bit tensor-core speed, and the two matrices that
// are themselves product operands, p (for out = p v and dv = p^T dout) and ds (for dq and dk),
// are rounded to the 16-bit dtype first, as flash attention does; the CPU kernels keep them in
// float32 and divide by the sum after the product, so the two differ by those roundings (the
// tests' tolerance).
// Sequence-first operands (Note [Sequence-first attention]) are moved to (B, H, L, E) scratch
// first, and the outputs back, by one kernel each (SwapMiddleAxes): the grouped-query batches
// above need a group's heads adjacent. That is still one act instead of four transposes' acts
// each way.
// Rows whose keys are all masked give out = 0 and lse = +inf, as on the CPU and in PyTorch's
// SDPA (Note [Rows with every key masked] in kernels/cpu/attention.cpp): their p is 0, so the
// backward gives the row a dq of 0 and adds nothing to dk and dv. Without keys (S = 0) out is
// 0, as in PyTorch and on the CPU. Every sum has one
// order (cuBLASLt with a fixed plan, one row per team): results are the same every run.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "oneflowlike/kernels/cuda/batched_product.h"
#include "oneflowlike/kernels/cuda/reduce.cuh"
#include "oneflowlike/ops/attention.h"

namespace ofl::cuda_kernels {

namespace {

// The registry type the products and softmax run in: float for float32 and the 16-bit dtypes.
template <class T>
using calc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One score matrix (G*L, S) per group, of at most this many bytes for all groups of a chunk.
constexpr int64_t kScoreBytes = int64_t{256} << 20;

// A (rows, keys) matrix that is an operand of a later product, in the operands' dtype N: the
// float32 scores' own buffer when N is the compute type, else a buffer of its own.
template <class C, class N>
struct Operand {
  std::optional<Scratch> buffer;
  N* at = nullptr;
  Operand(const KernelContext& ctx, C* scores, int64_t elements) {
    if constexpr (std::is_same_v<C, N>) {
      at = scores;
    } else {
      buffer.emplace(ctx, static_cast<size_t>(std::max<int64_t>(elements, 1)) * sizeof(N));
      at = buffer->template as<N>();
    }
  }
};

// The scores' row r of a chunk whose first query row is row0: its (batch, head, query).
struct ScoreRows {
  AttentionDims d;
  int64_t row0;
  DocumentIds docs;  // Note [Packed documents]
  __device__ void locate(int64_t r, int64_t* b, int64_t* h, int64_t* i) const {
    const int64_t g = row0 + r;
    *i = g % d.queries;
    *h = g / d.queries % d.heads;
    *b = g / (d.queries * d.heads);
  }
  // The keys a walk of query i's row goes through: all, or under is_causal, in the sequence's
  // order, those up to its position (Note [Sequence-split attention]); in the zigzag order all,
  // sees() hiding the later ones.
  __device__ int64_t keys_of(int64_t i, bool causal) const {
    const int64_t seen = d.zigzag > 0 ? d.keys : d.query_position(i) + 1;
    return causal ? (seen < d.keys ? seen : d.keys) : d.keys;
  }
  // Whether query i of sequence b sees key j (j < keys_of(i)): with document ids, where they
  // are of one document (Note [Packed documents]); under is_causal, where j is at or before its
  // position (Note [Zigzag order]: both stored in that order) and, with a window, at or after
  // its first key (Note [Sliding window]).
  __device__ bool sees(int64_t b, int64_t i, int64_t j, bool causal) const {
    if (docs.present() && docs.of(b, j) != docs.of(b, d.query_offset + i)) return false;
    if (!causal || (d.zigzag == 0 && d.window == 0)) return true;
    const int64_t at = d.position(j);
    return at <= d.query_position(i) && at >= d.first_key(i);
  }
};

template <class N>
struct MaskView {
  const N* mask;  // null: none
  MaskStrides ms;
  __device__ compute_t<N> at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return mask == nullptr ? compute_t<N>(0)
                           : load(mask, b * ms.batch + h * ms.head + i * ms.query + j * ms.key);
  }
};

// Forward, one score row per team: s += mask, causal entries out; p = exp(s - max) / sum (0
// where s is -inf, and throughout a row whose keys are all masked, whose lse is +inf) in the
// operands' dtype, and lse per row.
template <class C, class N, class L>
struct SoftmaxRow {
  const C* s;
  N* p;  // may be s itself (N = C)
  ScoreRows rows;
  MaskView<N> mask;
  bool causal;
  L* lse;  // per row of the chunk

  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    int64_t b, h, i;
    rows.locate(r, &b, &h, &i);
    const int64_t keys = rows.d.keys, last = rows.keys_of(i, causal);
    const C* row = s + r * keys;
    OnlineSoftmax<C> state = OnlineSoftmax<C>::empty();
    for (int64_t j = team.rank(); j < last; j += team.size()) {
      if (rows.sees(b, i, j, causal)) state.add(row[j] + static_cast<C>(mask.at(b, h, i, j)));
    }
    state = team.all_reduce(state, CombineSoftmax{});
    for (int64_t j = team.rank(); j < keys; j += team.size()) {
      const C x = j < last && rows.sees(b, i, j, causal)
                      ? row[j] + static_cast<C>(mask.at(b, h, i, j))
                      : -C(INFINITY);
      const C e = x == -C(INFINITY) ? C(0) : OnlineSoftmax<C>::exp_of(x - state.max);
      store(p, r * keys + j, state.sum > C(0) ? e / state.sum : C(0));
    }
    if (team.rank() == 0) {
      lse[r] = static_cast<L>(state.sum > C(0) ? state.log_sum_exp() : C(INFINITY));
    }
  }
};

// Backward: p = exp(s + mask - lse) in place (float32, for ds) and into p16 (the operand of
// dv's product; s itself when N = C), 0 where masked, per row of the chunk.
template <class C, class N, class L>
struct Probability {
  C* s;
  N* p16;
  ScoreRows rows;
  MaskView<N> mask;
  bool causal;
  const L* lse;  // per query row of the whole tensor
  // One row per team, so that a row's (batch, head, query) is found once, not per element.
  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    int64_t b, h, i;
    rows.locate(r, &b, &h, &i);
    const int64_t keys = rows.d.keys, last = rows.keys_of(i, causal);
    const C row_lse = static_cast<C>(lse[rows.row0 + r]);
    for (int64_t j = team.rank(); j < keys; j += team.size()) {
      const int64_t e = r * keys + j;
      const C x = j < last && rows.sees(b, i, j, causal)
                      ? s[e] + static_cast<C>(mask.at(b, h, i, j))
                      : -C(INFINITY);
      const C p = x == -C(INFINITY) ? C(0) : OnlineSoftmax<C>::exp_of(x - row_lse);
      s[e] = p;
      store(p16, e, p);
    }
  }
};

// ds = p (dp - D) scale into ds (the operand of dq's and dk's products: p's buffer when N = C,
// each element read before it is written), per row of the chunk.
template <class C, class N, class L>
struct ScoreGradient {
  const C* dp;
  N* ds;
  const C* p;
  const L* dsum;  // per query row of the whole tensor
  int64_t row0, keys;
  C scale;
  template <class Team>
  __device__ void operator()(const Team& team, int64_t r) const {
    const C d = static_cast<C>(dsum[row0 + r]);
    for (int64_t e = r * keys + team.rank(); e < (r + 1) * keys; e += team.size()) {
      store(ds, e, p[e] * (dp[e] - d) * scale);
    }
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

// (B, X, Y, units) -> (B, Y, X, units), units of U.
template <class U>
void swap_middle_axes_of(const KernelContext& ctx, const char* what, const U* in, U* out, int64_t b,
                         int64_t x, int64_t y, int64_t units) {
  launch_for_each(ctx, what, b * x * y * units, [=] __device__(int64_t e) {
    const int64_t u = e % units, r = e / units;  // row r of `out`: (batch, y, x)
    const int64_t xi = r % x, yi = r / x % y, bi = r / (x * y);
    out[e] = in[((bi * x + xi) * y + yi) * units + u];
  });
}

// (B, X, Y, D) -> (B, Y, X, D), rows of D elements moved whole: 16-byte units where the rows
// allow, else elements. One launch.
template <class N>
void swap_middle_axes(const KernelContext& ctx, const char* what, const N* from, N* to, int64_t b,
                      int64_t x, int64_t y, int64_t d) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t bytes = d * static_cast<int64_t>(sizeof(N));
  if (bytes % 16 == 0 && aligned(from) && aligned(to)) {
    swap_middle_axes_of(ctx, what, reinterpret_cast<const uint4*>(from),
                        reinterpret_cast<uint4*>(to), b, x, y, bytes / 16);
  } else {
    swap_middle_axes_of(ctx, what, from, to, b, x, y, d);
  }
}

// What one forward or backward call works with: sizes, the chunking of the B*Hk groups, the
// operands' description for errors.
template <class T>
struct Attention {
  using N = native_t<T>;
  using CT = calc_t<T>;
  using C = native_t<CT>;
  const KernelContext& ctx;
  AttentionDims d;
  double scale;
  bool causal;
  MaskView<N> mask{nullptr, {}};
  DocumentIds docs;                               // Note [Packed documents]
  int64_t groups = 0, group_rows = 0, chunk = 1;  // chunk: groups per pass
  int qat;                                        // where q is among the inputs
  const char* op;

  // extra_at: where the mask or the document ids are among the inputs, if the op has them.
  Attention(const KernelContext& c, int q_at, int extra_at, const char* name)
      : ctx(c), qat(q_at), op(name) {
    const auto& p = ctx.p<AttentionParams>();
    // Sizes only: the products below read (B, H, L, E) operands (staged(), for sequence-first).
    d = attention_dims(ctx, q_at);
    scale = p.scale;
    causal = p.is_causal;
    docs = document_ids_of(ctx, extra_at);
    if (static_cast<int>(ctx.inputs.size()) > extra_at && !docs.present()) {
      mask =
          MaskView<N>{data<T>(ctx.in(extra_at)), attention_mask_strides(ctx.in(extra_at).shape())};
    }
    groups = d.batch * d.kv_heads;
    group_rows = d.group() * d.queries;
    const int64_t score_bytes = std::max<int64_t>(group_rows * d.keys, 1) * sizeof(C);
    chunk = std::clamp<int64_t>(kScoreBytes / score_bytes, 1, std::max<int64_t>(groups, 1));
  }

  std::string describe() const {
    return str_cat("q ", ctx.in(qat).shape().to_string(), ", k ",
                   ctx.in(qat + 1).shape().to_string(), ", v ", ctx.in(qat + 2).shape().to_string(),
                   " ", dtype_name(ctx.in(qat).dtype()), " on ", ctx.in(qat).device().to_string());
  }
  // out (count, m, n) = alpha * op(a) @ op(b) for `count` groups: operands in the inputs'
  // dtype, out in the compute type (O = C) or rounded once into the inputs' dtype (O = N).
  template <class O>
  void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t count, const N* a,
               const N* b, O* out, double alpha) const {
    using Out = std::conditional_t<std::is_same_v<O, N>, T, CT>;
    gemm::RowMajorProduct p{ta, tb};
    p.m = m;
    p.n = n;
    p.k = k;
    batched_product<T, Out>(ctx, op, p, count, a, b, out, alpha, [this] { return describe(); });
  }
  ScoreRows rows_from(int64_t first_group) const { return {d, first_group * group_rows, docs}; }

  // A (B, H, rows, width) copy of a sequence-first operand (B, rows, H, width) in `scratch`;
  // the operand itself otherwise.
  const N* staged(const Tensor& t, int64_t heads, int64_t rows, int64_t width,
                  std::optional<Scratch>* scratch) const {
    if (!d.sequence_first) return data<T>(t);
    scratch->emplace(ctx, static_cast<size_t>(std::max<int64_t>(t.numel(), 1)) * sizeof(N));
    N* to = scratch->value().template as<N>();
    swap_middle_axes(ctx, "scaled_dot_product_attention (to heads first)", data<T>(t), to, d.batch,
                     rows, heads, width);
    return to;
  }
  // Where a (B, H, rows, width) result goes: `t` itself, or scratch moved into it by
  // unstage() once written.
  N* result(const Tensor& t, std::optional<Scratch>* scratch) const {
    if (!d.sequence_first) return data<T>(t);
    scratch->emplace(ctx, static_cast<size_t>(std::max<int64_t>(t.numel(), 1)) * sizeof(N));
    return scratch->value().template as<N>();
  }
  void unstage(const Tensor& t, int64_t heads, int64_t rows, int64_t width,
               const std::optional<Scratch>& scratch) const {
    if (!d.sequence_first) return;
    swap_middle_axes(ctx, "scaled_dot_product_attention (to sequence first)",
                     scratch.value().template as<N>(), data<T>(t), d.batch, heads, rows, width);
  }
};

template <class T>
struct AttentionKernel {
  static void run(const KernelContext& ctx) {
    using A = Attention<T>;
    using C = typename A::C;
    using N = typename A::N;
    using L = calc_t<T>;
    const A a(ctx, 0, 3, "scaled_dot_product_attention");
    const AttentionDims& d = a.d;
    std::optional<Scratch> q_heads, k_heads, v_heads, out_heads;
    const N* q = a.staged(ctx.in(0), d.heads, d.queries, d.head_dim, &q_heads);
    const N* k = a.staged(ctx.in(1), d.kv_heads, d.keys, d.head_dim, &k_heads);
    const N* v = a.staged(ctx.in(2), d.kv_heads, d.keys, d.value_dim, &v_heads);
    N* out = a.result(ctx.out(0), &out_heads);
    L* lse = static_cast<L*>(ctx.out(1).raw_data());
    const int64_t chunk_rows = a.chunk * a.group_rows;
    Scratch scores(ctx, static_cast<size_t>(std::max<int64_t>(chunk_rows * d.keys, 1)) * sizeof(C));
    C* s = scores.as<C>();
    const Operand<C, N> p(ctx, s, chunk_rows * d.keys);
    for (int64_t g0 = 0; g0 < a.groups; g0 += a.chunk) {
      const int64_t count = std::min(a.chunk, a.groups - g0), rows = count * a.group_rows;
      const int64_t row0 = g0 * a.group_rows;
      a.product(false, true, a.group_rows, d.keys, d.head_dim, count, q + row0 * d.head_dim,
                k + g0 * d.keys * d.head_dim, s, a.scale);
      launch_rows(ctx, "scaled_dot_product_attention (softmax)", rows, d.keys,
                  SoftmaxRow<C, N, L>{s, p.at, a.rows_from(g0), a.mask, a.causal, lse + row0});
      a.product(false, false, a.group_rows, d.value_dim, d.keys, count, p.at,
                v + g0 * d.keys * d.value_dim, out + row0 * d.value_dim, 1.0);
    }
    a.unstage(ctx.out(0), d.heads, d.queries, d.value_dim, out_heads);
  }
};

template <class T>
struct AttentionGradKernel {
  static void run(const KernelContext& ctx) {
    using A = Attention<T>;
    using C = typename A::C;
    using N = typename A::N;
    using L = calc_t<T>;
    const A a(ctx, 1, 6, "scaled_dot_product_attention_grad");
    const AttentionDims& d = a.d;
    const int64_t all_rows = d.batch * d.heads * d.queries;
    const L* lse = static_cast<const L*>(ctx.in(5).raw_data());
    std::optional<Scratch> dout_heads, out_heads, q_heads, k_heads, v_heads, dq_heads, dk_heads,
        dv_heads;
    const N* dout = a.staged(ctx.in(0), d.heads, d.queries, d.value_dim, &dout_heads);
    const N* out = a.staged(ctx.in(4), d.heads, d.queries, d.value_dim, &out_heads);
    Scratch dsum(ctx, static_cast<size_t>(std::max<int64_t>(all_rows, 1)) * sizeof(L));
    launch_rows(ctx, "scaled_dot_product_attention_grad (D)", all_rows, d.value_dim,
                RowDot<N, L>{dout, out, dsum.as<L>(), d.value_dim});
    const N* q = a.staged(ctx.in(1), d.heads, d.queries, d.head_dim, &q_heads);
    const N* k = a.staged(ctx.in(2), d.kv_heads, d.keys, d.head_dim, &k_heads);
    const N* v = a.staged(ctx.in(3), d.kv_heads, d.keys, d.value_dim, &v_heads);
    N* dq = a.result(ctx.out(0), &dq_heads);
    N* dk = a.result(ctx.out(1), &dk_heads);
    N* dv = a.result(ctx.out(2), &dv_heads);
    const int64_t chunk_elements = std::max<int64_t>(a.chunk * a.group_rows * d.keys, 1);
    Scratch probabilities(ctx, static_cast<size_t>(chunk_elements) * sizeof(C));
    Scratch gradients(ctx, static_cast<size_t>(chunk_elements) * sizeof(C));
    C* p = probabilities.as<C>();
    C* dp = gradients.as<C>();
    // p in the operands' dtype for dv, then ds in its place for dq and dk.
    const Operand<C, N> operand(ctx, p, chunk_elements);
    for (int64_t g0 = 0; g0 < a.groups; g0 += a.chunk) {
      const int64_t count = std::min(a.chunk, a.groups - g0), rows = count * a.group_rows;
      const int64_t row0 = g0 * a.group_rows;
      const int64_t key0 = g0 * d.keys;
      const N* qg = q + row0 * d.head_dim;
      const N* doutg = dout + row0 * d.value_dim;
      const N* kg = k + key0 * d.head_dim;
      const N* vg = v + key0 * d.value_dim;
      a.product(false, true, a.group_rows, d.keys, d.head_dim, count, qg, kg, p, a.scale);
      launch_rows(ctx, "scaled_dot_product_attention_grad (p)", rows, d.keys,
                  Probability<C, N, L>{p, operand.at, a.rows_from(g0), a.mask, a.causal, lse});
      a.product(true, false, d.keys, d.value_dim, a.group_rows, count, operand.at, doutg,
                dv + key0 * d.value_dim, 1.0);
      a.product(false, true, a.group_rows, d.keys, d.value_dim, count, doutg, vg, dp, 1.0);
      // ds in the operand's place: for N = C that is p, which ds reads element by element.
      N* ds = operand.at;
      launch_rows(
          ctx, "scaled_dot_product_attention_grad (ds)", rows, d.keys,
          ScoreGradient<C, N, L>{dp, ds, p, dsum.as<L>(), row0, d.keys, static_cast<C>(a.scale)});
      a.product(false, false, a.group_rows, d.head_dim, d.keys, count, ds, kg,
                dq + row0 * d.head_dim, 1.0);
      a.product(true, false, d.keys, d.head_dim, a.group_rows, count, ds, qg,
                dk + key0 * d.head_dim, 1.0);
    }
    a.unstage(ctx.out(0), d.heads, d.queries, d.head_dim, dq_heads);
    a.unstage(ctx.out(1), d.kv_heads, d.keys, d.head_dim, dk_heads);
    a.unstage(ctx.out(2), d.kv_heads, d.keys, d.value_dim, dv_heads);
  }
};

}  // namespace

#define OFL_FLOATS float, float16, bfloat16, double
OFL_REGISTER_KERNEL("scaled_dot_product_attention", kCUDA, AttentionKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked", kCUDA, AttentionKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_grad", kCUDA, AttentionGradKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_masked_grad", kCUDA, AttentionGradKernel,
                    OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_documents", kCUDA, AttentionKernel, OFL_FLOATS);
OFL_REGISTER_KERNEL("scaled_dot_product_attention_documents_grad", kCUDA, AttentionGradKernel,
                    OFL_FLOATS);
#undef OFL_FLOATS

}  // namespace ofl::cuda_kernels
