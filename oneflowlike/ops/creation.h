#pragma once
// Creation ops: fill (zeros/ones/full), arange, cast.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct FillParams {
  Shape shape;
  DataType dtype = DataType::kFloat32;
  double value = 0.0;
  OFL_PARAMS(FillParams, shape, dtype, value)
};

struct CastParams {
  DataType dtype = DataType::kFloat32;
  OFL_PARAMS(CastParams, dtype)
};

struct ArangeParams {
  double start = 0.0;
  double end = 0.0;
  double step = 1.0;
  DataType dtype = DataType::kInt64;
  OFL_PARAMS(ArangeParams, start, end, step, dtype)
};

namespace functional {
/// The creation functions make their tensor on `device` (eager mode; CPU in a graph).
Tensor fill(const Shape& shape, DataType dtype, double value, const Device& device = Device::cpu());
/// x itself when it already has `dtype`.
Tensor cast(const Tensor& x, DataType dtype);
Tensor arange(double start, double end, double step, DataType dtype,
              const Device& device = Device::cpu());
}  // namespace functional

}  // namespace ofl
