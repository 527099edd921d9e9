#pragma once
// Boxing decomposition: one logical boxing op becomes per-rank steps: collectives (one
// COLLECTIVE task per member rank, Note [Collective tasks] in oneflowlike/collective.h) and
// SLICE, SEND/RECV, ADD, CONCAT, ZEROS, COPY, each its own task so the actor runtime can
// pipeline them and overlap communication with compute.
//
// Note [Boxing decompositions]
// When the placement stays and the SBP changes in one hierarchy dimension k, the ranks that
// share every other coordinate form a communicator of n = hierarchy[k] members that runs a
// collective on their local tensors:
//   P -> B      an all-reduce (the runtime runs a ring: Note [Ring collectives] in
//               actor/collective_engine.h).
//   P -> S(i)   a reduce-scatter, the chunks being the S(i) pieces.
//   S(i) -> B   an all-gather.
//   S(i) -> S(j) an all-to-all.
//   B -> S(i)   a local SLICE (no traffic).
//   B -> P      a COPY on coordinate 0 and ZEROS elsewhere.
// A split of axis i in dimension k is only a chunk of the group's tensor when no later
// dimension splits axis i again (splits nest in hierarchy order); otherwise, and for every
// other conversion (S(i) -> S(j), other placements), the generic decomposition runs: each
// destination takes the pieces of the sources that overlap its region (one replica each,
// preferring its own rank), sums partial-sum pieces and concatenates the regions.
// Several changed dimensions of one placement are converted one dimension at a time when some
// order makes every step a collective above.
// Between placements: one rank's tensor to B on a placement that holds the rank is a
// BROADCAST from it. Any other conversion whose two placements hold the same ranks (on one
// device type), with no partial sum on either side, is one grouped SEND_RECV over those ranks:
// the generic decomposition's pieces as blocks of one task per rank (Note [Grouped send/recv]
// in oneflowlike/collective.h). Partial sums, and placements of different ranks (stage
// boundaries, resharding between rank sets), keep the generic SEND/RECV pairs.

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/graph.h"
#include "compiler/physical/expansion.h"

namespace ofl::compiler::physical {

/// How one boxing step is decomposed (Note [Boxing decompositions]).
enum class BoxingKind {
  kIdentity,            // nothing moves: the output registers are the input registers
  kAllReduce,           // P -> B
  kReduceScatter,       // P -> S(i)
  kAllGather,           // S(i) -> B
  kAllToAll,            // S(i) -> S(j)
  kLocalSlice,          // B -> S(i)
  kBroadcastToPartial,  // B -> P
  kBroadcast,           // one rank -> B on a placement holding it
  kSendRecv,            // any other conversion within one set of ranks, no partial sums
  kGeneric,             // slice, send/recv, add and concat per destination
};

const char* boxing_kind_name(BoxingKind kind);

/// One step of a boxing decomposition: a conversion and how it is carried out.
struct BoxingStep {
  BoxingSpec spec;
  BoxingKind kind = BoxingKind::kGeneric;
};

/// The steps expand_boxing emits for `spec` on a tensor of `logical_shape`.
std::vector<BoxingStep> plan_boxing(const BoxingSpec& spec, const Shape& logical_shape);

/// Adds the tasks that turn a tensor held as spec.in_sbp on spec.in_placement (register
/// in_registers[parallel id]) into spec.out_sbp on spec.out_placement, and returns the output
/// register of each out parallel id. `name` prefixes the task and register names and is the
/// tasks' logical_op. The steps other than SEND / RECV run on `thread` (0: compute, 1:
/// communication). `location` (the boxing op's LogicalOp::location) goes on its collective tasks.
std::vector<int64_t> expand_boxing(const BoxingSpec& spec, const TensorMeta& logical,
                                   const std::vector<int64_t>& in_registers, PlanBuilder& builder,
                                   const std::string& name, int thread = 0,
                                   const std::string& location = "");

// Note [Gradient boxing on the communication thread]: the boxing of a gradient (the reduction
// of a partial-sum gradient for the optimizer, in data parallelism; its reduce-scatter under
// ZeRO) runs entirely on the communication thread, SLICE, ADD and CONCAT steps included. The
// compute thread runs its tasks in plan order (Note [Memory reuse and the chain]), and the
// optimizer that reads the reduced gradient comes last in that order: boxing steps on the
// compute thread would wait there, after the whole backward pass, while on the communication
// thread they run as soon as each gradient exists, overlapping the rest of the backward pass.
// The cost: registers a communication-thread task touches are not shared, except a collective's
// within its window (Note [Collective windows] in memory_planning.cpp). Other boxing (forward
// activations, activation gradients) stays on the compute thread, which needs its result next
// anyway.

}  // namespace ofl::compiler::physical
