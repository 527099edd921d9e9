#pragma once
// The gradients' way from the backward to the optimizer's updates (gradient_reduction.cpp): laid
// out, bucketed, reduced (in bfloat16 when asked), sharded per micro-batch under ZeRO.

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "compiler/passes/optimizer_ops.h"

namespace ofl::compiler::optimizer_ops {

/// Note [Sharded gradients under accumulation]. Returns the variable ops whose gradients it
/// reduced.
std::set<int> shard_gradients_per_micro_batch(Graph& graph, std::vector<Update>& updates,
                                              DataType reduce);
/// Note [Pacing ZeRO-2 reductions]; grad_producers maps a variable op to its gradient's producer.
void pace_zero_reductions(Graph& graph, const std::map<int, int>& grad_producers);
/// Note [Gradient buckets] and Note [Buckets under accumulation].
void bucket_gradients(Graph& graph, std::vector<Update>& updates, int64_t bucket_bytes,
                      DataType reduce);
/// Note [Gradient reduction dtype]: each float32 gradient cast down (but those in `reduced`)...
void lower_gradients(Graph& graph, std::vector<Update>& updates, DataType reduce,
                     const std::set<int>& reduced);
/// ... and, laid out as its variable, cast back.
void restore_gradients(Graph& graph, std::vector<Update>& updates);

}  // namespace ofl::compiler::optimizer_ops
