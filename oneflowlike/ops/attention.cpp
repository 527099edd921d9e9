// Fused attention (Note [Fused attention] in attention.h): inference, SBP signatures and the
// gradient. Three op names per direction, without a mask, with one, and with document ids (Note
// [Packed documents]), so every op has a fixed list of inputs.

#include "oneflowlike/ops/attention.h"

#include <algorithm>
#include <string_view>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

constexpr const char* kAttention = "scaled_dot_product_attention";
constexpr const char* kAttentionMasked = "scaled_dot_product_attention_masked";
constexpr const char* kAttentionGrad = "scaled_dot_product_attention_grad";
constexpr const char* kAttentionMaskedGrad = "scaled_dot_product_attention_masked_grad";
constexpr const char* kAttentionDocuments = "scaled_dot_product_attention_documents";
constexpr const char* kAttentionDocumentsGrad = "scaled_dot_product_attention_documents_grad";

// What an attention op's input after q, k, v (and for the backward op out and lse) is.
enum class Extra { kNone, kMask, kDocuments };
Extra extra_input(const InferContext& ctx, int at) {
  if (ctx.num_inputs() <= at) return Extra::kNone;
  return ctx.input_name(at) == "document_ids" ? Extra::kDocuments : Extra::kMask;
}

// The log-sum-exp's dtype: float32 for the 16-bit dtypes and float32, float64 for float64.
DataType lse_dtype(DataType dtype) {
  return dtype == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
}

// (B, L, H, E) as (B, H, L, E) and back (Note [Sequence-first attention]); other shapes as they
// are.
Shape swap_heads_and_sequence(const Shape& s, bool sequence_first) {
  if (!sequence_first || s.ndim() != 4) return s;
  return Shape{s[0], s[2], s[1], s[3]};
}

// Checks q, k, v (inputs q_at..q_at+2) and the mask or document ids (input extra_at, if the op
// has it); returns the out shape, (B, H, L, Ev) or sequence-first (B, L, H, Ev).
Shape check_attention_inputs(const InferContext& ctx, int q_at, int extra_at) {
  const Extra extra = extra_input(ctx, extra_at);
  const int mask_at = extra == Extra::kMask ? extra_at : -1;
  const bool sequence_first = ctx.params<AttentionParams>().sequence_first;
  // Read as (B, H, L, E); errors show the inputs as they are.
  const Shape q = swap_heads_and_sequence(ctx.shape(q_at), sequence_first);
  const Shape k = swap_heads_and_sequence(ctx.shape(q_at + 1), sequence_first);
  const Shape v = swap_heads_and_sequence(ctx.shape(q_at + 2), sequence_first);
  for (int i = q_at; i < q_at + 3; ++i) {
    OFL_CHECK_TYPE(ctx.dtype(i) == ctx.dtype(q_at) && is_floating(ctx.dtype(i)), "[", ctx.op_name(),
                   "] q, k and v must have one floating dtype. However, got ",
                   ctx.describe_inputs(), ".");
  }
  OFL_CHECK(
      q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "[", ctx.op_name(),
      "] q, k and v must be 4-d, ",
      sequence_first ? "(batch, sequence, heads, head_dim)" : "(batch, heads, sequence, head_dim)",
      ". However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK(q[0] == k[0] && k[0] == v[0], "[", ctx.op_name(),
            "] q, k and v must have one batch size. However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK(k[1] == v[1] && k[1] > 0 && q[1] % k[1] == 0, "[", ctx.op_name(),
            "] k and v must have one number of heads, dividing q's (grouped-query attention). "
            "However, got ",
            ctx.describe_inputs(), ".");
  OFL_CHECK(k[2] == v[2], "[", ctx.op_name(),
            "] k and v must have one sequence length. However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK(q[3] == k[3], "[", ctx.op_name(),
            "] q and k must have one head_dim (the last axis). However, got ",
            ctx.describe_inputs(), ".");
  const AttentionParams& params = ctx.params<AttentionParams>();
  if (params.zigzag != 0) {
    OFL_CHECK(params.zigzag > 0 && params.is_causal && mask_at < 0, "[", ctx.op_name(),
              "] zigzag (Note [Zigzag order]) orders causal attention's queries over zigzag "
              "pieces: it must be at least 1, with is_causal and no attn_mask. However, got "
              "zigzag ",
              params.zigzag, ", is_causal ", params.is_causal ? "true" : "false",
              mask_at >= 0 ? " and a mask" : " and no mask", ".");
    OFL_CHECK(q[2] == k[2] && q[2] % (2 * params.zigzag) == 0, "[", ctx.op_name(), "] zigzag ",
              params.zigzag, " cuts the sequence in ", 2 * params.zigzag,
              " chunks: q and k must have one sequence length that it divides. However, got ",
              ctx.describe_inputs(), ".");
  }
  OFL_CHECK(params.window == 0 || (params.window > 0 && params.is_causal && mask_at < 0), "[",
            ctx.op_name(),
            "] window (Note [Sliding window]) is how many of the latest keys each query of causal "
            "attention sees: it must be at least 1, with is_causal and no attn_mask. However, got "
            "window ",
            params.window, ", is_causal ", params.is_causal ? "true" : "false",
            mask_at >= 0 ? " and a mask" : " and no mask", ".");
  const Shape out{q[0], q[1], q[2], v[3]};
  if (extra == Extra::kDocuments) {
    const Shape& ids = ctx.shape(extra_at);
    OFL_CHECK(q[2] == k[2] && ids == Shape({q[0], k[2]}), "[", ctx.op_name(),
              "] document_ids (Note [Packed documents]) give each position of self-attention "
              "its document: q and k must have one sequence length L and document_ids must be "
              "(batch, L) ",
              Shape({q[0], k[2]}).to_string(), ". However, got ", ctx.describe_inputs(), ".");
    OFL_CHECK_TYPE(
        ctx.dtype(extra_at) == DataType::kInt32 || ctx.dtype(extra_at) == DataType::kInt64, "[",
        ctx.op_name(), "] document_ids must be int32 or int64. However, got ",
        dtype_name(ctx.dtype(extra_at)), ".");
  }
  if (mask_at >= 0) {
    const Shape& m = ctx.shape(mask_at);
    const Shape full{q[0], q[1], q[2], k[2]};
    bool fits = m.ndim() <= 4;
    for (int i = 1; fits && i <= m.ndim(); ++i) {
      fits = m[m.ndim() - i] == 1 || m[m.ndim() - i] == full[4 - i];
    }
    OFL_CHECK(fits, "[", ctx.op_name(), "] attn_mask must broadcast to (batch, heads, L, S) ",
              full.to_string(), ". However, got attn_mask ", m.to_string(), ".");
    OFL_CHECK_TYPE(ctx.dtype(mask_at) == ctx.dtype(q_at), "[", ctx.op_name(),
                   "] a float attn_mask must have q's dtype ", dtype_name(ctx.dtype(q_at)),
                   ". However, got ", dtype_name(ctx.dtype(mask_at)), ".");
  }
  return swap_heads_and_sequence(out, sequence_first);
}

// The axis of q, k, v and out that is `axis` in (B, H, L, E) terms.
int layout_axis(const InferContext& ctx, int axis) {
  const bool sequence_first = ctx.params<AttentionParams>().sequence_first;
  if (!sequence_first || axis == 0) return axis;
  return axis == 1 ? 2 : 1;
}

// (q, k, v[, mask]) -> (out, lse).
std::vector<TensorMeta> infer_attention(const InferContext& ctx) {
  const Shape out = check_attention_inputs(ctx, 0, 3);
  const DataType dtype = ctx.dtype(0);
  const int h = layout_axis(ctx, 1);  // the heads' (lse's is 1)
  return {TensorMeta{out, dtype}, TensorMeta{Shape{out[0], out[h], out[3 - h]}, lse_dtype(dtype)}};
}

// (dout, q, k, v, out, lse[, mask]) -> (dq, dk, dv).
std::vector<TensorMeta> infer_attention_grad(const InferContext& ctx) {
  const Shape out = check_attention_inputs(ctx, 1, 6);
  for (int i : {0, 4}) {
    OFL_CHECK(ctx.shape(i) == out && ctx.dtype(i) == ctx.dtype(1), "[", ctx.op_name(), "] ",
              ctx.input_name(i), " must be shaped like the attention's output ", out.to_string(),
              " with q's dtype. However, got ", ctx.describe_inputs(), ".");
  }
  const int h = layout_axis(ctx, 1);  // the heads' (lse's is 1)
  OFL_CHECK(ctx.shape(5) == Shape({out[0], out[h], out[3 - h]}), "[", ctx.op_name(),
            "] lse must be (batch, heads, L). However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK_TYPE(ctx.dtype(5) == lse_dtype(ctx.dtype(1)), "[", ctx.op_name(), "] lse must be ",
                 dtype_name(lse_dtype(ctx.dtype(1))), " (what the forward op gives for ",
                 dtype_name(ctx.dtype(1)), "). However, got ", ctx.describe_inputs(), ".");
  return {ctx.input(1), ctx.input(2), ctx.input(3)};
}

// The mask's SBP when q (and, but for the sequence, k and v) is split along `axis` (0: batch,
// 1: heads, 2: the queries): split along its own axis for it where it has one of full size, else
// broadcast.
Sbp mask_sbp(const InferContext& ctx, int mask_at, int axis) {
  const Shape& m = ctx.shape(mask_at);
  const int own = m.ndim() - 4 + axis;
  if (own >= 0 && m[own] > 1) return S(own);
  return B();
}

// The SBP of input `at`, the mask or the document ids (B, S), when q is split along `axis` in
// (B, H, L, E) terms: the ids split with the batch, else whole, as k (every query's row needs
// its keys' documents).
Sbp extra_sbp(const InferContext& ctx, int at, int axis) {
  if (extra_input(ctx, at) == Extra::kMask) return mask_sbp(ctx, at, axis);
  return axis == 0 ? S(0) : B();
}

// Batches and heads are independent. Under grouped-query attention a piece of the query heads
// reads the matching piece of the key/value heads, which holds for even splits only: the ops
// are TAlignedSplits (Note [Aligned splits] in compiler/passes/sbp_inference.cpp). Queries are
// independent too, given every key (Note [Sequence-split attention]): q, out and lse split along
// the sequence, k and v whole. Not linear in q, k or v: no P.
// `axis` is the split's axis in (B, H, L, E) terms: q, k, v and out are split along theirs
// (layout_axis), lse and the mask along their own.
std::vector<SbpSignature> attention_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  auto add = [&](int axis) {
    const int t = layout_axis(ctx, axis);
    const Sbp keys = axis == 2 ? B() : S(t);
    std::vector<Sbp> in{S(t), keys, keys};
    if (ctx.num_inputs() == 4) in.push_back(extra_sbp(ctx, 3, axis));
    sigs.push_back({in, {S(t), S(axis)}});
  };
  add(0);
  add(1);
  add(2);
  std::vector<Sbp> all(ctx.num_inputs(), B());
  sigs.push_back({all, {B(), B()}});
  return sigs;
}

// The gradients split as the forward does, and are linear in dout; split along the sequence,
// each piece of queries adds its part to every key's gradient (dk, dv P).
std::vector<SbpSignature> attention_grad_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  auto add = [&](int axis) {
    const int t = layout_axis(ctx, axis);
    std::vector<Sbp> in(6, S(t));
    in[5] = S(axis);  // lse
    if (axis == 2) in[2] = in[3] = B();
    if (ctx.num_inputs() == 7) in.push_back(extra_sbp(ctx, 6, axis));
    const Sbp keys = axis == 2 ? P() : S(t);
    sigs.push_back({in, {S(t), keys, keys}});
  };
  add(0);
  add(1);
  add(2);
  std::vector<Sbp> partial(ctx.num_inputs(), B());
  partial[0] = P();
  sigs.push_back({partial, {P(), P(), P()}});
  std::vector<Sbp> all(ctx.num_inputs(), B());
  sigs.push_back({all, {B(), B(), B()}});
  return sigs;
}

// The gradient of the op whose backward op is `grad_op` (the mask's or the document ids' passed
// on as its last input).
void attention_gradient(GradBuilder& g, const char* grad_op) {
  const Value dout = g.output_grad(0);
  if (dout == GradBuilder::kNone) return;
  const bool masked = grad_op == std::string_view(kAttentionMaskedGrad);
  OFL_CHECK_CODE(!masked || !g.needs_input_grad(3), ErrorCode::kUnimplemented,
                 "[scaled_dot_product_attention] attn_mask requires grad, and fused attention "
                 "computes no gradient for the mask. Detach it, or write the attention out.");
  if (!g.needs_input_grad(0) && !g.needs_input_grad(1) && !g.needs_input_grad(2)) return;
  std::vector<Value> inputs{dout, g.input(0), g.input(1), g.input(2), g.output(0), g.output(1)};
  if (g.num_inputs() == 4) inputs.push_back(g.input(3));
  const std::vector<Value> grads = g.apply(grad_op, g.any_params(), inputs);
  for (int i = 0; i < 3; ++i) {
    if (g.needs_input_grad(i)) g.set_input_grad(i, grads.at(i));
  }
}

}  // namespace

AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v,
                             bool sequence_first) {
  return attention_dims(q.shape(), k.shape(), v.shape(), sequence_first);
}

AttentionDims attention_dims(const Shape& q_shape, const Shape& k_shape, const Shape& v_shape,
                             bool sequence_first) {
  const Shape q = swap_heads_and_sequence(q_shape, sequence_first);
  const Shape k = swap_heads_and_sequence(k_shape, sequence_first);
  const Shape v = swap_heads_and_sequence(v_shape, sequence_first);
  AttentionDims d;
  d.batch = q[0];
  d.heads = q[1];
  d.kv_heads = k[1];
  d.queries = q[2];
  d.keys = k[2];
  d.head_dim = q[3];
  d.value_dim = v[3];
  d.sequence_first = sequence_first;
  // A (B, heads, rows, width) tensor, or sequence-first (B, rows, heads, width).
  auto strides = [&](int64_t heads, int64_t rows, int64_t width) {
    if (sequence_first) return AttentionStrides{rows * heads * width, width, heads * width};
    return AttentionStrides{heads * rows * width, rows * width, width};
  };
  d.q = strides(d.heads, d.queries, d.head_dim);
  d.k = strides(d.kv_heads, d.keys, d.head_dim);
  d.v = strides(d.kv_heads, d.keys, d.value_dim);
  d.out = strides(d.heads, d.queries, d.value_dim);
  return d;
}

AttentionDims attention_dims(const KernelContext& ctx, int q_at) {
  const AttentionParams& params = ctx.p<AttentionParams>();
  AttentionDims d =
      attention_dims(ctx.in(q_at), ctx.in(q_at + 1), ctx.in(q_at + 2), params.sequence_first);
  place_queries(&d, params,
                ctx.output_region != nullptr ? *ctx.output_region : std::vector<Range>{});
  return d;
}

void place_queries(AttentionDims* d, const AttentionParams& params,
                   const std::vector<Range>& region) {
  const size_t axis = params.sequence_first ? 1 : 2;
  d->query_offset = region.size() > axis ? region[axis].begin : 0;
  d->zigzag = params.zigzag;
  d->window = params.window;
}

int64_t AttentionDims::last_query_position(int64_t i0, int64_t i1) const {
  if (zigzag == 0) return query_offset + i1 - 1;
  int64_t last = -1;
  for (int64_t i = i0; i < i1;) {
    const int64_t end = std::min(i1, ((query_offset + i) / chunk() + 1) * chunk() - query_offset);
    last = std::max(last, query_position(end - 1));
    i = end;
  }
  return last;
}

DocumentIds document_ids_of(const KernelContext& ctx, int at) {
  if (static_cast<int>(ctx.inputs.size()) <= at || is_floating(ctx.in(at).dtype())) return {};
  const Tensor& ids = ctx.in(at);
  return {ids.raw_data(), ids.dtype() == DataType::kInt64, ids.shape()[1]};
}

MaskStrides attention_mask_strides(const Shape& m) {
  // Right-aligned against (B, H, L, S); a size-1 or missing axis is broadcast (stride 0).
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t step = 1;
  for (int i = 1; i <= m.ndim(); ++i) {
    const int64_t size = m[m.ndim() - i];
    strides[4 - i] = size == 1 ? 0 : step;
    step *= size;
  }
  return {strides[0], strides[1], strides[2], strides[3]};
}

// The three op pairs differ only in the input after q, k and v (and the backward's out and
// lse): none, the mask, or the document ids.
struct AttentionOps {
  const char* forward;
  const char* grad;
  const char* extra;  // null: none
};
constexpr AttentionOps kAttentionOps[] = {
    {kAttention, kAttentionGrad, nullptr},
    {kAttentionMasked, kAttentionMaskedGrad, "attn_mask"},
    {kAttentionDocuments, kAttentionDocumentsGrad, "document_ids"},
};

[[maybe_unused]] const bool kAttentionOpsRegistered = [] {
  for (const AttentionOps& ops : kAttentionOps) {
    std::vector<std::string> in{"q", "k", "v"}, grad_in{"dout", "q", "k", "v", "out", "lse"};
    if (ops.extra != nullptr) {
      in.push_back(ops.extra);
      grad_in.push_back(ops.extra);
    }
    const char* grad = ops.grad;
    OpRegistry::global()
        .get_or_create(ops.forward)
        .inputs(in)
        .outputs({"out", "lse"})
        .set<TUnderAmp>(AmpCategory::kLowPrecision)
        .params<AttentionParams>()
        .set<FInferMeta>(infer_attention)
        .set<FSbpSignatures>(attention_signatures)
        .set<TAlignedSplits>(true)
        .set<TPositionDependent>(true)
        .set<FGradient>([grad](GradBuilder& g) { attention_gradient(g, grad); });
    OpRegistry::global()
        .get_or_create(ops.grad)
        .inputs(grad_in)
        .outputs({"dq", "dk", "dv"})
        .params<AttentionParams>()
        .set<FInferMeta>(infer_attention_grad)
        .set<FSbpSignatures>(attention_grad_signatures)
        .set<TAlignedSplits>(true)
        .set<TPositionDependent>(true);
  }
  return true;
}();

namespace functional {

namespace {

// A mask and document ids are two ops' inputs; one op takes either (a mask can say what the
// documents do).
void check_one_extra(const Tensor& mask, const Tensor& document_ids) {
  OFL_CHECK(!mask.defined() || !document_ids.defined(),
            "[scaled_dot_product_attention] takes an attn_mask or document_ids, not both (fold "
            "the documents into the mask). However, got attn_mask ",
            mask.shape().to_string(), " and document_ids ", document_ids.shape().to_string(), ".");
}

}  // namespace

std::vector<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& mask, double scale, bool is_causal,
                                                 bool sequence_first, int64_t zigzag,
                                                 int64_t window, const Tensor& document_ids) {
  static OpHandle plain(kAttention), masked(kAttentionMasked), documents(kAttentionDocuments);
  const AttentionParams params{scale, is_causal, sequence_first, zigzag, window};
  check_one_extra(mask, document_ids);
  if (document_ids.defined()) return documents(params, {q, k, v, document_ids});
  if (!mask.defined()) return plain(params, {q, k, v});
  return masked(params, {q, k, v, mask});
}

std::vector<Tensor> scaled_dot_product_attention_grad(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    const Tensor& lse, const Tensor& mask, double scale, bool is_causal, bool sequence_first,
    int64_t zigzag, int64_t window, const Tensor& document_ids) {
  static OpHandle plain(kAttentionGrad), masked(kAttentionMaskedGrad),
      documents(kAttentionDocumentsGrad);
  const AttentionParams params{scale, is_causal, sequence_first, zigzag, window};
  check_one_extra(mask, document_ids);
  if (document_ids.defined()) return documents(params, {dout, q, k, v, out, lse, document_ids});
  if (!mask.defined()) return plain(params, {dout, q, k, v, out, lse});
  return masked(params, {dout, q, k, v, out, lse, mask});
}

}  // namespace functional

}  // namespace ofl
