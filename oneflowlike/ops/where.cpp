// where and masked_fill: selection by a bool tensor. Both are differentiable in the selected
// values, not in the mask.

#include "oneflowlike/ops/where.h"

#include <algorithm>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

// NumPy broadcasting of all inputs; raises naming every input.
Shape broadcast_all_inputs(const InferContext& ctx) {
  int ndim = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) ndim = std::max(ndim, ctx.shape(k).ndim());
  std::vector<int64_t> out(ndim, 1);
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const Shape& s = ctx.shape(k);
    for (int j = 0; j < s.ndim(); ++j) {
      int64_t& o = out[ndim - s.ndim() + j];
      OFL_CHECK(s[j] == 1 || o == 1 || s[j] == o, "[", ctx.op_name(),
                "] the inputs must broadcast to one shape. However, got ", ctx.describe_inputs(),
                ".");
      if (s[j] != 1) o = s[j];
    }
  }
  return Shape(std::move(out));
}

void check_mask_dtype(const InferContext& ctx, int i) {
  OFL_CHECK_TYPE(ctx.dtype(i) == DataType::kBool, "[", ctx.op_name(), "] ", ctx.input_name(i),
                 " must have dtype bool. However, got ", ctx.describe_inputs(), ".");
}

std::vector<TensorMeta> infer_where(const InferContext& ctx) {
  check_mask_dtype(ctx, 0);
  OFL_CHECK_TYPE(ctx.dtype(1) == ctx.dtype(2), "[where] x and y must have one dtype. However, got ",
                 ctx.describe_inputs(), ".");
  return {TensorMeta{broadcast_all_inputs(ctx), ctx.dtype(1)}};
}

std::vector<TensorMeta> infer_masked_fill(const InferContext& ctx) {
  check_mask_dtype(ctx, 1);
  const Shape out = broadcast_all_inputs(ctx);
  OFL_CHECK(out == ctx.shape(0),
            "[masked_fill] mask must broadcast to the shape of x. However, got ",
            ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

// An output axis is split where each input either spans it (split it on its own axis) or
// broadcasts it (give it whole: B).
std::vector<SbpSignature> broadcast_split_signatures(const InferContext& ctx, const Shape& out,
                                                     bool skip_unit_axes) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < out.ndim(); ++i) {
    if (skip_unit_axes && out[i] == 1) continue;
    SbpSignature sig{{}, {S(i)}};
    for (int k = 0; k < ctx.num_inputs(); ++k) {
      const Shape& s = ctx.shape(k);
      const int j = s.ndim() - out.ndim() + i;
      sig.inputs.push_back(j >= 0 && s[j] == out[i] ? S(j) : B());
    }
    sigs.push_back(std::move(sig));
  }
  sigs.push_back({std::vector<Sbp>(ctx.num_inputs(), B()), {B()}});
  return sigs;
}

std::vector<SbpSignature> where_signatures(const InferContext& ctx) {
  auto sigs = broadcast_split_signatures(ctx, broadcast_all_inputs(ctx), /*skip_unit_axes=*/true);
  // Linear in (x, y) together: sum_k where(c, x_k, y_k) = where(c, sum_k x_k, sum_k y_k).
  sigs.push_back({{B(), P(), P()}, {P()}});
  return sigs;
}

std::vector<SbpSignature> masked_fill_signatures(const InferContext& ctx) {
  auto sigs = broadcast_split_signatures(ctx, ctx.shape(0), /*skip_unit_axes=*/false);
  // Filling zeros is linear in x (the gradient case); any other value would be summed.
  if (ctx.params<MaskedFillParams>().value == 0.0) sigs.push_back({{P(), B()}, {P()}});
  return sigs;
}

// y = where(c, a, b): da = sum_to_shape(where(c, dy, 0)), db = sum_to_shape(where(c, 0, dy)).
void where_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value condition = g.input(0);
  const Value zero = g.apply1("fill", FillParams{Shape{}, g.meta(dy).dtype, 0.0}, {});
  if (g.needs_input_grad(1)) {
    const Value dx = g.apply1("where", NoParams{}, {condition, dy, zero});
    g.set_input_grad(1, sum_to_shape(g, dx, g.meta(g.input(1)).shape));
  }
  if (g.needs_input_grad(2)) {
    const Value dother = g.apply1("where", NoParams{}, {condition, zero, dy});
    g.set_input_grad(2, sum_to_shape(g, dother, g.meta(g.input(2)).shape));
  }
}

// y = masked_fill(x, m, v): dx = dy where m is false, 0 where it is true.
void masked_fill_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("masked_fill", MaskedFillParams{0.0}, {dy, g.input(1)}));
}

}  // namespace

OFL_REGISTER_OP("where")
    .inputs({"condition", "x", "y"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_where)
    .set<FSbpSignatures>(where_signatures)
    .set<FGradient>(where_gradient)
    .set<TKernelDtypeFrom>(1);

OFL_REGISTER_OP("masked_fill")
    .inputs({"x", "mask"})
    .outputs({"out"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<MaskedFillParams>()
    .set<FInferMeta>(infer_masked_fill)
    .set<FSbpSignatures>(masked_fill_signatures)
    .set<FGradient>(masked_fill_gradient);

namespace functional {

Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  static OpHandle op("where");
  if (x.defined() && y.defined() && x.dtype() != y.dtype()) {
    const DataType t = promote_types(x.dtype(), y.dtype());
    return op.call1(NoParams{}, {condition, cast(x, t), cast(y, t)});
  }
  return op.call1(NoParams{}, {condition, x, y});
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  static OpHandle op("masked_fill");
  return op.call1(MaskedFillParams{value}, {x, mask});
}

}  // namespace functional

}  // namespace ofl
