#pragma once
// Selection by a bool mask: where(condition, x, y) picks x where condition holds and y
// elsewhere (all three broadcast); masked_fill(x, mask) writes a value where mask holds.

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct MaskedFillParams {
  double value = 0.0;  // converted to x's dtype
  OFL_PARAMS(MaskedFillParams, value)
};

namespace functional {
/// x where condition else y, broadcasting all three. Mixed x/y dtypes are promoted
/// (promote_types) first.
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y);
/// x with `value` wherever mask (bool, broadcastable to x's shape) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
}  // namespace functional

}  // namespace ofl
