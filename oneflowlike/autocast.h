#pragma once
// Eager autocast (flow.autocast, as torch.autocast): within an AutocastScope, every op marked
// TLowPrecisionUnderAmp (Note [Mixed precision policy] in op.h) runs in the scope's dtype.
//
// Note [Eager autocast]: apply_op casts such an op's float32 inputs down, runs it, and casts
// its low-precision outputs back to float32, each cast an op of its own, so autograd and graph
// tracing see them as they see any op: the gradient of a float32 weight stays float32. Outputs
// come back float32, where torch.autocast returns bfloat16: our other kernels compute in
// float32 (compiler/passes/amp.cpp's Note [Mixed precision] makes the same choice for graphs).
// The scope is per thread, as torch's is.

#include "oneflowlike/dtype.h"

namespace ofl {

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
