#pragma once
// Collectives as plan tasks: what the compiler, the plan contract, the runtime and the
// reference executor agree on about one.
//
// Note [Collective tasks]: when boxing keeps the placement and changes the SBP of one hierarchy
// dimension, the ranks sharing every other coordinate form a communicator of n members that
// runs a collective on their local tensors (Note [Boxing decompositions] in
// compiler/physical/boxing.h). The plan holds one COLLECTIVE task per member, reading the
// member's local tensor and writing its result, instead of about 2(n - 1) SEND/RECV pairs with
// slices and adds per member, so a whole-job plan grows linearly in ranks.
//  - ALL_REDUCE (P -> B): every member gets the sum; REDUCE_SCATTER (P -> S(i)): member i gets
//    chunk i of the sum; ALL_GATHER (S(i) -> B): every member gets the n inputs as chunks;
//    ALL_TO_ALL (S(i) -> S(j)): member m holds chunk m along i of the whole and gets chunk m
//    along j, each member q sending it the part of its chunk inside chunk m along j.
//  - The chunks are the balanced ranges (collective_chunks) of CollectiveProto::axis of the
//    whole tensor (the input of a reduction, the output of a gather), or of its flat elements.
//  - The members' tasks share a collective_id, unique in the plan, and carry their sequence
//    number on the communicator. check_plan_contract proves before launch that every member
//    has the same sequence (op, dtype, count, collective) and that nothing waits in a cycle
//    through the collectives (Note [Collective order] in plan_contract.h).
//  - Sum order (ring_sum_order): chunk c of a reduction is summed starting at member c + 1 and
//    going round the ring to member c, (((x[c+1] + x[c+2]) + ...) + x[c]), the order of a ring
//    reduce-scatter. Every executor sums in this order, so a plan's result does not depend on
//    which one runs it, nor on how many processes it spans.

#include <cstdint>
#include <string>
#include <vector>

#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/shape.h"

namespace ofl {

/// The n chunks of a tensor of `shape`: balanced ranges of `axis`, or of the flat elements
/// (axis -1: then each region is one range over a 1-d view of `numel` elements).
std::vector<std::vector<Range>> collective_chunks(const Shape& shape, int axis, int64_t n);

/// The members in the order chunk `chunk` of a reduction is summed: chunk + 1, ..., chunk
/// (indices into the communicator).
std::vector<int64_t> ring_sum_order(int64_t chunk, int64_t n);

/// "all_reduce", "reduce_scatter", "all_gather".
const char* collective_op_name(proto::CollectiveProto::Op op);

/// The whole tensor a collective chunks: the input of a reduction, the output of a gather; for
/// an all-to-all the output along `axis` and the input elsewhere. `input` and `output` are the
/// member's register shapes.
Shape collective_whole(const proto::CollectiveProto& collective, const Shape& input,
                       const Shape& output);

/// How many collective ids a collective of `op` over n members takes (Note [Collective tags]).
int64_t collective_ids(proto::CollectiveProto::Op op, int64_t n);

/// Note [Collective tags]: a member's messages travel as tagged transfers (comm/transport.h)
/// under a 32-bit tag: bit 31 set (transfer ids stay below it), the collective id, and the
/// receiving member, so two ranks of one process never match each other's messages. The
/// messages between two members of one collective follow each other in one order on both
/// sides, and transports keep the order of one tag between two ranks, so the tag needs no
/// step or act number. A ring member receives from one member only; an all-to-all member from
/// every member, and transports match tags whatever the sender, so an all-to-all takes n ids,
/// collective_id + the sending member.
constexpr int64_t kMaxCollectiveId = int64_t{1} << 19;
constexpr int64_t kMaxCollectiveMembers = int64_t{1} << 12;
uint64_t collective_tag(int64_t collective_id, int64_t receiving_member);

}  // namespace ofl
