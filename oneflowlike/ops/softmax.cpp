// softmax, log_softmax and their backward ops: inference, SBP signatures and gradients.

#include "oneflowlike/ops/softmax.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"
#include "oneflowlike/ops/reduce.h"

namespace ofl {

namespace {

int softmax_axis(const InferContext& ctx) {
  // A scalar behaves as one element along axis 0 (as in torch).
  return normalize_axis(ctx.params<SoftmaxParams>().axis, ctx.shape(0).ndim(),
                        ctx.op_name().c_str());
}

std::vector<TensorMeta> infer_softmax(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] x must have a floating dtype. However, got ", ctx.describe_inputs(), ".");
  softmax_axis(ctx);
  return {ctx.input(0)};
}

std::vector<TensorMeta> infer_softmax_backward(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)) && ctx.dtype(0) == ctx.dtype(1), "[", ctx.op_name(),
                 "] y and dy must have one floating dtype. However, got ", ctx.describe_inputs(),
                 ".");
  OFL_CHECK(ctx.shape(0) == ctx.shape(1), "[", ctx.op_name(),
            "] y and dy must have the same shape. However, got ", ctx.describe_inputs(), ".");
  softmax_axis(ctx);
  return {ctx.input(0)};
}

// Any axis but the normalised one may be split.
std::vector<SbpSignature> softmax_signatures(const InferContext& ctx) {
  const int nd = ctx.shape(0).ndim();
  const int axis = softmax_axis(ctx);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd; ++i) {
    if (i != axis) sigs.push_back({{S(i)}, {S(i)}});
  }
  sigs.push_back({{B()}, {B()}});
  return sigs;
}

std::vector<SbpSignature> softmax_backward_signatures(const InferContext& ctx) {
  const int nd = ctx.shape(0).ndim();
  const int axis = softmax_axis(ctx);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd; ++i) {
    if (i != axis) sigs.push_back({{S(i), S(i)}, {S(i)}});
  }
  sigs.push_back({{B(), P()}, {P()}});  // linear in dy
  sigs.push_back({{B(), B()}, {B()}});
  return sigs;
}

Value sum_along(GradBuilder& g, Value x, int64_t axis) {
  return g.apply1("reduce_sum", ReduceParams{{axis}, /*keepdims=*/true}, {x});
}

void softmax_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("softmax_grad", g.any_params(), {g.output(0), dy}));
}

void log_softmax_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("log_softmax_grad", g.any_params(), {g.output(0), dy}));
}

// dx = y * (dy - s) with s = sum(dy * y). For an incoming gradient h of dx:
//   d dy = y * (h - sum(h * y)) = softmax_grad(y, h),
//   d y  = h * (dy - s) - dy * sum(h * y).
void softmax_grad_gradient(GradBuilder& g) {
  const Value h = g.output_grad(0);
  if (h == GradBuilder::kNone) return;
  const int64_t axis = g.params<SoftmaxParams>().axis;
  const Value y = g.input(0), dy = g.input(1);
  if (g.needs_input_grad(1)) g.set_input_grad(1, g.apply1("softmax_grad", g.any_params(), {y, h}));
  if (g.needs_input_grad(0)) {
    const Value s = sum_along(g, mul(g, dy, y), axis);
    const Value hy = sum_along(g, mul(g, h, y), axis);
    const Value first = mul(g, h, g.apply1("sub", NoParams{}, {dy, s}));
    g.set_input_grad(0, g.apply1("sub", NoParams{}, {first, mul(g, dy, hy)}));
  }
}

// dx = dy - exp(y) * sum(dy). For an incoming gradient h of dx:
//   d dy = h - sum(h * exp(y)),   d y = -h * exp(y) * sum(dy).
void log_softmax_grad_gradient(GradBuilder& g) {
  const Value h = g.output_grad(0);
  if (h == GradBuilder::kNone) return;
  const int64_t axis = g.params<SoftmaxParams>().axis;
  const Value y = g.input(0), dy = g.input(1);
  const Value exp_y = g.apply1("exp", NoParams{}, {y});
  const Value h_exp_y = mul(g, h, exp_y);
  if (g.needs_input_grad(1)) {
    g.set_input_grad(1, g.apply1("sub", NoParams{}, {h, sum_along(g, h_exp_y, axis)}));
  }
  if (g.needs_input_grad(0)) g.set_input_grad(0, neg(g, mul(g, h_exp_y, sum_along(g, dy, axis))));
}

}  // namespace

OFL_REGISTER_OP("softmax")
    .inputs({"x"})
    .outputs({"y"})
    .params<SoftmaxParams>()
    .set<FInferMeta>(infer_softmax)
    .set<FSbpSignatures>(softmax_signatures)
    .set<FGradient>(softmax_gradient);

OFL_REGISTER_OP("log_softmax")
    .inputs({"x"})
    .outputs({"y"})
    .params<SoftmaxParams>()
    .set<FInferMeta>(infer_softmax)
    .set<FSbpSignatures>(softmax_signatures)
    .set<FGradient>(log_softmax_gradient);

OFL_REGISTER_OP("softmax_grad")
    .inputs({"y", "dy"})
    .outputs({"dx"})
    .params<SoftmaxParams>()
    .set<FInferMeta>(infer_softmax_backward)
    .set<FSbpSignatures>(softmax_backward_signatures)
    .set<FGradient>(softmax_grad_gradient);

OFL_REGISTER_OP("log_softmax_grad")
    .inputs({"y", "dy"})
    .outputs({"dx"})
    .params<SoftmaxParams>()
    .set<FInferMeta>(infer_softmax_backward)
    .set<FSbpSignatures>(softmax_backward_signatures)
    .set<FGradient>(log_softmax_grad_gradient);

namespace functional {

Tensor softmax(const Tensor& x, int64_t axis) {
  static OpHandle op("softmax");
  return op.call1(SoftmaxParams{axis}, {x});
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  static OpHandle op("log_softmax");
  return op.call1(SoftmaxParams{axis}, {x});
}

Tensor softmax_grad(const Tensor& y, const Tensor& dy, int64_t axis) {
  static OpHandle op("softmax_grad");
  return op.call1(SoftmaxParams{axis}, {y, dy});
}

Tensor log_softmax_grad(const Tensor& y, const Tensor& dy, int64_t axis) {
  static OpHandle op("log_softmax_grad");
  return op.call1(SoftmaxParams{axis}, {y, dy});
}

}  // namespace functional

}  // namespace ofl
