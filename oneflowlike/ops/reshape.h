#pragma once
// reshape: a view with a new shape (one extent may be -1). expand: broadcast to a shape.
// stop_gradient: a view of x through which no gradient flows (a traced tensor's detach()).

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct ReshapeParams {
  Shape shape;  // may hold one -1
  OFL_PARAMS(ReshapeParams, shape)
};

struct ExpandParams {
  Shape shape;  // NumPy broadcasting target; -1 keeps the input's extent
  OFL_PARAMS(ExpandParams, shape)
};

namespace functional {
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor stop_gradient(const Tensor& x);
}  // namespace functional

}  // namespace ofl
