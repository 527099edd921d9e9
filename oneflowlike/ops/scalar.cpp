// Ops of a tensor and a scalar held in ScalarParams: scalar_add, scalar_mul, scalar_pow,
// scalar_rpow. Elementwise, so every split commutes with them; only scalar_mul is linear.

#include "oneflowlike/ops/scalar.h"

#include <cmath>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/grad_util.h"

namespace ofl {

namespace {

std::vector<TensorMeta> infer_scalar_arithmetic(const InferContext& ctx) {
  OFL_CHECK_TYPE(ctx.dtype(0) != DataType::kBool, "[", ctx.op_name(),
                 "] the input must have a number dtype, not bool. However, got ",
                 ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

std::vector<TensorMeta> infer_scalar_power(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] the input must have a floating-point dtype. However, got ",
                 ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

std::vector<SbpSignature> scalar_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  return sigs;
}

std::vector<SbpSignature> scalar_mul_signatures(const InferContext& ctx) {
  auto sigs = scalar_signatures(ctx);
  sigs.push_back({{P()}, {P()}});  // s * (a + b) = s * a + s * b
  return sigs;
}

double scalar_of(const GradBuilder& g) { return g.params<ScalarParams>().scalar; }

void scalar_add_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, dy);
}

void scalar_mul_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, scalar_mul(g, dy, scalar_of(g)));
}

// y = x^s: dx = dy * s * x^(s-1).
void scalar_pow_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const double s = scalar_of(g);
  if (s == 0.0) {  // constant; x^-1 would turn 0 * inf into nan at x = 0
    g.set_input_grad(0, scalar_mul(g, dy, 0.0));
  } else if (s == 1.0) {
    g.set_input_grad(0, dy);
  } else {
    const Value x = g.input(0);
    const Value power = s == 2.0 ? x : g.apply1("scalar_pow", ScalarParams{s - 1.0}, {x});
    g.set_input_grad(0, mul(g, dy, scalar_mul(g, power, s)));
  }
}

// y = s^x: dx = dy * y * ln(s).
void scalar_rpow_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, mul(g, dy, scalar_mul(g, g.output(0), std::log(scalar_of(g)))));
}

}  // namespace

OFL_REGISTER_OP("scalar_add")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ScalarParams>()
    .set<FInferMeta>(infer_scalar_arithmetic)
    .set<FSbpSignatures>(scalar_signatures)
    .set<FGradient>(scalar_add_gradient);

OFL_REGISTER_OP("scalar_mul")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<ScalarParams>()
    .set<FInferMeta>(infer_scalar_arithmetic)
    .set<FSbpSignatures>(scalar_mul_signatures)
    .set<FGradient>(scalar_mul_gradient);

OFL_REGISTER_OP("scalar_pow")
    .inputs({"x"})
    .outputs({"y"})
    .params<ScalarParams>()
    .set<FInferMeta>(infer_scalar_power)
    .set<FSbpSignatures>(scalar_signatures)
    .set<FGradient>(scalar_pow_gradient);

OFL_REGISTER_OP("scalar_rpow")
    .inputs({"x"})
    .outputs({"y"})
    .params<ScalarParams>()
    .set<FInferMeta>(infer_scalar_power)
    .set<FSbpSignatures>(scalar_signatures)
    .set<FGradient>(scalar_rpow_gradient);

namespace functional {

namespace {

bool is_integral_value(double v) { return std::isfinite(v) && std::floor(v) == v; }

// Integer tensors meet a fractional scalar (or a power op) as float32, as in torch.
Tensor promoted(const Tensor& x, bool needs_floating) {
  if (x.defined() && is_integral(x.dtype()) && needs_floating) return cast(x, DataType::kFloat32);
  return x;
}

}  // namespace

Tensor scalar_add(const Tensor& x, double scalar) {
  static OpHandle op("scalar_add");
  return op.call1(ScalarParams{scalar}, {promoted(x, !is_integral_value(scalar))});
}

Tensor scalar_mul(const Tensor& x, double scalar) {
  static OpHandle op("scalar_mul");
  return op.call1(ScalarParams{scalar}, {promoted(x, !is_integral_value(scalar))});
}

Tensor scalar_pow(const Tensor& x, double exponent) {
  static OpHandle op("scalar_pow");
  return op.call1(ScalarParams{exponent}, {promoted(x, /*needs_floating=*/true)});
}

Tensor scalar_rpow(const Tensor& x, double base) {
  static OpHandle op("scalar_rpow");
  return op.call1(ScalarParams{base}, {promoted(x, /*needs_floating=*/true)});
}

}  // namespace functional

}  // namespace ofl
