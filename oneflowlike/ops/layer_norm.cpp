// layer_norm and its backward ops: inference, SBP signatures and gradients.
//
// With rows = x.shape[:b] and cols = x.shape[b:] (b = begin_norm_axis):
//   mean = mean(x, cols),  inv_std = 1 / sqrt(var(x, cols) + epsilon),
//   xhat = (x - mean) * inv_std,  y = xhat * weight + bias.

#include "oneflowlike/ops/layer_norm.h"

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

// Inputs (x, weight, bias) -> (y, mean, inv_std).
std::vector<TensorMeta> infer_layer_norm(const InferContext& ctx) {
  const int b = begin_axis(ctx, 0);
  check_one_floating_dtype(ctx);
  const Shape& x = ctx.shape(0);
  check_shape(ctx, 1, trailing(x, b), "shaped like the normalised axes of x");
  check_shape(ctx, 2, trailing(x, b), "shaped like the normalised axes of x");
  const TensorMeta stats{leading(x, b), ctx.dtype(0)};
  return {ctx.input(0), stats, stats};
}

// Inputs (dy, x, mean, inv_std, weight) -> dx.
std::vector<TensorMeta> infer_layer_norm_grad(const InferContext& ctx) {
  const int b = check_backward_inputs(ctx, 2);
  check_shape(ctx, 4, trailing(ctx.shape(1), b), "shaped like the normalised axes of x");
  return {ctx.input(1)};
}

// Inputs (dy, x, mean, inv_std) -> (dweight, dbias).
std::vector<TensorMeta> infer_layer_norm_param_grad(const InferContext& ctx) {
  const int b = check_backward_inputs(ctx, 2);
  const TensorMeta param{trailing(ctx.shape(1), b), ctx.dtype(0)};
  return {param, param};
}

// Rows normalise independently: any leading axis may be split.
std::vector<SbpSignature> layer_norm_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 0);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), B(), B()}, {S(i), S(i), S(i)}});
  sigs.push_back({{B(), B(), B()}, {B(), B(), B()}});
  return sigs;
}

// dx is linear in dy and in weight (through dy * weight).
std::vector<SbpSignature> layer_norm_grad_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 1);
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), S(i), S(i), S(i), B()}, {S(i)}});
  sigs.push_back({{P(), B(), B(), B(), B()}, {P()}});
  sigs.push_back({{B(), B(), B(), B(), P()}, {P()}});
  sigs.push_back({{B(), B(), B(), B(), B()}, {B()}});
  return sigs;
}

// dweight and dbias sum over rows (split rows give partial sums) and are per column (split
// columns give split parameters); both are linear in dy.
std::vector<SbpSignature> layer_norm_param_grad_signatures(const InferContext& ctx) {
  const int b = begin_axis(ctx, 1);
  const int nd = ctx.shape(1).ndim();
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < b; ++i) sigs.push_back({{S(i), S(i), S(i), S(i)}, {P(), P()}});
  for (int i = b; i < nd; ++i) {
    sigs.push_back({{S(i), S(i), B(), B()}, {S(i - b), S(i - b)}});
  }
  sigs.push_back({{P(), B(), B(), B()}, {P(), P()}});
  sigs.push_back({{B(), B(), B(), B()}, {B(), B()}});
  return sigs;
}

// mean and inv_std are statistics for the backward pass: their output gradients are ignored.
void layer_norm_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value x = g.input(0), weight = g.input(1);
  const Value mean = g.output(1), inv_std = g.output(2);
  if (g.needs_input_grad(0)) {
    g.set_input_grad(0,
                     g.apply1("layer_norm_grad", g.any_params(), {dy, x, mean, inv_std, weight}));
  }
  if (g.needs_input_grad(1) || g.needs_input_grad(2)) {
    const std::vector<Value> grads =
        g.apply("layer_norm_param_grad", g.any_params(), {dy, x, mean, inv_std});
    if (g.needs_input_grad(1)) g.set_input_grad(1, grads.at(0));
    if (g.needs_input_grad(2)) g.set_input_grad(2, grads.at(1));
  }
}

}  // namespace

OFL_REGISTER_OP("layer_norm")
    .inputs({"x", "weight", "bias"})
    .outputs({"y", "mean", "inv_std"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_layer_norm)
    .set<FSbpSignatures>(layer_norm_signatures)
    .set<FGradient>(layer_norm_gradient);

OFL_REGISTER_OP("layer_norm_grad")
    .inputs({"dy", "x", "mean", "inv_std", "weight"})
    .outputs({"dx"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_layer_norm_grad)
    .set<FSbpSignatures>(layer_norm_grad_signatures);

OFL_REGISTER_OP("layer_norm_param_grad")
    .inputs({"dy", "x", "mean", "inv_std"})
    .outputs({"dweight", "dbias"})
    .params<LayerNormParams>()
    .set<FInferMeta>(infer_layer_norm_param_grad)
    .set<FSbpSignatures>(layer_norm_param_grad_signatures);

namespace functional {

std::vector<Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               int64_t begin_norm_axis, double epsilon) {
  static OpHandle op("layer_norm");
  return op(LayerNormParams{begin_norm_axis, epsilon}, {x, weight, bias});
}

Tensor layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& inv_std,
                       const Tensor& weight, int64_t begin_norm_axis, double epsilon) {
  static OpHandle op("layer_norm_grad");
  return op.call1(LayerNormParams{begin_norm_axis, epsilon}, {dy, x, mean, inv_std, weight});
}

std::vector<Tensor> layer_norm_param_grad(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                          const Tensor& inv_std, int64_t begin_norm_axis,
                                          double epsilon) {
  static OpHandle op("layer_norm_param_grad");
  return op(LayerNormParams{begin_norm_axis, epsilon}, {dy, x, mean, inv_std});
}

}  // namespace functional

}  // namespace ofl
