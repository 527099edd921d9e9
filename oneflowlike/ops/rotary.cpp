// rotary_embedding: inference, SBP signatures and gradient (Note [Rotary embedding]).

#include "oneflowlike/ops/rotary.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

RotaryDims rotary_dims(const Shape& x, int64_t seq_axis) {
  const int nd = x.ndim();
  const int s = normalize_axis(seq_axis, nd, "rotary_embedding");
  RotaryDims d;
  for (int i = 0; i < s; ++i) d.outer *= x[i];
  d.seq = x[s];
  for (int i = s + 1; i < nd - 1; ++i) d.inner *= x[i];
  d.head_dim = x[nd - 1];
  return d;
}

namespace {

int seq_axis_of(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  OFL_CHECK(x.ndim() >= 2, "[", ctx.op_name(),
            "] x must have a sequence axis and a head axis. However, got ", ctx.describe_inputs(),
            ".");
  const int s =
      normalize_axis(ctx.params<RotaryParams>().seq_axis, x.ndim(), ctx.op_name().c_str());
  OFL_CHECK(s != x.ndim() - 1, "[", ctx.op_name(),
            "] seq_axis must not be the last axis (the head axis, whose pairs rotate). However, "
            "got seq_axis ",
            ctx.params<RotaryParams>().seq_axis, " and ", ctx.describe_inputs(), ".");
  return s;
}

// Inputs (x, cos, sin) -> y shaped like x.
std::vector<TensorMeta> infer_rotary(const InferContext& ctx) {
  const int s = seq_axis_of(ctx);
  OFL_CHECK_TYPE(
      is_floating(ctx.dtype(0)) && ctx.dtype(1) == ctx.dtype(0) && ctx.dtype(2) == ctx.dtype(0),
      "[", ctx.op_name(), "] x, cos and sin must have one floating dtype. However, got ",
      ctx.describe_inputs(), ".");
  const Shape& x = ctx.shape(0);
  const int64_t d = x[x.ndim() - 1];
  OFL_CHECK(d % 2 == 0, "[", ctx.op_name(),
            "] the last axis of x (the head size) must be even: it rotates in pairs. However, got ",
            ctx.describe_inputs(), ".");
  const Shape table{x[s], d / 2};
  for (int i = 1; i <= 2; ++i) {
    OFL_CHECK(ctx.shape(i) == table, "[", ctx.op_name(), "] ", ctx.input_name(i),
              " must be shaped (sequence length, head size / 2) ", table.to_string(),
              ". However, got ", ctx.describe_inputs(), ".");
  }
  return {ctx.input(0)};
}

// Rows rotate independently: any axis but the head axis may be split. Split positions take
// their rows of the tables; y is linear in x.
std::vector<SbpSignature> rotary_signatures(const InferContext& ctx) {
  const int s = seq_axis_of(ctx);
  const int nd = ctx.shape(0).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < nd - 1; ++i) {
    if (i == s) {
      sigs.push_back({{S(i), S(0), S(0)}, {S(i)}});
    } else {
      sigs.push_back({{S(i), B(), B()}, {S(i)}});
    }
  }
  sigs.push_back({{B(), B(), B()}, {B()}});
  sigs.push_back({{P(), B(), B()}, {P()}});
  return sigs;
}

// The rotation is orthogonal: dx is dy rotated back. The tables are constants.
void rotary_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  OFL_CHECK_CODE(!g.needs_input_grad(1) && !g.needs_input_grad(2), ErrorCode::kUnimplemented,
                 "[rotary_embedding] gradients with respect to cos and sin are not implemented: "
                 "they are position tables, not parameters. However, got a backward pass that "
                 "needs them (make them with requires_grad=False).");
  RotaryParams p = g.params<RotaryParams>();
  p.inverse = !p.inverse;
  g.set_input_grad(0, g.apply1("rotary_embedding", p, {dy, g.input(1), g.input(2)}));
}

}  // namespace

OFL_REGISTER_OP("rotary_embedding")
    .inputs({"x", "cos", "sin"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<RotaryParams>()
    .set<FInferMeta>(infer_rotary)
    .set<FSbpSignatures>(rotary_signatures)
    .set<FGradient>(rotary_gradient);

namespace functional {

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_axis,
                        bool interleaved, bool inverse) {
  static OpHandle op("rotary_embedding");
  return op.call1(RotaryParams{seq_axis, interleaved, inverse}, {x, cos, sin});
}

}  // namespace functional

}  // namespace ofl
