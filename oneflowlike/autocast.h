#pragma once
// Eager autocast (flow.autocast, as torch.autocast) and the mixed-precision policy it shares with
// the compiler's amp pass.
//
// Note [Eager autocast]: within an AutocastScope, apply_op gives every op the input dtypes that
// amp_input_dtypes says (Note [Mixed precision policy] in op.h), each cast an op of its own, so
// autograd and graph tracing see them as they see any op: the gradient of a float32 weight stays
// float32. As with torch.autocast, a low-precision op's outputs stay in the low dtype, and the
// ops after it follow or cast up by their class. The scope is per thread, as torch's is.

#include <vector>

#include "oneflowlike/dtype.h"

namespace ofl {

class OpSchema;

/// The dtype each input of `op` takes under mixed precision in `low` (bfloat16 or float16),
/// given the inputs' dtypes (Note [Mixed precision policy] in op.h). Only float32 and `low`
/// inputs ever change; pass a non-floating dtype for an absent input.
std::vector<DataType> amp_input_dtypes(const OpSchema& op, std::vector<DataType> inputs,
                                       DataType low);

/// The dtype ops marked for it run in on this thread; kFloat32 outside any scope.
DataType autocast_dtype();

/// Sets this thread's autocast dtype for its lifetime (kFloat32: off), then restores the one
/// before.
class AutocastScope {
 public:
  explicit AutocastScope(DataType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DataType previous_;
};

/// Sets this thread's autocast dtype (for the Python context manager, which restores it).
void set_autocast_dtype(DataType dtype);

}  // namespace ofl
