#pragma once
// Fields of a plan's task that the plan leaves implicit, and the one place that reads and writes
// each.
//
// Note [Implicit plan fields]: a whole-job plan holds millions of tasks (3.6 M for a 24-layer
// GPT on 1,024 ranks), so a field that only repeats what the task says already is left out:
//  - logical_op, the logical op a task came from, is empty where it equals the task's name (a
//    compute task, an input, a variable); logical_op_of() reads it, set_logical_op() writes it;
//  - output_region and logical_output_shape are given to compute tasks only where the kernel
//    reads them (TPositionDependent in op.h);
//  - a compute task's params are its logical op's, the same on every rank: the plan holds them
//    once (PlanProto.op_params) and the task their index (params_index); params_of() reads
//    either form (hand-built plans may set TaskProto.params);
//  - a register's name is empty where it is its producer's default: "<producer>/out<k>" for
//    output k of a compute task (the logical tensor's default name, Graph::add_op), the
//    producer's name for any other task (a variable, an input, a boxing step); register_name_of()
//    reads it, set_register_name() writes it. Only messages, dumps and reports read it.
// Measured on the 64-rank GPT plan (protobuf's SpaceUsedLong), 894 bytes a task before, 778
// without the regions, 738 without the repeated names, 635 with the params held once
// (docs/benchmarks.md, "Collectives" (b)); each register's name averaged 70 bytes more.

#include <string>

#include "oneflowlike/proto/plan.pb.h"

namespace ofl {

/// The logical op `task` came from (Note [Implicit plan fields]).
inline const std::string& logical_op_of(const proto::TaskProto& task) {
  return task.logical_op().empty() ? task.name() : task.logical_op();
}

/// The params of compute task `task` of `plan` (Note [Implicit plan fields]). Raises where the
/// index lies outside the plan's table.
const proto::ParamsProto& params_of(const proto::PlanProto& plan, const proto::TaskProto& task);

/// Whether `task` writes register `register_id` in place (one of its mutated_inputs reads it).
inline bool writes_in_place(const proto::TaskProto& task, int64_t register_id) {
  for (int position : task.mutated_inputs()) {
    if (position >= 0 && position < task.inputs_size() && task.inputs(position) == register_id) {
      return true;
    }
  }
  return false;
}

/// Records that `task`, whose name is set, came from `logical_op` (Note [Implicit plan fields]).
inline void set_logical_op(proto::TaskProto* task, const std::string& logical_op) {
  if (logical_op == task->name()) {
    task->clear_logical_op();
  } else {
    task->set_logical_op(logical_op);
  }
}

/// The name of register `reg`, an output of `producer` (Note [Implicit plan fields]). Where the
/// producer is unknown (null: a malformed plan) and the name implicit, the register is named by
/// its id.
std::string register_name_of(const proto::TaskProto* producer, const proto::RegisterProto& reg);

/// The name of register `reg` of `rank_plan`, its producer looked up there (a scan: for
/// messages and dumps). A register whose producer the plan lacks is named by its id.
std::string register_name_of(const proto::RankPlanProto& rank_plan,
                             const proto::RegisterProto& reg);

/// Records that register `reg`, already among `producer`'s outputs, is named `name` (Note
/// [Implicit plan fields]).
void set_register_name(proto::RegisterProto* reg, const proto::TaskProto& producer,
                       const std::string& name);

}  // namespace ofl
