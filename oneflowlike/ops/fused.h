#pragma once
// fused_elementwise: a chain of unary elementwise ops applied in one pass over the data, made
// by the compiler's fusion pass (one read and one write instead of one per op). The chain is
// text, e.g. "scalar_mul(0.5),tanh,scalar_add(1)", so the op stays one registered op with a
// plain parameter struct.

#include <string>
#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct FusedElementwiseParams {
  std::string steps;
  OFL_PARAMS(FusedElementwiseParams, steps)
};

/// One step of a fused chain.
struct FusedStep {
  enum class Kind {
    kNeg,
    kExp,
    kLog,
    kSqrt,
    kRsqrt,
    kTanh,
    kRelu,
    kSigmoid,
    kGelu,
    kGeluTanh,
    kScalarAdd,
    kScalarMul,
    kScalarPow
  };
  Kind kind;
  double scalar = 0;  // scalar ops
};

/// Parses a chain; raises ValueError naming the bad step.
std::vector<FusedStep> parse_fused_steps(const std::string& steps);
/// The text of one step of op `type` (with `params`), or "" when the op cannot be fused.
std::string fused_step_text(const std::string& type, const AnyParams& params);
/// Whether every step is linear (then partial sums stay partial sums).
bool fused_steps_are_linear(const std::vector<FusedStep>& steps);

namespace functional {
Tensor fused_elementwise(const Tensor& x, const std::string& steps);
}  // namespace functional

}  // namespace ofl
