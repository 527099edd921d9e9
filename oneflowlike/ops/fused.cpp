// fused_elementwise: registration and the step language shared by the op, its kernel and the
// compiler's fusion pass.

#include "oneflowlike/ops/fused.h"

#include <map>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/unary.h"

namespace ofl {

namespace {

const std::map<std::string, FusedStep::Kind>& step_kinds() {
  static const std::map<std::string, FusedStep::Kind> kinds = {
      {"neg", FusedStep::Kind::kNeg},
      {"exp", FusedStep::Kind::kExp},
      {"log", FusedStep::Kind::kLog},
      {"sqrt", FusedStep::Kind::kSqrt},
      {"rsqrt", FusedStep::Kind::kRsqrt},
      {"tanh", FusedStep::Kind::kTanh},
      {"relu", FusedStep::Kind::kRelu},
      {"sigmoid", FusedStep::Kind::kSigmoid},
      {"gelu", FusedStep::Kind::kGelu},
      {"gelu_tanh", FusedStep::Kind::kGeluTanh},
      {"scalar_add", FusedStep::Kind::kScalarAdd},
      {"scalar_mul", FusedStep::Kind::kScalarMul},
      {"scalar_pow", FusedStep::Kind::kScalarPow}};
  return kinds;
}

bool is_scalar_kind(FusedStep::Kind k) {
  return k == FusedStep::Kind::kScalarAdd || k == FusedStep::Kind::kScalarMul ||
         k == FusedStep::Kind::kScalarPow;
}

}  // namespace

std::vector<FusedStep> parse_fused_steps(const std::string& steps) {
  std::vector<FusedStep> out;
  size_t start = 0;
  while (start <= steps.size()) {
    size_t end = steps.find(',', start);
    if (end == std::string::npos) end = steps.size();
    const std::string step = steps.substr(start, end - start);
    const size_t paren = step.find('(');
    const std::string name = step.substr(0, paren);
    auto it = step_kinds().find(name);
    OFL_CHECK(it != step_kinds().end(), "[fused_elementwise] unknown step '", step,
              "'. However, got the chain '", steps, "'.");
    FusedStep s{it->second};
    OFL_CHECK(is_scalar_kind(s.kind) == (paren != std::string::npos && step.back() == ')'),
              "[fused_elementwise] step '", step, "' must ",
              is_scalar_kind(s.kind) ? "have" : "not have", " a (scalar). However, got the chain '",
              steps, "'.");
    if (paren != std::string::npos) {
      const std::string number = step.substr(paren + 1, step.size() - paren - 2);
      char* parsed_end = nullptr;
      s.scalar = std::strtod(number.c_str(), &parsed_end);
      OFL_CHECK(!number.empty() && parsed_end == number.c_str() + number.size(),
                "[fused_elementwise] step '", step, "' needs a number in parentheses.");
    }
    out.push_back(s);
    start = end + 1;
  }
  OFL_CHECK(!out.empty(), "[fused_elementwise] the chain needs at least one step.");
  return out;
}

std::string fused_step_text(const std::string& type, const AnyParams& params) {
  if (type == "gelu") return params.as<GeluParams>().approximate == "tanh" ? "gelu_tanh" : "gelu";
  if (type == "scalar_add" || type == "scalar_mul" || type == "scalar_pow") {
    // %.17g keeps every bit of the double.
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%s(%.17g)", type.c_str(),
                  params.as<ScalarParams>().scalar);
    return buffer;
  }
  if (type != "scalar_rpow" && step_kinds().count(type)) return type;
  return "";
}

bool fused_steps_are_linear(const std::vector<FusedStep>& steps) {
  for (const FusedStep& s : steps) {
    if (s.kind != FusedStep::Kind::kNeg && s.kind != FusedStep::Kind::kScalarMul) return false;
  }
  return true;
}

namespace {

std::vector<TensorMeta> infer_fused(const InferContext& ctx) {
  parse_fused_steps(ctx.params<FusedElementwiseParams>().steps);
  // The 16-bit dtypes run the chain in float32 and round once (Note [Widened kernels]).
  OFL_CHECK_TYPE(is_floating(ctx.dtype(0)),
                 "[fused_elementwise] needs a floating tensor. However, got ", ctx.describe_inputs(),
                 ".");
  return {ctx.input(0)};
}

std::vector<SbpSignature> fused_signatures(const InferContext& ctx) {
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) sigs.push_back({{S(i)}, {S(i)}});
  sigs.push_back({{B()}, {B()}});
  if (fused_steps_are_linear(parse_fused_steps(ctx.params<FusedElementwiseParams>().steps))) {
    sigs.push_back({{P()}, {P()}});
  }
  return sigs;
}

}  // namespace

// No FGradient: fusion runs after autograd, on the finished training graph.
OFL_REGISTER_OP("fused_elementwise")
    .inputs({"x"})
    .outputs({"y"})
    .params<FusedElementwiseParams>()
    .set<FInferMeta>(infer_fused)
    .set<FSbpSignatures>(fused_signatures);

namespace functional {

Tensor fused_elementwise(const Tensor& x, const std::string& steps) {
  static OpHandle op("fused_elementwise");
  return op.call1(FusedElementwiseParams{steps}, {x});
}

}  // namespace functional

}  // namespace ofl
