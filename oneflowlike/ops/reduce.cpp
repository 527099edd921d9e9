// Reductions over axes: reduce_sum, reduce_mean, reduce_max, reduce_min.

#include "oneflowlike/ops/reduce.h"

#include <algorithm>

#include "oneflowlike/eager.h"
#include "oneflowlike/op.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/grad_util.h"
#include "oneflowlike/ops/reshape.h"

namespace ofl {

namespace {

// Normalised, sorted, unique axes; all axes when `axes` is empty.
std::vector<int> reduced_axes(const InferContext& ctx) {
  const auto& p = ctx.params<ReduceParams>();
  const int ndim = ctx.shape(0).ndim();
  std::vector<int> out;
  if (p.axes.empty()) {
    for (int i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : p.axes) {
    const int axis = normalize_axis(a, ndim, ctx.op_name().c_str());
    if (ndim == 0) continue;  // a scalar's dim 0 or -1 (as torch allows) is the scalar itself
    OFL_CHECK(std::find(out.begin(), out.end(), axis) == out.end(), "[", ctx.op_name(),
              "] each axis may be reduced once. However, axis ", a, " appears twice in the axes.");
    out.push_back(axis);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const std::vector<int>& axes, int axis) {
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

std::vector<TensorMeta> infer_reduce(const InferContext& ctx) {
  const Shape& x = ctx.shape(0);
  const std::vector<int> axes = reduced_axes(ctx);
  const bool keepdims = ctx.params<ReduceParams>().keepdims;
  std::vector<int64_t> dims;
  for (int i = 0; i < x.ndim(); ++i) {
    if (!contains(axes, i)) {
      dims.push_back(x[i]);
    } else if (keepdims) {
      dims.push_back(1);
    }
  }
  const bool extremum = ctx.op_name() == "reduce_max" || ctx.op_name() == "reduce_min";
  OFL_CHECK_TYPE(ctx.dtype(0) != DataType::kBool || extremum, "[", ctx.op_name(),
                 "] needs a numeric tensor. However, got ", ctx.describe_inputs(), ".");
  if (extremum) {
    for (int a : axes) {
      OFL_CHECK(x[a] > 0, "[", ctx.op_name(), "] cannot reduce an empty axis (there is no ",
                ctx.op_name() == "reduce_max" ? "maximum" : "minimum", "). However, got ",
                ctx.describe_inputs(), " reducing axis ", a, ".");
    }
  }
  return {TensorMeta{Shape(std::move(dims)), ctx.dtype(0)}};
}

// Where axis i of x lands in the output (-1 when reduced away).
int output_axis(const std::vector<int>& axes, bool keepdims, int i) {
  if (keepdims) return contains(axes, i) ? -1 : i;
  int j = 0;
  for (int k = 0; k < i; ++k) j += contains(axes, k) ? 0 : 1;
  return contains(axes, i) ? -1 : j;
}

std::vector<SbpSignature> reduce_signatures(const InferContext& ctx, bool split_reduced_to_p,
                                            bool partial_linear) {
  const std::vector<int> axes = reduced_axes(ctx);
  const bool keepdims = ctx.params<ReduceParams>().keepdims;
  std::vector<SbpSignature> sigs;
  for (int i = 0; i < ctx.shape(0).ndim(); ++i) {
    const int j = output_axis(axes, keepdims, i);
    if (j >= 0) {
      sigs.push_back({{S(i)}, {S(j)}});
    } else if (split_reduced_to_p) {
      sigs.push_back({{S(i)}, {P()}});  // each rank sums its rows; the ranks' sums add up
    }
  }
  sigs.push_back({{B()}, {B()}});
  if (partial_linear) sigs.push_back({{P()}, {P()}});
  return sigs;
}

// dy reshaped to keepdims form (so that it broadcasts against x).
Value keepdims_grad(GradBuilder& g, Value dy) {
  const auto& p = g.params<ReduceParams>();
  if (p.keepdims) return dy;
  const Shape x = g.meta(g.input(0)).shape;
  std::vector<int64_t> dims = x.dims();
  if (p.axes.empty()) {
    std::fill(dims.begin(), dims.end(), 1);
  } else if (x.ndim() > 0) {
    for (int64_t a : p.axes) dims[a < 0 ? a + x.ndim() : a] = 1;
  }
  return g.apply1("reshape", ReshapeParams{Shape(dims)}, {dy});
}

void sum_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Shape x = g.meta(g.input(0)).shape;
  g.set_input_grad(0, g.apply1("expand", ExpandParams{x}, {keepdims_grad(g, dy)}));
}

void mean_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const Shape x = g.meta(g.input(0)).shape;
  const int64_t count = x.numel() / std::max<int64_t>(1, g.meta(g.output(0)).shape.numel());
  const Value expanded = g.apply1("expand", ExpandParams{x}, {keepdims_grad(g, dy)});
  g.set_input_grad(0, scalar_mul(g, expanded, 1.0 / static_cast<double>(count)));
}

// The gradient is shared equally among the positions that attain the maximum (or minimum).
void extremum_gradient(GradBuilder& g) {
  const Value dy = g.output_grad(0);
  if (dy == GradBuilder::kNone) return;
  const TensorMeta x = g.meta(g.input(0));
  const auto& p = g.params<ReduceParams>();
  const Value y = keepdims_grad(g, g.output(0));
  const Value is_max =
      g.apply1("equal", NoParams{}, {g.input(0), g.apply1("expand", ExpandParams{x.shape}, {y})});
  const Value mask = g.apply1("cast", CastParams{x.dtype}, {is_max});
  const Value count = g.apply1("reduce_sum", ReduceParams{p.axes, /*keepdims=*/true}, {mask});
  const Value share = g.apply1("div", NoParams{}, {keepdims_grad(g, dy), count});
  g.set_input_grad(0, mul(g, mask, g.apply1("expand", ExpandParams{x.shape}, {share})));
}

// A max (min) of pieces is not the sum of anything: no split of a reduced axis, no P.
std::vector<SbpSignature> extremum_signatures(const InferContext& ctx) {
  return reduce_signatures(ctx, false, false);
}

}  // namespace

OFL_REGISTER_OP("reduce_sum")
    .inputs({"x"})
    .outputs({"out"})
    .params<ReduceParams>()
    .set<FInferMeta>(infer_reduce)
    .set<FSbpSignatures>([](const InferContext& ctx) { return reduce_signatures(ctx, true, true); })
    .set<FGradient>(sum_gradient);

// A split on a reduced axis is not offered for mean: with uneven pieces the local means do not
// add up to the global one.
OFL_REGISTER_OP("reduce_mean")
    .inputs({"x"})
    .outputs({"out"})
    .params<ReduceParams>()
    .set<FInferMeta>(infer_reduce)
    .set<FSbpSignatures>([](const InferContext& ctx) {
      return reduce_signatures(ctx, false, true);
    })
    .set<FGradient>(mean_gradient);

OFL_REGISTER_OP("reduce_max")
    .inputs({"x"})
    .outputs({"out"})
    .params<ReduceParams>()
    .set<FInferMeta>(infer_reduce)
    .set<FSbpSignatures>(extremum_signatures)
    .set<FGradient>(extremum_gradient);

OFL_REGISTER_OP("reduce_min")
    .inputs({"x"})
    .outputs({"out"})
    .params<ReduceParams>()
    .set<FInferMeta>(infer_reduce)
    .set<FSbpSignatures>(extremum_signatures)
    .set<FGradient>(extremum_gradient);

namespace functional {

Tensor reduce_sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  static OpHandle op("reduce_sum");
  return op.call1(ReduceParams{axes, keepdims}, {x});
}
Tensor reduce_mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  static OpHandle op("reduce_mean");
  return op.call1(ReduceParams{axes, keepdims}, {x});
}
Tensor reduce_max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  static OpHandle op("reduce_max");
  return op.call1(ReduceParams{axes, keepdims}, {x});
}
Tensor reduce_min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  static OpHandle op("reduce_min");
  return op.call1(ReduceParams{axes, keepdims}, {x});
}

}  // namespace functional

}  // namespace ofl
