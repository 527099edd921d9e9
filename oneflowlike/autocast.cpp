// Eager autocast state (Note [Eager autocast] in autocast.h) and the mixed-precision policy.

#include "oneflowlike/autocast.h"

#include <algorithm>
#include <map>
#include <memory>

#include "oneflowlike/autograd.h"
#include "oneflowlike/op.h"

namespace ofl {

namespace {
thread_local DataType current = DataType::kFloat32;

// Note [Autocast weight cache].
struct CachedCast {
  Tensor weight;  // kept alive, so that its impl's address names no other tensor
  // The storage cast from, weakly: `.data =` may free it, and a new storage at its address
  // (with version 0 again) must not pass for it; a weak_ptr compares by control block, which
  // it keeps from being reused.
  std::weak_ptr<Storage> storage;
  size_t offset_bytes;
  Shape shape;
  int64_t version;
  Tensor cast;
};

bool same_storage(const std::weak_ptr<Storage>& cached, const std::shared_ptr<Storage>& now) {
  return !cached.owner_before(now) && !now.owner_before(cached) && !cached.expired();
}
thread_local std::map<const TensorImpl*, CachedCast> weight_casts;
thread_local bool cache_enabled = true;

bool cacheable(const Tensor& weight) {
  return cache_enabled && !GradMode::enabled() && !weight.is_lazy() &&
         weight.dtype() == DataType::kFloat32 && weight.requires_grad() && weight.is_leaf();
}

// Leaving the outermost region (to float32 from a low dtype) ends the cache's life.
void set_current(DataType dtype) {
  if (dtype == DataType::kFloat32 && current != DataType::kFloat32) weight_casts.clear();
  current = dtype;
}
}  // namespace

DataType autocast_dtype() { return current; }

void set_autocast_dtype(DataType dtype) { set_current(dtype); }

AutocastScope::AutocastScope(DataType dtype) : previous_(current) { current = dtype; }

AutocastScope::~AutocastScope() { set_current(previous_); }

Tensor cached_weight_cast(const Tensor& weight, DataType dtype) {
  if (!cacheable(weight)) return Tensor();
  const auto it = weight_casts.find(weight.impl());
  if (it == weight_casts.end()) return Tensor();
  const CachedCast& entry = it->second;
  if (!same_storage(entry.storage, weight.impl()->storage) ||
      entry.offset_bytes != weight.impl()->offset_bytes || entry.shape != weight.shape() ||
      entry.version != weight.version() || entry.cast.dtype() != dtype) {
    weight_casts.erase(it);
    return Tensor();
  }
  return entry.cast;
}

void cache_weight_cast(const Tensor& weight, const Tensor& cast) {
  if (!cacheable(weight)) return;
  weight_casts[weight.impl()] =
      CachedCast{weight,         weight.impl()->storage, weight.impl()->offset_bytes,
                 weight.shape(), weight.version(),       cast};
}

bool autocast_cache_enabled() { return cache_enabled; }

void set_autocast_cache_enabled(bool enabled) {
  cache_enabled = enabled;
  if (!enabled) weight_casts.clear();
}

void clear_autocast_cache() { weight_casts.clear(); }

size_t autocast_cache_size() { return weight_casts.size(); }

std::vector<DataType> amp_input_dtypes(const OpSchema& op, std::vector<DataType> inputs,
                                       DataType low) {
  // An op writing tensors in place gets them as they are (a cast would take the write into a
  // copy), and its other floating operands in the first one's dtype (Note [Cached attention]: a
  // cache's dtype is fixed); written tensors of another dtype stay so, for the op to refuse.
  if (const std::vector<int>* written = op.get<TMutatedInputs>();
      written != nullptr && !written->empty() &&
      written->front() < static_cast<int>(inputs.size())) {
    const DataType to = inputs[written->front()];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool kept = std::count(written->begin(), written->end(), static_cast<int>(i)) > 0;
      DataType& d = inputs[i];
      if (!kept && is_floating(to) && (d == DataType::kFloat32 || d == low)) d = to;
    }
    return inputs;
  }
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
