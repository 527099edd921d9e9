// Broadcasting binary ops. The four arithmetic ops share inference and differ in SBP (which
// partial-sum combinations stay linear) and gradient.

#include "oneflowlike/ops/elementwise.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

std::vector<TensorMeta> infer_binary(const InferContext& ctx, DataType out_dtype) {
  OFL_CHECK_TYPE(ctx.dtype(0) == ctx.dtype(1), "[", ctx.op_name(),
                 "] both operands must have one dtype. However, got ", ctx.describe_inputs(), ".");
  return {
      TensorMeta{broadcast_shapes(ctx.shape(0), ctx.shape(1), ctx.op_name().c_str()), out_dtype}};
}

std::vector<TensorMeta> infer_arithmetic(const InferContext& ctx) {
  return infer_binary(ctx, ctx.dtype(0));
}

std::vector<TensorMeta> infer_comparison(const InferContext& ctx) {
  return infer_binary(ctx, DataType::kBool);
}

// Split signatures: an output axis is split where each operand either spans it (split the
// operand on its own axis) or broadcasts it (give the operand whole: B).
std::vector<SbpSignature> broadcast_split_signatures(const InferContext& ctx) {
  const Shape& a = ctx.shape(0);
  const Shape& b = ctx.shape(1);
  const Shape out = broadcast_shapes(a, b, ctx.op_name().c_str());
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < out.ndim(); ++i) {
    if (out[i] == 1) continue;
    const int ia = a.ndim() - out.ndim() + i, ib = b.ndim() - out.ndim() + i;
    const Sbp sa = (ia >= 0 && a[ia] == out[i]) ? S(ia) : B();
    const Sbp sb = (ib >= 0 && b[ib] == out[i]) ? S(ib) : B();
    sigs.push_back({{sa, sb}, {S(i)}});
  }
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

std::vector<SbpSignature> add_signatures(const InferContext& ctx) {
  auto sigs = broadcast_split_signatures(ctx);
  sigs.push_back({{P(), P()}, {P()}});  // sum of sums
  return sigs;
}

std::vector<SbpSignature> mul_signatures(const InferContext& ctx) {
  auto sigs = broadcast_split_signatures(ctx);
  sigs.push_back({{P(), B()}, {P()}});  // linear in each operand alone
  sigs.push_back({{B(), P()}, {P()}});
  return sigs;
}

std::vector<SbpSignature> div_signatures(const InferContext& ctx) {
  auto sigs = broadcast_split_signatures(ctx);
  sigs.push_back({{P(), B()}, {P()}});  // linear in the numerator only
  return sigs;
}

void add_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, sum_to_shape(g, dy, g.meta(g.input(0)).shape));
  g.set_input_grad(1, sum_to_shape(g, dy, g.meta(g.input(1)).shape));
}

void sub_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, sum_to_shape(g, dy, g.meta(g.input(0)).shape));
  if (g.needs_input_grad(1))
    g.set_input_grad(1, neg(g, sum_to_shape(g, dy, g.meta(g.input(1)).shape)));
}

void mul_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value a = g.input(0), b = g.input(1);
  if (g.needs_input_grad(0)) g.set_input_grad(0, sum_to_shape(g, mul(g, dy, b), g.meta(a).shape));
  if (g.needs_input_grad(1)) g.set_input_grad(1, sum_to_shape(g, mul(g, dy, a), g.meta(b).shape));
}

// y = a / b:  da = dy / b,  db = -dy * y / b.
void div_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value a = g.input(0), b = g.input(1);
  const Value dy_over_b = g.apply1("div", NoParams{}, {dy, b});
  if (g.needs_input_grad(0)) g.set_input_grad(0, sum_to_shape(g, dy_over_b, g.meta(a).shape));
  if (g.needs_input_grad(1)) {
    const Value db = neg(g, mul(g, dy_over_b, g.output(0)));
    g.set_input_grad(1, sum_to_shape(g, db, g.meta(b).shape));
  }
}

std::vector<SbpSignature> comparison_signatures(const InferContext& ctx) {
  return broadcast_split_signatures(ctx);
}

}  // namespace

OFL_REGISTER_OP("add")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_arithmetic)
    .set<FSbpSignatures>(add_signatures)
    .set<FGradient>(add_gradient);

OFL_REGISTER_OP("sub")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_arithmetic)
    .set<FSbpSignatures>(add_signatures)
    .set<FGradient>(sub_gradient);

OFL_REGISTER_OP("mul")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_arithmetic)
    .set<FSbpSignatures>(mul_signatures)
    .set<FGradient>(mul_gradient);

OFL_REGISTER_OP("div")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_arithmetic)
    .set<FSbpSignatures>(div_signatures)
    .set<FGradient>(div_gradient);

OFL_REGISTER_OP("equal")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<FInferMeta>(infer_comparison)
    .set<FSbpSignatures>(comparison_signatures);

OFL_REGISTER_OP("greater")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<FInferMeta>(infer_comparison)
    .set<FSbpSignatures>(comparison_signatures);

OFL_REGISTER_OP("less")
    .inputs({"a", "b"})
    .outputs({"out"})
    .set<FInferMeta>(infer_comparison)
    .set<FSbpSignatures>(comparison_signatures);

namespace functional {

namespace {

Tensor binary(const OpHandle& op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {
    const DataType t = promote_types(a.dtype(), b.dtype());
    return op.call1(NoParams{}, {cast(a, t), cast(b, t)});
  }
  return op.call1(NoParams{}, {a, b});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  static OpHandle op("add");
  return binary(op, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  static OpHandle op("sub");
  return binary(op, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  static OpHandle op("mul");
  return binary(op, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  static OpHandle op("div");
  return binary(op, a, b);
}
Tensor equal(const Tensor& a, const Tensor& b) {
  static OpHandle op("equal");
  return binary(op, a, b);
}
Tensor greater(const Tensor& a, const Tensor& b) {
  static OpHandle op("greater");
  return binary(op, a, b);
}
Tensor less(const Tensor& a, const Tensor& b) {
  static OpHandle op("less");
  return binary(op, a, b);
}

}  // namespace functional

}  // namespace ofl
