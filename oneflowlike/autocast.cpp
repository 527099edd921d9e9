// Eager autocast state (Note [Eager autocast] in autocast.h) and the mixed-precision policy.

#include "oneflowlike/autocast.h"

#include <algorithm>

#include "oneflowlike/op.h"

namespace ofl {

namespace {
thread_local DataType current = DataType::kFloat32;
}  // namespace

DataType autocast_dtype() { return current; }

void set_autocast_dtype(DataType dtype) { current = dtype; }

AutocastScope::AutocastScope(DataType dtype) : previous_(current) { current = dtype; }

AutocastScope::~AutocastScope() { current = previous_; }

std::vector<DataType> amp_input_dtypes(const OpSchema& op, std::vector<DataType> inputs,
                                       DataType low) {
  const AmpCategory* marked = op.get<TUnderAmp>();
  const AmpCategory category = marked == nullptr ? AmpCategory::kFloat32 : *marked;
  DataType to = DataType::kFloat32;
  if (category == AmpCategory::kLowPrecision) {
    to = low;
  } else if (category == AmpCategory::kFollow) {
    const bool widest = std::count(inputs.begin(), inputs.end(), DataType::kFloat32) > 0;
    to = widest ? DataType::kFloat32 : low;
  }
  for (DataType& d : inputs) {
    if (d == DataType::kFloat32 || d == low) d = to;
  }
  return inputs;
}

}  // namespace ofl
