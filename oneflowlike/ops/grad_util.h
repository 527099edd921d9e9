#pragma once
// Helpers shared by gradient builders (they emit ops through GradBuilder, so they work in eager
// autograd and in the compiler alike).

#include "oneflowlike/op.h"

namespace ofl {

using Value = GradBuilder::Value;

/// Sums `grad` down to `shape` (undoing NumPy broadcasting): reduce_sum over the broadcast
/// axes, then reshape. Returns grad itself when the shapes already match.
Value sum_to_shape(GradBuilder& g, Value grad, const Shape& shape);

/// The gradient of output i, or zeros of that output's shape when nothing flowed into it.
Value output_grad_or_zeros(GradBuilder& g, int i);

/// Single-input ops by name, for brevity in builders.
Value neg(GradBuilder& g, Value x);
Value mul(GradBuilder& g, Value a, Value b);
Value scalar_mul(GradBuilder& g, Value x, double scalar);

}  // namespace ofl
