#pragma once
// The plan contract: what the compiler promises and every executor of a plan (the actor runtime,
// the reference executor) relies on, checked by one function that both the compiler (after
// memory planning) and the runtime (when a plan loads) call.

#include "oneflowlike/proto/plan.pb.h"

namespace ofl {

// Note [Collective order]: the static proof that a plan's collectives (Note [Collective tasks]
// in oneflowlike/collective.h) finish, in two halves.
//  1. Every member runs the same program: on each communicator, the members' collective tasks
//     ordered by `sequence` agree position by position on the collective_id, op, dtype, element
//     count of the whole tensor (a grouped send/recv's blocks are matched pairwise instead),
//     axis, algorithm and a broadcast's root. So every task of a collective has a partner on each
//     other member, the two exchange messages of one size, and no member waits for a message
//     that no task will send. A compiler that lets a rank's plan depend on the rank (a branch
//     taken on some ranks only, collectives emitted in a rank-dependent order) fails here,
//     named by its first differing position, instead of hanging at run time. The same order on
//     every member is also what a runtime that runs a communicator's collectives in sequence
//     (NCCL's rule) would need.
//  2. No rank waits on a collective that another rank can only reach after its own. A
//     member's part finishes once every member has started, i.e. once every member's input is
//     written, and nothing else: the runtime runs collectives concurrently, each waiting only
//     for its own members (Note [Collective engine] in actor/collective_engine.h). So the
//     happens-before graph gets an edge from the producer of each member's input to every
//     member's task, and if that graph (with data, control and transfer edges) is acyclic, then
//     along a topological order every task gets to act: a collective's tasks act once their
//     predecessors have, which acted earlier in the order. A rank-crossing cycle through a
//     collective (rank 0 feeds collective X only with what it receives after collective Y,
//     whose rank-1 input needs X's result) is reported as a deadlock with what each task waits
//     for.
// Note [Partial plans]: a plan holding some ranks only is checked among the members present.

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
///  - every COLLECTIVE task reads one register (none for a broadcast's members other than the
///    root, nor for a grouped send/recv's members that send nothing; on a GPU member 0 always
///    reads one) and writes one, and its rank is one of at least two distinct members; the tasks of
///    one collective_id name the same members, one task per member rank;
///  - of a grouped send/recv, every block a member sends another is a block of as many
///    elements that the other receives from it, each member sends to and receives from a
///    member at most once, and its receives add up to its output;
///  - on every communicator (one `members` list), each member present runs the same collectives
///    in the same order: its tasks numbered 0, 1, ... by `sequence`, and at each position the
///    same collective_id, op, dtype, element count and axis on every member (Note [Collective
///    order]). A difference is reported at its first position with both ranks' ops, the
///    logical ops that made them and, where the plan has them, their source lines
///    (TaskProto.location);
///  - the tasks of one iteration, joined by registers, control inputs, transfers and
///    collectives (each member's task waits for every member's input) across all ranks of the
///    plan, form no cycle: with at least one slot per register every task then gets to act, so
///    the plan cannot deadlock by construction. A cycle is reported with each task on or behind
///    it and what it waits for.
/// Raises ofl::Error (kFailedPrecondition) naming the tasks, ranks and registers involved.
void check_plan_contract(const proto::PlanProto& plan, const PlanContractOptions& options = {});

/// Whether `task`'s output pieces are ready once per micro-batch. ACCUMULATE and PACK act every
/// micro-batch but hand out one piece per iteration (Note [Micro-batches] in plan.proto), so a
/// task borrowing their output (a view) acts at the once-per-iteration rate.
bool outputs_per_micro_batch(const proto::TaskProto& task);

}  // namespace ofl
