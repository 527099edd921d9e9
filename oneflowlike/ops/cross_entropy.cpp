// sparse_softmax_cross_entropy and its backward. Labels are data, so their range is checked by
// the kernels (IndexError); shapes and dtypes are checked here.

#include "oneflowlike/ops/cross_entropy.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

// logits (..., C), labels (...): the checks both ops share.
void check_logits_and_labels(const InferContext& ctx) {
  const Shape& logits = ctx.shape(0);
  const Shape& labels = ctx.shape(1);
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] logits must be floating-point. However, got ", ctx.describe_inputs(), ".");
  OFL_CHECK_TYPE(ctx.dtype(1) == DataType::kInt32 || ctx.dtype(1) == DataType::kInt64, "[",
                 ctx.op_name(), "] labels must be int32 or int64. However, got ",
                 ctx.describe_inputs(), ".");
  OFL_CHECK(logits.ndim() >= 1 && logits[logits.ndim() - 1] > 0, "[", ctx.op_name(),
            "] logits must have a non-empty last (class) axis. However, got ",
            ctx.describe_inputs(), ".");
  bool match = labels.ndim() == logits.ndim() - 1;
  for (int i = 0; match && i < labels.ndim(); ++i) match = labels[i] == logits[i];
  OFL_CHECK(match, "[", ctx.op_name(),
            "] labels must have the shape of logits without the last (class) axis. However, got ",
            ctx.describe_inputs(), ".");
}

std::vector<TensorMeta> infer_loss(const InferContext& ctx) {
  check_logits_and_labels(ctx);
  return {TensorMeta{ctx.shape(1), ctx.dtype(0)}};
}

// Samples are independent: split any sample axis. Splitting the class axis would need a
// cross-rank max and sum inside the logsumexp, so S(last) is not offered.
std::vector<SbpSignature> loss_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(1).ndim(); ++i) sigs.push_back({{S(i), S(i)}, {S(i)}});
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

void loss_gradient(GradBuilder& g) {
  const Value dloss = g.output_grad(0);
  if (dloss == GradBuilder::kNone || !g.needs_input_grad(0)) return;
  g.set_input_grad(0, g.apply1("sparse_softmax_cross_entropy_grad", NoParams{},
                               {g.input(0), g.input(1), dloss}));
}

std::vector<TensorMeta> infer_loss_grad(const InferContext& ctx) {
  check_logits_and_labels(ctx);
  OFL_CHECK(ctx.shape(2) == ctx.shape(1),
            "[sparse_softmax_cross_entropy_grad] dloss must have the shape of labels. However, "
            "got ",
            ctx.describe_inputs(), ".");
  OFL_CHECK_TYPE(ctx.dtype(2) == ctx.dtype(0),
                 "[sparse_softmax_cross_entropy_grad] dloss must have the dtype of logits. "
                 "However, got ",
                 ctx.describe_inputs(), ".");
  return {TensorMeta{ctx.shape(0), ctx.dtype(0)}};
}

std::vector<SbpSignature> loss_grad_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(1).ndim(); ++i) sigs.push_back({{S(i), S(i), S(i)}, {S(i)}});
  sigs.push_back({{B(), B(), P()}, {P()}});  // linear in dloss
  sigs.push_back({{B(), B(), B()}, {B()}});
  return sigs;
}

}  // namespace

OFL_REGISTER_OP("sparse_softmax_cross_entropy")
    .inputs({"logits", "labels"})
    .outputs({"loss"})
    .set<FInferMeta>(infer_loss)
    .set<FSbpSignatures>(loss_signatures)
    .set<FGradient>(loss_gradient);

// Not differentiable itself (no second derivative of the loss).
OFL_REGISTER_OP("sparse_softmax_cross_entropy_grad")
    .inputs({"logits", "labels", "dloss"})
    .outputs({"dlogits"})
    .set<FInferMeta>(infer_loss_grad)
    .set<FSbpSignatures>(loss_grad_signatures);

namespace functional {

Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  static OpHandle op("sparse_softmax_cross_entropy");
  return op.call1(NoParams{}, {logits, labels});
}

Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& dloss) {
  static OpHandle op("sparse_softmax_cross_entropy_grad");
  return op.call1(NoParams{}, {logits, labels, dloss});
}

}  // namespace functional

}  // namespace ofl
