// rms_norm and its backward ops: inference, SBP signatures and gradients.
//
// With rows = x.shape[:b] and cols = x.shape[b:] (b = begin_norm_axis):
//   inv_rms = 1 / sqrt(mean(x^2, cols) + epsilon),  xhat = x * inv_rms,  y = xhat * weight;
//   with g = dy * weight:  dx = inv_rms * (g - xhat * mean(g * xhat)),  dweight = sum_rows(dy
//   xhat).

#include "oneflowlike/ops/rms_norm.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"
#include "oneflowlike/ops/norm_util.h"

namespace ofl {

namespace {

using norm_util::begin_axis;
using norm_util::check_backward_inputs;
using norm_util::check_one_floating_dtype;
using norm_util::check_shape;
using norm_util::leading;
using norm_util::trailing;

// Inputs (x, weight) -> (y, inv_rms).
std::vector<TensorMeta> infer_rms_norm(const InferContext& ctx) {
  const int b = begin_axis(ctx, 0);
  check_one_floating_dtype(ctx);
  const Shape& x = ctx.shape(0);
  check_shape(ctx, 1, trailing(x, b), "shaped like the normalised axes of x");
  return {ctx.input(0), TensorMeta{leading(x, b), ctx.dtype(0)}};
}

// Inputs (dy, x, inv_rms, weight) -> dx.
std::vector<TensorMeta> infer_rms_norm_grad(const InferContext& ctx) {
  const int b = check_backward_inputs(ctx, 1);
  check_shape(ctx, 3, trailing(ctx.shape(1), b), "shaped like the normalised axes of x");
  return {ctx.input(1)};
}

// Inputs (dy, x, inv_rms) -> dweight.
std::vector<TensorMeta> infer_rms_norm_param_grad(const InferContext& ctx) {
  const int b = check_backward_inputs(ctx, 1);
  return {TensorMeta{trailing(ctx.shape(1), b), ctx.dtype(0)}};
}

// Rows normalise independently: any leading axis may be split.
std::vector<SbpSignature> rms_norm_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 0);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), B()}, {S(i), S(i)}});
  sigs.push_back({{B(), B()}, {B(), B()}});
  return sigs;
}

// dx is linear in dy and in weight (through dy * weight).
std::vector<SbpSignature> rms_norm_grad_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 1);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), S(i), S(i), B()}, {S(i)}});
  sigs.push_back({{P(), B(), B(), B()}, {P()}});
  sigs.push_back({{B(), B(), B(), P()}, {P()}});
  sigs.push_back({{B(), B(), B(), B()}, {B()}});
  return sigs;
}

// dweight sums over rows (split rows give partial sums) and is per column (split columns give a
// split weight); it is linear in dy.
std::vector<SbpSignature> rms_norm_param_grad_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 1);
  const int nd = ctx.shape(1).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), S(i), S(i)}, {P()}});
  for (int i = b; i < nd; ++i) sigs.push_back({{S(i), S(i), B()}, {S(i - b)}});
  sigs.push_back({{P(), B(), B()}, {P()}});
  sigs.push_back({{B(), B(), B()}, {B()}});
  return sigs;
}

// inv_rms is a statistic for the backward pass: its output gradient is ignored.
void rms_norm_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value x = g.input(0), weight = g.input(1), inv_rms = g.output(1);
  if (g.needs_input_grad(0)) {
    g.set_input_grad(0, g.apply1("rms_norm_grad", g.any_params(), {dy, x, inv_rms, weight}));
  }
  if (g.needs_input_grad(1)) {
    g.set_input_grad(1, g.apply1("rms_norm_param_grad", g.any_params(), {dy, x, inv_rms}));
  }
}

}  // namespace

OFL_REGISTER_OP("rms_norm")
    .inputs({"x", "weight"})
    .outputs({"y", "inv_rms"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_rms_norm)
    .set<FSbpSignatures>(rms_norm_signatures)
    .set<FGradient>(rms_norm_gradient);

OFL_REGISTER_OP("rms_norm_grad")
    .inputs({"dy", "x", "inv_rms", "weight"})
    .outputs({"dx"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_rms_norm_grad)
    .set<FSbpSignatures>(rms_norm_grad_signatures);

OFL_REGISTER_OP("rms_norm_param_grad")
    .inputs({"dy", "x", "inv_rms"})
    .outputs({"dweight"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_rms_norm_param_grad)
    .set<FSbpSignatures>(rms_norm_param_grad_signatures);

namespace functional {

std::vector<Tensor> rms_norm(const Tensor& x, const Tensor& weight, int64_t begin_norm_axis,
                             double epsilon) {
  static OpHandle op("rms_norm");
  return op(LayerNormParams{begin_norm_axis, epsilon}, {x, weight});
}

Tensor rms_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& inv_rms, const Tensor& weight,
                     int64_t begin_norm_axis, double epsilon) {
  static OpHandle op("rms_norm_grad");
  return op.call1(LayerNormParams{begin_norm_axis, epsilon}, {dy, x, inv_rms, weight});
}

Tensor rms_norm_param_grad(const Tensor& dy, const Tensor& x, const Tensor& inv_rms,
                           int64_t begin_norm_axis, double epsilon) {
  static OpHandle op("rms_norm_param_grad");
  return op.call1(LayerNormParams{begin_norm_axis, epsilon}, {dy, x, inv_rms});
}

}  // namespace functional

}  // namespace ofl
