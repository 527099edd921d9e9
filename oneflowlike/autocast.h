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
#include "oneflowlike/tensor.h"

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
/// Turning autocast off empties the weight-cast cache.
void set_autocast_dtype(DataType dtype);

/// Note [Autocast weight cache]: as torch.autocast's cache_enabled, a float32 weight (a leaf
/// that requires grad) cast to the low dtype for an op is cast once per autocast region, not
/// once per use: generation runs every weight once per token, and the casts read 1.5 times the
/// weights' bytes again. Unlike torch's, only while gradients are off (no_grad, inference):
/// this autograd frees every node a backward passes (retain_graph=False), so a cast shared by
/// two forward passes would refuse the second backward. An entry is the weight's tensor, its
/// storage and version when cast, and the cast; a write into the weight (an optimizer step),
/// a changed storage (`.data =`) or another dtype casts again. The cache is per thread and is
/// emptied when the thread's outermost autocast region ends.
/// The cached cast of `weight` to `dtype`, or an undefined tensor (not cached, or stale).
Tensor cached_weight_cast(const Tensor& weight, DataType dtype);
/// Caches `cast` as `weight` cast to its dtype; does nothing for a tensor the cache does not
/// take (not a float32 leaf requiring grad, gradients on, the cache off).
void cache_weight_cast(const Tensor& weight, const Tensor& cast);
/// Whether autocast regions on this thread cache weight casts (default true).
bool autocast_cache_enabled();
void set_autocast_cache_enabled(bool enabled);
void clear_autocast_cache();
/// The weights cached on this thread (for tests).
size_t autocast_cache_size();

}  // namespace ofl
