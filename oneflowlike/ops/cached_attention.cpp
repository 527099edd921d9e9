// Attention over a KV cache extended in place (Note [Cached attention] in cached_attention.h):
// inference and SBP signatures; no gradient.

#include "oneflowlike/ops/cached_attention.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"

namespace ofl {

namespace {

constexpr const char* kCachedAttention = "cached_attention";

// (q, k, v, k_cache, v_cache, position) -> out (B, H, T, Ev).
std::vector<TensorMeta> infer_cached_attention(const InferContext& ctx) {
  const Shape &q = ctx.shape(0), &k = ctx.shape(1), &v = ctx.shape(2);
  const Shape &kc = ctx.shape(3), &vc = ctx.shape(4);
  for (int i = 0; i < 5; ++i) {
    OFL_CHECK_TYPE(ctx.dtype(i) == ctx.dtype(3) && is_floating(ctx.dtype(i)), "[", ctx.op_name(),
                   "] q, k, v and the caches must have the caches' floating dtype. "
                   "However, got ",
                   ctx.describe_inputs(), ".");
    OFL_CHECK(ctx.shape(i).ndim() == 4, "[", ctx.op_name(),
              "] q, k, v and the caches must be 4-d (batch, heads, positions, head_dim). "
              "However, got ",
              ctx.describe_inputs(), ".");
  }
  OFL_CHECK_TYPE(ctx.dtype(5) == DataType::kInt64 && ctx.shape(5) == Shape({1}), "[", ctx.op_name(),
                 "] position must be one int64 (shape (1,)). However, got ", ctx.describe_inputs(),
                 ".");
  OFL_CHECK(k == Shape({kc[0], kc[1], k[2], kc[3]}) && v == Shape({vc[0], vc[1], k[2], vc[3]}) &&
                kc[0] == vc[0] && kc[1] == vc[1] && kc[2] == vc[2],
            "[", ctx.op_name(),
            "] k and v (B, Hk, T, E) must fit the caches (B, Hk, L, E), which must cover the same "
            "L positions. However, got ",
            ctx.describe_inputs(), ".");
  OFL_CHECK(q[0] == k[0] && q[2] == k[2] && q[3] == k[3] && k[1] > 0 && q[1] % k[1] == 0, "[",
            ctx.op_name(),
            "] q (B, H, T, E) must have k's batch, positions and head_dim, and a multiple of its "
            "heads. However, got ",
            ctx.describe_inputs(), ".");
  OFL_CHECK(q[2] <= kc[2], "[", ctx.op_name(), "] a step of ", q[2],
            " positions does not fit the caches' ", kc[2], ". However, got ", ctx.describe_inputs(),
            ".");
  OFL_CHECK(ctx.params<CachedAttentionParams>().window >= 0, "[", ctx.op_name(),
            "] window must be 0 (every key) or positive. However, got ",
            ctx.params<CachedAttentionParams>().window, ".");
  return {TensorMeta{Shape{q[0], q[1], q[2], vc[3]}, ctx.dtype(0)}};
}

// Batches and heads are independent; the position is every rank's.
std::vector<SbpSignature> cached_attention_signatures(const InferContext&) {
  std::vector<SbpSignature> sigs;
  for (int axis : {0, 1})
    sigs.push_back({{S(axis), S(axis), S(axis), S(axis), S(axis), B()}, {S(axis)}});
  sigs.push_back({std::vector<Sbp>(6, B()), {B()}});
  return sigs;
}

[[maybe_unused]] const bool kRegistered = [] {
  OpRegistry::global()
      .get_or_create(kCachedAttention)
      .inputs({"q", "k", "v", "k_cache", "v_cache", "position"})
      .outputs({"out"})
      .params<CachedAttentionParams>()
      .set<FInferMeta>(infer_cached_attention)
      .set<FSbpSignatures>(cached_attention_signatures)
      .set<TAlignedSplits>(true)
      .set<TMutatedInputs>({3, 4});
  return true;
}();

}  // namespace

namespace functional {

Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                        const Tensor& v_cache, const Tensor& position, double scale,
                        int64_t window) {
  static OpHandle op(kCachedAttention);
  return op.call1(CachedAttentionParams{scale, window}, {q, k, v, k_cache, v_cache, position});
}

}  // namespace functional

}  // namespace ofl
