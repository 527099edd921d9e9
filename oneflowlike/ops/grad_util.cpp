#include "oneflowlike/ops/grad_util.h"

#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/scalar.h"

namespace ofl {

Value sum_to_shape(GradBuilder& g, Value grad, const Shape& shape) {
  const Shape from = g.meta(grad).shape;
  if (from == shape) return grad;
  std::vector<int64_t> axes;
  const int lead = from.ndim() - shape.ndim();
  for (int i = 0; i < from.ndim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1)) axes.push_back(i);
  }
  Value summed = grad;
  if (!axes.empty()) summed = g.apply1("reduce_sum", ReduceParams{axes, /*keepdims=*/true}, {grad});
  return g.apply1("reshape", ReshapeParams{shape}, {summed});
}

Value output_grad_or_zeros(GradBuilder& g, int i) {
  Value dy = g.output_grad(i);
  if (dy != GradBuilder::kNone) return dy;
  const TensorMeta m = g.meta(g.output(i));
  return g.apply1("fill", FillParams{m.shape, m.dtype, 0.0}, {});
}

Value neg(GradBuilder& g, Value x) { return g.apply1("neg", NoParams{}, {x}); }
Value mul(GradBuilder& g, Value a, Value b) { return g.apply1("mul", NoParams{}, {a, b}); }
Value scalar_mul(GradBuilder& g, Value x, double scalar) {
  return g.apply1("scalar_mul", ScalarParams{scalar}, {x});
}

}  // namespace ofl
