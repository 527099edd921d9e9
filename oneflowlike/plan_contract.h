#pragma once
// The plan contract: what the compiler promises and every executor of a plan (the actor runtime,
// the reference executor) relies on, checked by one function that both the compiler (after
// memory planning) and the runtime (when a plan loads) call.

#include "oneflowlike/proto/plan.pb.h"

namespace ofl {

struct PlanContractOptions {
  /// Check that the happens-before graph is acyclic. Off only to let a runtime's watchdog meet
  /// a deadlocking plan (its tests).
  bool acyclic = true;
};

/// Checks that
///  - every register has a slot and is produced and read by tasks of its own rank (data crosses
///    ranks only by SEND / RECV);
///  - every task reads and writes registers of its own device (host or GPU), only COPY_H2D and
///    COPY_D2H cross between the two, and only compute, view copies and variables run on a GPU;
///  - every SEND has exactly one RECV with its transfer id on the peer it names, the two name
///    each other, and they move one shape and dtype. Note [Partial plans]: a plan compiled for
///    some ranks holds one side of its transfers with the others; those are checked where the
///    other side is;
///  - the tasks of one iteration, joined by registers, control inputs and transfers across all
///    ranks of the plan, form no cycle: with at least one slot per register every task then
///    gets to act, so the plan cannot deadlock by construction. A cycle is reported with each
///    task on or behind it and what it waits for.
/// Raises ofl::Error (kFailedPrecondition) naming the tasks, ranks and registers involved.
void check_plan_contract(const proto::PlanProto& plan, const PlanContractOptions& options = {});

}  // namespace ofl
