#pragma once
// Creation ops: fill (zeros/ones/full), arange, cast, and to_device (a copy onto a device).

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

/// Note [Device copies]: to_device is tensor.to(device) as an op, so autograd follows a tensor
/// across devices (its gradient is the copy back to `from`). Eager only in effect: in a graph
/// the placement decides where values live, and the op is a copy.
struct ToDeviceParams {
  std::string to;    // "cuda:0", "cpu:0"
  std::string from;  // the input's device, where the gradient goes back to
  OFL_PARAMS(ToDeviceParams, to, from)
};

namespace functional {
/// The creation functions make their tensor on `device` (eager mode; CPU in a graph).
Tensor fill(const Shape& shape, DataType dtype, double value, const Device& device = Device::cpu());
/// x itself when it already has `dtype`.
Tensor cast(const Tensor& x, DataType dtype);
Tensor arange(double start, double end, double step, DataType dtype,
              const Device& device = Device::cpu());
/// x on `device` (x itself when it is there), differentiable (Note [Device copies]).
Tensor to_device(const Tensor& x, const Device& device);
}  // namespace functional

}  // namespace ofl
