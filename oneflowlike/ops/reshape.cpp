// reshape (a view) and expand (broadcast to a larger shape).

#include "oneflowlike/ops/reshape.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

// Resolves the one allowed -1 extent.
Shape resolve_reshape(const InferContext& ctx) {
  const Shape& target = ctx.params<ReshapeParams>().shape;
  const int64_t numel = ctx.shape(0).numel();
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < target.ndim(); ++i) {
    if (target[i] == -1) {
      OFL_CHECK(unknown < 0, "[reshape] only one extent may be -1. However, got shape ",
                target.to_string(), " for x ", ctx.shape(0).to_string(), ".");
      unknown = i;
    } else {
      OFL_CHECK(target[i] >= 0, "[reshape] extents must be non-negative or -1. However, got shape ",
                target.to_string(), ".");
      known *= target[i];
    }
  }
  Shape out = target;
  if (unknown >= 0) {
    OFL_CHECK(known > 0 && numel % known == 0, "[reshape] shape ", target.to_string(),
              " is invalid for x ", ctx.shape(0).to_string(), " of ", numel, " elements.");
    out[unknown] = numel / known;
  }
  OFL_CHECK(out.numel() == numel,
            "[reshape] the new shape must have as many elements as x. "
            "However, got shape ",
            target.to_string(), " (", out.numel(), " elements) for x ", ctx.shape(0).to_string(),
            " (", numel, " elements).");
  return out;
}

std::vector<TensorMeta> infer_reshape(const InferContext& ctx) {
  return {TensorMeta{resolve_reshape(ctx), ctx.dtype(0)}};
}

// S(i) -> S(j) when the axes before i and before j hold the same number of elements and one of
// x[i], y[j] is a multiple of the other: then a split of axis i cuts the flat buffer where a
// split of axis j does. That holds exactly when the split extent divides evenly among the
// ranks, which the compiler checks against the placement.
std::vector<SbpSignature> reshape_signatures(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const Shape y = resolve_reshape(ctx);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < x.ndim(); ++i) {
    // An axis of one element (or none) matches many of y's; the same shape keeps each axis,
    // and a split of it may leave ranks empty pieces (to_global(sbp=S(0)) of a batch of 1).
    if (x[i] <= 1) {
      if (x == y) sigs.push_back({{S(i)}, {S(i)}});
      continue;
    }
    for (int j = 0; j < y.ndim(); ++j) {
      if (y[j] <= 1 || x.count(0, i) != y.count(0, j)) continue;
      if (x[i] % y[j] == 0 || y[j] % x[i] == 0) sigs.push_back({{S(i)}, {S(j)}});
    }
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

void reshape_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("reshape", ReshapeParams{g.meta(g.input(0)).shape}, {dy}));
}

Shape resolve_expand(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const Shape& target = ctx.params<ExpandParams>().shape;
  OFL_CHECK(target.ndim() >= x.ndim(),
            "[expand] the target shape must have at least as many "
            "axes as x. However, got target ",
            target.to_string(), " for x ", x.to_string(), ".");
  Shape out = target;
  const int lead = target.ndim() - x.ndim();
  for (int i = 0; i < target.ndim(); ++i) {
    const int j = i - lead;
    if (target[i] == -1) {
      OFL_CHECK(j >= 0, "[expand] -1 is only allowed for existing axes. However, got target ",
                target.to_string(), " for x ", x.to_string(), ".");
      out[i] = x[j];
      continue;
    }
    OFL_CHECK(j < 0 || x[j] == target[i] || x[j] == 1,
              "[expand] each axis of x must equal the "
              "target or be 1. However, got x ",
              x.to_string(), " and target ", target.to_string(), " (axis ", i, ").");
  }
  return out;
}

std::vector<TensorMeta> infer_expand(const InferContext& ctx) {
  return {TensorMeta{resolve_expand(ctx), ctx.dtype(0)}};
}

std::vector<SbpSignature> expand_signatures(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const Shape y = resolve_expand(ctx);
  const int lead = y.ndim() - x.ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < x.ndim(); ++i) {
    if (x[i] == y[i + lead] && x[i] > 1) sigs.push_back({{S(i)}, {S(i + lead)}});
  }
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});  // expand copies, which is linear
  return sigs;
}

void expand_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, sum_to_shape(g, dy, g.meta(g.input(0)).shape));
}

}  // namespace

OFL_REGISTER_OP("reshape")
    .inputs({"x"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ReshapeParams>()
    .set<FInferMeta>(infer_reshape)
    .set<FSbpSignatures>(reshape_signatures)
    .set<FGradient>(reshape_gradient)
    .set<TViewOfInput>(0);

OFL_REGISTER_OP("expand")
    .inputs({"x"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ExpandParams>()
    .set<FInferMeta>(infer_expand)
    .set<FSbpSignatures>(expand_signatures)
    .set<FGradient>(expand_gradient);

// Note [Detach in a graph]: a traced tensor's detach() is this op, x's values under another
// name, which the autograd pass treats as a constant (TStopsGradient): gradients reach x only
// through its other readers. (Tensor::detach copies the tensor's handle, which a trace cannot
// name.) Every layout passes through unchanged.
std::vector<TensorMeta> infer_stop_gradient(const InferContext& ctx) { return {ctx.input(0)}; }

std::vector<SbpSignature> stop_gradient_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  sigs.push_back({{P()}, {P()}});
  return sigs;
}

OFL_REGISTER_OP("stop_gradient")
    .inputs({"x"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_stop_gradient)
    .set<FSbpSignatures>(stop_gradient_signatures)
    .set<TViewOfInput>(0)
    .set<TStopsGradient>(true);

namespace functional {

Tensor stop_gradient(const Tensor& x) {
  static OpHandle op("stop_gradient");
  return op.call1(NoParams{}, {x});
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  static OpHandle op("reshape");
  return op.call1(ReshapeParams{shape}, {x});
}

Tensor expand(const Tensor& x, const Shape& shape) {
  static OpHandle op("expand");
  return op.call1(ExpandParams{shape}, {x});
}

}  // namespace functional

}  // namespace ofl
