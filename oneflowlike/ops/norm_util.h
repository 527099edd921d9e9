#pragma once
// What layer_norm and rms_norm share: both normalise x over its trailing axes
// [begin_norm_axis, ndim) with LayerNormParams, keep per-row statistics shaped like the leading
// axes, and check their inputs the same way. One place for those checks.

#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/ops/layer_norm.h"

namespace ofl::norm_util {

/// begin_norm_axis normalised against x (input `x_index`); raises IndexError when out of range.
inline int begin_axis(const InferContext& ctx, int x_index) {
  const Shape& x = ctx.shape(x_index);
  OFL_CHECK(x.ndim() >= 1, "[", ctx.op_name(), "] x must have at least one axis. However, got ",
            ctx.describe_inputs(), ".");
  return normalize_axis(ctx.params<LayerNormParams>().begin_norm_axis, x.ndim(),
                        ctx.op_name().c_str());
}

/// x's axes before b (the rows) and from b on (the normalised axes).
inline Shape leading(const Shape& x, int b) {
  return Shape(std::vector<int64_t>(x.dims().begin(), x.dims().begin() + b));
}
inline Shape trailing(const Shape& x, int b) {
  return Shape(std::vector<int64_t>(x.dims().begin() + b, x.dims().end()));
}

inline void check_one_floating_dtype(const InferContext& ctx) {
  bool same = true;
  for (int i = 1; i < ctx.num_inputs(); ++i) same = same && ctx.dtype(i) == ctx.dtype(0);
  OFL_CHECK_TYPE(same && is_floating(ctx.dtype(0)), "[", ctx.op_name(),
                 "] all inputs must have one floating dtype. However, got ", ctx.describe_inputs(),
                 ".");
}

/// Checks that input i has `shape`, saying what it should be.
inline void check_shape(const InferContext& ctx, int i, const Shape& shape, const char* what) {
  OFL_CHECK(ctx.shape(i) == shape, "[", ctx.op_name(), "] ", ctx.input_name(i), " must be ", what,
            " ", shape.to_string(), ". However, got ", ctx.describe_inputs(), ".");
}

/// Checks dy, x and `num_stats` per-row statistics (inputs 0, 1, 2...) of a backward op;
/// returns the normalised begin axis.
inline int check_backward_inputs(const InferContext& ctx, int num_stats) {
  const int b = begin_axis(ctx, 1);
  check_one_floating_dtype(ctx);
  const Shape& x = ctx.shape(1);
  check_shape(ctx, 0, x, "shaped like x");
  for (int i = 0; i < num_stats; ++i) {
    check_shape(ctx, 2 + i, leading(x, b), "shaped like the leading (not normalised) axes of x");
  }
  return b;
}

}  // namespace ofl::norm_util
