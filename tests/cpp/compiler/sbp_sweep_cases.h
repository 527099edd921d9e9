#pragma once
// The SBP sweep's table (tests/cpp/compiler/sbp_sweep_test.cpp): every registered op with
// sample inputs and params, and the variants worth sweeping.

#include <string>
#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/shape.h"

namespace ofl::compiler::sweep {

struct InputSpec {
  Shape shape;
  DataType dtype = DataType::kFloat32;
  double lo = -1.0;  // values are drawn from [lo, hi); integers for integer and bool dtypes
  double hi = 1.0;
};

struct OpCase {
  std::string name;  // the test's name: the op, or op_variant
  std::string op;
  AnyParams params;
  std::vector<InputSpec> inputs;
};

/// Uniform floats in [lo, hi).
InputSpec floats(Shape shape, double lo = -1.0, double hi = 1.0);

/// Every op case of the sweep. Shapes keep every splittable extent >= 4 (no empty pieces on 4
/// ranks) and use 5 somewhere, so that splits over 2, 3 and 4 ranks are uneven.
std::vector<OpCase> sweep_cases();

}  // namespace ofl::compiler::sweep
