#pragma once
// Static checks of a plan before anything runs: a failed check is a compile error naming the
// tasks, ranks and registers involved.

#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

/// Checks that
///  - every register is produced and consumed on its own rank, with register_num >= 1;
///  - every SEND has exactly one RECV with its transfer id, on the peer it names, with the same
///    shape and dtype (so every transfer is matched on both ranks);
///  - the tasks of one iteration, joined by registers, control inputs and transfers across all
///    ranks, form no cycle: with at least one slot per register every task then gets to act,
///    so the plan cannot deadlock by construction.
/// Raises ofl::Error (FailedPrecondition) naming what is wrong.
void check_plan(const proto::PlanProto& plan);

}  // namespace ofl::compiler::physical
