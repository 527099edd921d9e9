// embedding and embedding_grad. Indices are data, so their range is checked by the kernels
// (an out-of-range index raises IndexError); everything about shapes and dtypes is checked here.

#include "oneflowlike/ops/embedding.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

void check_indices_dtype(const InferContext& ctx, int i) {
  OFL_CHECK_TYPE(ctx.dtype(i) == DataType::kInt32 || ctx.dtype(i) == DataType::kInt64, "[",
                 ctx.op_name(), "] ", ctx.input_name(i), " must be int32 or int64. However, got ",
                 ctx.describe_inputs(), ".");
}

void check_padding_idx(const InferContext& ctx, int64_t padding_idx, int64_t num_embeddings) {
  OFL_CHECK(padding_idx >= -1 && padding_idx < num_embeddings, "[", ctx.op_name(),
            "] padding_idx must be a row of the table, in [0, ", num_embeddings,
            "), or -1 for none. However, got padding_idx ", padding_idx, " and ",
            ctx.describe_inputs(), ".");
}

// weight (V, D), indices (...) -> out (..., D).
std::vector<TensorMeta> infer_embedding(const InferContext& ctx) {
  const Shape& weight = ctx.shape(0);
  OFL_CHECK(weight.ndim() == 2, "[embedding] weight must be 2-d (num_embeddings, embedding_dim). ",
            "However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)),
                 "[embedding] weight must be floating-point. However, got ", ctx.describe_inputs(),
                 ".");
  check_indices_dtype(ctx, 1);
  check_padding_idx(ctx, ctx.params<EmbeddingParams>().padding_idx, weight[0]);
  std::vector<int64_t> dims = ctx.shape(1).dims();
  dims.push_back(weight[1]);
  return {TensorMeta{Shape(std::move(dims)), ctx.dtype(0)}};
}

// Splitting the table by rows (S(0), vocabulary parallel) would need each rank to shift and mask
// its indices and give a partial sum; the kernel sees no logical offsets, so it is not offered.
std::vector<SbpSignature> embedding_signatures(const InferContext& ctx) {
  const int k = ctx.shape(1).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < k; ++i) sigs.push_back({{B(), S(i)}, {S(i)}});  // data parallel
  sigs.push_back({{S(1), B()}, {S(k)}});  // columns of the table are columns of the output
  sigs.push_back({{P(), B()}, {P()}});    // linear in the table
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

void embedding_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  const int64_t num_embeddings = g.meta(g.input(0)).shape[0];
  const int64_t padding_idx = g.params<EmbeddingParams>().padding_idx;
  g.set_input_grad(0, g.apply1("embedding_grad", EmbeddingGradParams{num_embeddings, padding_idx},
                               {dy, g.input(1)}));
}

// dy (..., D), indices (...) -> dweight (num_embeddings, D).
std::vector<TensorMeta> infer_embedding_grad(const InferContext& ctx) {
  const auto& p = ctx.params<EmbeddingGradParams>();
  const Shape& dy = ctx.shape(0);
  const Shape& indices = ctx.shape(1);
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)),
                 "[embedding_grad] dy must be floating-point. However, got ", ctx.describe_inputs(),
                 ".");
  check_indices_dtype(ctx, 1);
  bool match = dy.ndim() == indices.ndim() + 1;
  for (int i = 0; match && i < indices.ndim(); ++i) match = dy[i] == indices[i];
  OFL_CHECK(match, "[embedding_grad] dy must have the shape of indices plus one trailing axis. ",
            "However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK(p.num_embeddings >= 0,
            "[embedding_grad] num_embeddings must be non-negative. However, got ", p.num_embeddings,
            ".");
  check_padding_idx(ctx, p.padding_idx, p.num_embeddings);
  return {TensorMeta{Shape{p.num_embeddings, dy[dy.ndim() - 1]}, ctx.dtype(0)}};
}

std::vector<SbpSignature> embedding_grad_signatures(const InferContext& ctx) {
  const int k = ctx.shape(1).ndim();
  std::vector<SbpSignature> sigs;
  // Each rank scatters its share of the rows into a whole table: the tables add up.
  for (int i = 0; i < k; ++i) sigs.push_back({{S(i), S(i)}, {P()}});
  sigs.push_back({{S(k), B()}, {S(1)}});
  sigs.push_back({{P(), B()}, {P()}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

// embedding_grad is linear in dy; its adjoint is embedding itself (without a padding row, whose
// zeroing would need masking the gathered rows too).
void embedding_grad_gradient(GradBuilder& g) {
  const Value ddweight = g.output_grad(0);
  if (ddweight == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  OFL_CHECK_CODE(g.params<EmbeddingGradParams>().padding_idx < 0, ErrorCode::kUnimplemented,
                 "[embedding_grad] the second derivative of an embedding with padding_idx is not "
                 "implemented. However, got a backward pass that needs it.");
  g.set_input_grad(0, g.apply1("embedding", EmbeddingParams{}, {ddweight, g.input(1)}));
}

}  // namespace

OFL_REGISTER_OP("embedding")
    .inputs({"weight", "indices"})
    .outputs({"out"})
    .params<EmbeddingParams>()
    .set<FInferMeta>(infer_embedding)
    .set<FSbpSignatures>(embedding_signatures)
    .set<FGradient>(embedding_gradient);

OFL_REGISTER_OP("embedding_grad")
    .inputs({"dy", "indices"})
    .outputs({"dweight"})
    .params<EmbeddingGradParams>()
    .set<FInferMeta>(infer_embedding_grad)
    .set<FSbpSignatures>(embedding_grad_signatures)
    .set<FGradient>(embedding_grad_gradient);

namespace functional {

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  static OpHandle op("embedding");
  return op.call1(EmbeddingParams{padding_idx}, {weight, indices});
}

Tensor embedding_grad(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                      int64_t padding_idx) {
  static OpHandle op("embedding_grad");
  return op.call1(EmbeddingGradParams{num_embeddings, padding_idx}, {dy, indices});
}

}  // namespace functional

}  // namespace ofl
