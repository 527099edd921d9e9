// Eager autocast state (Note [Eager autocast] in autocast.h).

#include "oneflowlike/autocast.h"

namespace ofl {

namespace {
thread_local DataType current = DataType::kFloat32;
}  // namespace

DataType autocast_dtype() { return current; }

void set_autocast_dtype(DataType dtype) { current = dtype; }

AutocastScope::AutocastScope(DataType dtype) : previous_(current) { current = dtype; }

AutocastScope::~AutocastScope() { current = previous_; }

}  // namespace ofl
