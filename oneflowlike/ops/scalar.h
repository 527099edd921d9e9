#pragma once
// Ops of a tensor and a Python number: x + s, x * s, x ** s, s ** x.

#include "oneflowlike/tensor.h"
#include "oneflowlike/params.h"

namespace ofl {

struct ScalarParams {
  double scalar = 0.0;
  OFL_PARAMS(ScalarParams, scalar)
};

}  // namespace ofl
