#pragma once
// Register and memory planning: on each rank, registers whose lifetimes do not overlap share
// memory. Every rank gets one memory block for its shareable registers; the others (persistent
// variables, pipelined registers, registers that cross to the communication thread other than
// through a bounded collective) are allocated on their own. See Note [Memory reuse and the
// chain] and Note [Collective windows] in memory_planning.cpp.
//
//   chain:   t0 -> t1 -> t2 -> t3          a = t0's output, read by t1   lifetime [0, 1]
//   block:   | a |     | c |               b = t1's output, read by t2   lifetime [1, 2]
//            |   b   |                     c = t2's output, read by t3   lifetime [2, 3]
//   a and c never live at the same time, so they take the same offset; b lies beside both.

#include <cstdint>
#include <string>
#include <vector>

#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

/// Offsets of shared registers are multiples of this (cache lines, vector loads).
inline constexpr int64_t kMemoryAlignment = 64;

/// Plans the memory of every rank of `plan` in place:
///  - orders each rank's compute chain (its thread-0 tasks in plan order) with control_inputs,
///  - gives every shareable register (not persistent, register_num == 1, produced and consumed
///    only by chain tasks) an offset in the rank's memory block, such that registers whose
///    lifetimes overlap never overlap in memory; other registers get memory_block = -1,
///  - places each host collective's scratch for its window the same way (scratch_in_block),
///    or counts it as memory of its own when the window is unbounded,
///  - fills RankPlanProto.memory_blocks, peak_bytes and bytes_without_reuse.
/// Running it twice gives the same plan. Raises FailedPrecondition naming the rank, its peak and
/// its largest registers when `memory_limit_bytes` > 0 and some rank's peak exceeds it.
void plan_memory(proto::PlanProto* plan, int64_t memory_limit_bytes = 0);

/// The `count` largest registers of a rank (all slots), as "'name' (shape) dtype N bytes", for
/// messages.
std::string largest_registers(const proto::RankPlanProto& rank_plan, size_t count);

/// A register as memory planning sees it: its chain lifetime [begin, end] when it shares the
/// rank's block, or begin = end = -1 when it has memory of its own all the time; and the bytes
/// it holds (all slots; 0 for views).
struct RegisterLifetime {
  int64_t begin = -1, end = -1;
  int64_t bytes = 0;
};
/// What plan_memory decided for a rank (it plans a copy): every register's lifetime, by
/// register position, and every task's collective scratch (Note [Collective scratch] in
/// oneflowlike/collective.h), by task position (0 bytes for a task without one).
struct PlannedLifetimes {
  std::vector<RegisterLifetime> registers;
  std::vector<RegisterLifetime> scratch;
};
PlannedLifetimes planned_lifetimes(const proto::RankPlanProto& rank_plan);

/// The bytes of one slot of `reg`: its `bytes` field, or numel * dtype size when that is 0.
int64_t register_slot_bytes(const proto::RegisterProto& reg);

}  // namespace ofl::compiler::physical
