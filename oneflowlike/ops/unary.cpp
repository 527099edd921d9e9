// Elementwise functions of one tensor and their fused backward ops. They share inference
// (same shape and dtype out) and differ in which dtypes they accept, SBP (only neg is linear)
// and gradient.

#include "oneflowlike/ops/unary.h"

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/grad_util.h"
#include "oneflowlike/ops/scalar.h"

namespace ofl {

namespace {

// neg and abs: any number type.
std::vector<TensorMeta> infer_number_unary(const InferContext& ctx) {
  OFL_CHECK_TYPE(ctx.dtype(0) != DataType::kBool, "[", ctx.op_name(),
                 "] the input must have a number dtype, not bool. However, got ",
                 ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

// exp, log, ...: the result is not an integer, so integer inputs are refused (cast first).
std::vector<TensorMeta> infer_float_unary(const InferContext& ctx) {
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] the input must have a floating-point dtype. However, got ",
                 ctx.describe_inputs(), ".");
  return {ctx.input(0)};
}

void check_gelu_approximate(const InferContext& ctx) {
  const std::string& approximate = ctx.params<GeluParams>().approximate;
  OFL_CHECK(approximate == "none" || approximate == "tanh", "[", ctx.op_name(),
            "] approximate must be 'none' or 'tanh'. However, got '", approximate, "'.");
}

std::vector<TensorMeta> infer_gelu(const InferContext& ctx) {
  check_gelu_approximate(ctx);
  return infer_float_unary(ctx);
}

// (y or x, dy) -> dx: both of one shape and one floating dtype.
std::vector<TensorMeta> infer_backward(const InferContext& ctx) {
  OFL_CHECK_TYPE(ctx.dtype(0) == ctx.dtype(1) && is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] both inputs must have one floating-point dtype. However, got ",
                 ctx.describe_inputs(), ".");
  OFL_CHECK(ctx.shape(0) == ctx.shape(1), "[", ctx.op_name(),
            "] both inputs must have one shape. However, got ", ctx.describe_inputs(), ".");
  return {ctx.input(1)};
}

std::vector<TensorMeta> infer_gelu_grad(const InferContext& ctx) {
  check_gelu_approximate(ctx);
  return infer_backward(ctx);
}

// An elementwise function commutes with any split and with broadcast.
std::vector<SbpSignature> unary_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  return sigs;
}

std::vector<SbpSignature> neg_signatures(const InferContext& ctx) {
  auto sigs = unary_signatures(ctx);
  sigs.push_back({{P()}, {P()}});  // linear: -(a + b) = -a + -b
  return sigs;
}

// The backward ops are elementwise in both inputs and linear in dy.
std::vector<SbpSignature> backward_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i), S(i)}, {S(i)}});
  sigs.push_back({{B(), B()}, {B()}});
  sigs.push_back({{B(), P()}, {P()}});
  return sigs;
}

void neg_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, neg(g, dy));
}

void abs_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("abs_grad", NoParams{}, {g.input(0), dy}));
}

// y = exp(x): dx = dy * y.
void exp_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, mul(g, dy, g.output(0)));
}

// y = log(x): dx = dy / x.
void log_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("div", NoParams{}, {dy, g.input(0)}));
}

// y = sqrt(x): dx = dy * 0.5 / y.
void sqrt_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("div", NoParams{}, {scalar_mul(g, dy, 0.5), g.output(0)}));
}

// y = x^-1/2: dx = dy * -0.5 * y^3.
void rsqrt_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Value y3 = g.apply1("scalar_pow", ScalarParams{3.0}, {g.output(0)});
  g.set_input_grad(0, mul(g, dy, scalar_mul(g, y3, -0.5)));
}

// Gradients that call a fused backward op of (y, dy).
template <const char* kBackwardOp>
void gradient_from_output(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1(kBackwardOp, NoParams{}, {g.output(0), dy}));
}
constexpr char kTanhGrad[] = "tanh_grad";
constexpr char kSigmoidGrad[] = "sigmoid_grad";
constexpr char kReluGrad[] = "relu_grad";

void silu_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("silu_grad", NoParams{}, {g.input(0), dy}));
}

void gelu_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  g.set_input_grad(0, g.apply1("gelu_grad", g.any_params(), {g.input(0), dy}));
}

// Second derivatives. out = dy * f'(y) is linear in dy, so d/d(dy) is the same op applied to
// the incoming gradient.
Value same_op_on_grad(GradBuilder& g, const char* op, Value gout) {
  return g.apply1(op, g.any_params(), {g.input(0), gout});
}

// out = dy * (1 - y^2): d/dy = -2 * y * dy * gout.
void tanh_grad_gradient(GradBuilder& g) {
  const Value gout = g.output_grad(0);
  if (gout == GradBuilder::kNone) return;
  const Value y = g.input(0), dy = g.input(1);
  if (g.needs_input_grad(0)) g.set_input_grad(0, scalar_mul(g, mul(g, mul(g, y, dy), gout), -2.0));
  if (g.needs_input_grad(1)) g.set_input_grad(1, same_op_on_grad(g, "tanh_grad", gout));
}

// out = dy * y * (1 - y): d/dy = dy * (1 - 2y) * gout.
void sigmoid_grad_gradient(GradBuilder& g) {
  const Value gout = g.output_grad(0);
  if (gout == GradBuilder::kNone) return;
  const Value y = g.input(0), dy = g.input(1);
  if (g.needs_input_grad(0)) {
    const Value one_minus_2y = g.apply1("scalar_add", ScalarParams{1.0}, {scalar_mul(g, y, -2.0)});
    g.set_input_grad(0, mul(g, mul(g, dy, gout), one_minus_2y));
  }
  if (g.needs_input_grad(1)) g.set_input_grad(1, same_op_on_grad(g, "sigmoid_grad", gout));
}

// relu_grad and abs_grad are piecewise constant in their first input: only dy gets a gradient.
template <const char* kOp>
void piecewise_backward_gradient(GradBuilder& g) {
  const Value gout = g.output_grad(0);
  if (gout == GradBuilder::kNone) return;
  if (g.needs_input_grad(1)) g.set_input_grad(1, same_op_on_grad(g, kOp, gout));
}
constexpr char kAbsGrad[] = "abs_grad";

// gelu_grad and silu_grad: linear in dy; the second derivative in x is not written.
template <const char* kOp>
void smooth_backward_gradient(GradBuilder& g) {
  const Value gout = g.output_grad(0);
  if (gout == GradBuilder::kNone) return;
  OFL_CHECK_CODE(!g.needs_input_grad(0), ErrorCode::kUnimplemented, "[", kOp,
                 "] the second derivative with respect to the input is not implemented. "
                 "However, got a backward pass that needs it.");
  if (g.needs_input_grad(1)) g.set_input_grad(1, same_op_on_grad(g, kOp, gout));
}
constexpr char kGeluGrad[] = "gelu_grad";
constexpr char kSiluGrad[] = "silu_grad";

}  // namespace

OFL_REGISTER_OP("neg")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_number_unary)
    .set<FSbpSignatures>(neg_signatures)
    .set<FGradient>(neg_gradient);

OFL_REGISTER_OP("abs")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_number_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(abs_gradient);

OFL_REGISTER_OP("exp")
    .inputs({"x"})
    .outputs({"y"})
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(exp_gradient);

OFL_REGISTER_OP("log")
    .inputs({"x"})
    .outputs({"y"})
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(log_gradient);

OFL_REGISTER_OP("sqrt")
    .inputs({"x"})
    .outputs({"y"})
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(sqrt_gradient);

OFL_REGISTER_OP("rsqrt")
    .inputs({"x"})
    .outputs({"y"})
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(rsqrt_gradient);

OFL_REGISTER_OP("tanh")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(gradient_from_output<kTanhGrad>);

OFL_REGISTER_OP("sigmoid")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(gradient_from_output<kSigmoidGrad>);

OFL_REGISTER_OP("relu")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(gradient_from_output<kReluGrad>);

OFL_REGISTER_OP("gelu")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .params<GeluParams>()
    .set<FInferMeta>(infer_gelu)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(gelu_gradient);

OFL_REGISTER_OP("tanh_grad")
    .inputs({"y", "dy"})
    .outputs({"dx"})
    .set<FInferMeta>(infer_backward)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(tanh_grad_gradient);

OFL_REGISTER_OP("sigmoid_grad")
    .inputs({"y", "dy"})
    .outputs({"dx"})
    .set<FInferMeta>(infer_backward)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(sigmoid_grad_gradient);

OFL_REGISTER_OP("relu_grad")
    .inputs({"y", "dy"})
    .outputs({"dx"})
    .set<FInferMeta>(infer_backward)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(piecewise_backward_gradient<kReluGrad>);

OFL_REGISTER_OP("abs_grad")
    .inputs({"x", "dy"})
    .outputs({"dx"})
    .set<FInferMeta>(infer_backward)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(piecewise_backward_gradient<kAbsGrad>);

OFL_REGISTER_OP("gelu_grad")
    .inputs({"x", "dy"})
    .outputs({"dx"})
    .params<GeluParams>()
    .set<FInferMeta>(infer_gelu_grad)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(smooth_backward_gradient<kGeluGrad>);

OFL_REGISTER_OP("silu")
    .inputs({"x"})
    .outputs({"y"})
    .set<TUnderAmp>(AmpCategory::kFollow)
    .set<FInferMeta>(infer_float_unary)
    .set<FSbpSignatures>(unary_signatures)
    .set<FGradient>(silu_gradient);

OFL_REGISTER_OP("silu_grad")
    .inputs({"x", "dy"})
    .outputs({"dx"})
    .set<FInferMeta>(infer_backward)
    .set<FSbpSignatures>(backward_signatures)
    .set<FGradient>(smooth_backward_gradient<kSiluGrad>);

namespace functional {

#define OFL_DEFINE_UNARY(name)        \
  Tensor name(const Tensor& x) {      \
    static OpHandle op(#name);        \
    return op.call1(NoParams{}, {x}); \
  }
OFL_DEFINE_UNARY(neg)
OFL_DEFINE_UNARY(abs)
OFL_DEFINE_UNARY(exp)
OFL_DEFINE_UNARY(log)
OFL_DEFINE_UNARY(sqrt)
OFL_DEFINE_UNARY(rsqrt)
OFL_DEFINE_UNARY(tanh)
OFL_DEFINE_UNARY(relu)
OFL_DEFINE_UNARY(sigmoid)
OFL_DEFINE_UNARY(silu)
#undef OFL_DEFINE_UNARY

#define OFL_DEFINE_BACKWARD(name, first)               \
  Tensor name(const Tensor& first, const Tensor& dy) { \
    static OpHandle op(#name);                         \
    return op.call1(NoParams{}, {first, dy});          \
  }
OFL_DEFINE_BACKWARD(tanh_grad, y)
OFL_DEFINE_BACKWARD(sigmoid_grad, y)
OFL_DEFINE_BACKWARD(relu_grad, y)
OFL_DEFINE_BACKWARD(abs_grad, x)
OFL_DEFINE_BACKWARD(silu_grad, x)
#undef OFL_DEFINE_BACKWARD

Tensor gelu(const Tensor& x, const std::string& approximate) {
  static OpHandle op("gelu");
  return op.call1(GeluParams{approximate}, {x});
}

Tensor gelu_grad(const Tensor& x, const Tensor& dy, const std::string& approximate) {
  static OpHandle op("gelu_grad");
  return op.call1(GeluParams{approximate}, {x, dy});
}

}  // namespace functional

}  // namespace ofl
