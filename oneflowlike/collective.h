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
//  - BROADCAST (one rank's tensor -> B on a placement holding that rank): every member gets the
//    input of member `root`, which alone reads a register (Note [Broadcast]). SEND_RECV (any
//    other conversion between two layouts of one set of ranks, no partial sums): every member
//    sends regions of its input to and receives regions of its output from the members named
//    by its blocks (Note [Grouped send/recv]).
//  - The chunks are the balanced ranges (collective_chunks) of CollectiveProto::axis of the
//    whole tensor (the input of a reduction, the output of a gather), or of its flat elements.
//  - The members' tasks share a collective_id, unique in the plan, and carry their sequence
//    number on the communicator. check_plan_contract proves before launch that every member
//    has the same sequence (op, dtype, count, collective) and that nothing waits in a cycle
//    through the collectives (Note [Collective order] in plan_contract.h).
//  - Sum order (ring_sum_order): chunk c of a reduction is summed starting at member c + 1 and
//    going round the ring to member c, (((x[c+1] + x[c+2]) + ...) + x[c]), the order of a ring
//    reduce-scatter; a small all-reduce by recursive doubling sums one tree instead (Note
//    [Recursive doubling]). Every executor follows the plan's algorithm, so a plan's result does
//    not depend on which one runs it, nor on how many processes it spans.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "oneflowlike/dtype.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/shape.h"

namespace ofl {

/// Note [Broadcast]: member `root` holds the tensor; every member ends with a copy in its output.
/// Large tensors go along a chain (root, root + 1, ..., root - 1) in pieces
/// (kBroadcastPieceMaxBytes), each member forwarding a piece as soon as it has it, so every link
/// carries the tensor once and the links work at once; small ones (at most
/// kRecursiveDoublingMaxBytes) down a binomial tree (CollectiveProto::TREE: member v, counted from
/// the root, receives the whole from v minus its highest set bit and sends it to v + 2^j for every
/// 2^j > v), log2(n) hops instead of n - 1. Every member receives from one member only, so one
/// collective id tags it (Note [Collective tags]). On GPUs it is ncclBroadcast, the root being
/// member 0 there (Note [Device collectives] in actor/device_collectives.h, "Order").
///
/// Note [Grouped send/recv]: a conversion between two layouts of one set of ranks that no
/// single collective above makes (several dimensions changing at once, splits that do not nest,
/// one hierarchy reshaped into another) is still one COLLECTIVE task per rank, instead of a
/// SEND/RECV pair per overlapping piece plus slices and concats: each member's task lists its
/// blocks (CollectiveProto.sends and receives, the regions of the generic decomposition of
/// compiler/physical/boxing_generic.cpp), and runs them all at once: contiguous regions move
/// straight from the input or into the output, others through packed scratch. Member m sends
/// member q at most one block (two boxes meet in one box), tagged collective_id + m (as an
/// all-to-all, which is the same exchange with blocks computed from its chunks:
/// collective_blocks). The plan contract checks that each send has its receive of the same
/// size on the other member. On GPUs it is one NCCL group of ncclSend/ncclRecv.
struct CollectiveBlock {
  int64_t member = 0;
  std::vector<Range> region;  // sends: in the input; receives: in the output
};
struct CollectiveBlocks {
  std::vector<CollectiveBlock> sends;
  std::vector<CollectiveBlock> receives;
};

/// The blocks of member `member` of an ALL_TO_ALL (from its chunks, one each way per member)
/// or a SEND_RECV (its proto's) with registers of shapes `input` and `output`.
CollectiveBlocks collective_blocks(const proto::CollectiveProto& collective, int64_t member,
                                   const Shape& input, const Shape& output);

/// The n chunks of a tensor of `shape`: balanced ranges of `axis`, or of the flat elements
/// (axis -1: then each region is one range over a 1-d view of `numel` elements).
std::vector<std::vector<Range>> collective_chunks(const Shape& shape, int axis, int64_t n);
/// The elements of chunk `chunk` of collective_chunks(shape, axis, n), without making them.
int64_t collective_chunk_numel(const Shape& shape, int axis, int64_t n, int64_t chunk);

/// The members in the order chunk `chunk` of a reduction is summed: chunk + 1, ..., chunk
/// (indices into the communicator).
std::vector<int64_t> ring_sum_order(int64_t chunk, int64_t n);

/// "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv".
const char* collective_op_name(proto::CollectiveProto::Op op);

/// Note [Recursive doubling]: a small all-reduce is latency, and the ring's 2(n - 1) steps cost
/// more than its bytes. Recursive doubling takes log2(p) exchanges of the whole tensor, p the
/// largest power of two <= n: members p..n-1 first hand their input to member m - p, which adds
/// it; the first p members then, at step k = 0, 1, ..., exchange partial sums with member
/// m xor 2^k and add; last, member m < n - p hands the sum to member m + p. Every member's sum
/// has the same association (one tree), and float addition is commutative, so all members hold
/// the same bits: those of recursive_doubling_adds. The compiler picks it for all-reduces of at
/// most kRecursiveDoublingMaxBytes; the plan records the choice (CollectiveProto::algorithm).
/// Measured (docs/benchmarks.md, "Collectives"): over TCP between two hosts it took 0.5-0.8 of
/// the ring's time at 4 and 16 KiB on 4 ranks and half on 8, but twice the ring's at 64 KiB (one
/// whole-tensor message against the ring's small pieces); within a host, over shared memory, the
/// two were level up to 256 KiB.
constexpr int64_t kRecursiveDoublingMaxBytes = int64_t{32} << 10;

/// The algorithm of a collective of `op` over n members whose whole tensor has `whole_bytes`.
proto::CollectiveProto::Algorithm collective_algorithm(proto::CollectiveProto::Op op,
                                                       int64_t whole_bytes, int64_t n);

/// "ring", "recursive doubling", "tree".
const char* collective_algorithm_name(proto::CollectiveProto::Algorithm algorithm);

/// The sum of recursive doubling over n members as (into, from) pairs, applied in order to one
/// partial per member that starts as its input: partial[into] = partial[into] + partial[from].
/// The sum ends in partial[0] (Note [Recursive doubling]).
std::vector<std::pair<int64_t, int64_t>> recursive_doubling_adds(int64_t n);

/// The largest power of two <= n (n >= 1): the members of recursive doubling's exchanges.
int64_t recursive_doubling_core(int64_t n);

/// The whole tensor a collective chunks: the input of a reduction, the output of a gather or a
/// broadcast; for an all-to-all the output along `axis` and the input elsewhere; for a grouped
/// send/recv the member's output. `input` and `output` are the member's register shapes.
Shape collective_whole(const proto::CollectiveProto& collective, const Shape& input,
                       const Shape& output);

/// Note [Collective scratch]: a host member of a collective works in memory besides its input
/// and output registers:
///  - packed_input: its input chunk by chunk, when a reduction's chunks are not contiguous in
///    it (an axis after leading dims > 1);
///  - packed_whole: a reduce-scatter's running sums, an all-gather's whole chunk by chunk when
///    its chunks are not contiguous in the output;
///  - a grouped send/recv or an all-to-all: the blocks it sends that are not contiguous in its
///    input (packed_input) and those it receives that are not contiguous in its output
///    (packed_whole), its own block excepted (copied directly);
///  - received: a ring reduction's pieces of the reduce-scatter steps in flight (two, one for
///    n = 2), or the whole tensor for recursive doubling.
/// collective_scratch sizes them, once for both sides: the compiler records the total in
/// CollectiveProto.scratch_bytes and memory planning places it in the rank's block for the
/// collective's window (Note [Collective windows] in compiler/physical/memory_planning.cpp),
/// so the plan's peak counts it; the runtime's jobs then work in that memory, or allocate their
/// own where the plan has none (an unbounded window, a GPU task staged through the host) or
/// where OFL_COLLECTIVE_PIECE_BYTES asks for larger pieces than the plan's.
struct CollectiveScratchLayout {
  static constexpr int64_t kAlignment = 64;
  int64_t packed_input = 0;  // bytes of each part, 0 when unused; laid out in this order
  int64_t packed_whole = 0;
  int64_t received = 0;
  int64_t ring_pieces = 1;     // a ring's pieces per chunk (its messages per step)
  int64_t piece_capacity = 0;  // elements of the largest piece

  int64_t packed_whole_offset() const;
  int64_t received_offset() const;
  int64_t bytes() const;  // 0 when no part is used
};

/// `bytes` rounded up to CollectiveScratchLayout::kAlignment: how the parts of a member's
/// scratch, and the packed blocks of a grouped send/recv within a part, are laid out.
int64_t align_collective_scratch(int64_t bytes);

/// The largest piece a ring sends of a chunk of `chunk_bytes`, or a broadcast's chain forwards
/// of its tensor: `configured` when positive (OFL_COLLECTIVE_PIECE_BYTES), else a quarter of it
/// within [64 KiB, `largest`].
int64_t collective_piece_limit(int64_t chunk_bytes, int64_t configured,
                               int64_t largest = int64_t{1} << 20);

/// A broadcast chain's `largest` piece (Note [Broadcast]). Smaller than a ring's: a piece waits
/// for the whole piece before it at every hop, so the chain fills in (n - 1) pieces. Measured
/// (docs/benchmarks.md, "Collectives" (d)), 64 MiB over 4 processes on this 2-core machine:
/// 26-27 ms in 256 KiB pieces against 33-35 ms in 1 MiB pieces in one series, 35-49 ms in a
/// later one (the machine's noise); over 2 processes level.
constexpr int64_t kBroadcastPieceMaxBytes = int64_t{256} << 10;

/// Member `member`'s scratch (Note [Collective scratch]) for `collective` from its input and
/// output register shapes (a broadcast's member without input: any) and dtype.
CollectiveScratchLayout collective_scratch(const proto::CollectiveProto& collective, int64_t member,
                                           const Shape& input, const Shape& output, DataType dtype,
                                           int64_t configured_piece_bytes = 0);

/// How many collective ids a collective of `op` over n members by `algorithm` takes (Note
/// [Collective tags]).
int64_t collective_ids(proto::CollectiveProto::Op op, int64_t n,
                       proto::CollectiveProto::Algorithm algorithm);

/// Note [Collective tags]: a member's messages travel as tagged transfers (comm/transport.h)
/// under a 32-bit tag: bit 31 set (transfer ids stay below it), the collective id, and the
/// receiving member, so two ranks of one process never match each other's messages. The
/// messages between two members of one collective follow each other in one order on both
/// sides, and transports keep the order of one tag between two ranks, so the tag needs no
/// step or act number. A ring member receives from one member only; an all-to-all member from
/// every member, and transports match tags whatever the sender, so an all-to-all takes n ids,
/// collective_id + the sending member. Recursive doubling receives from another member at each
/// stage (the fold, the log2(p) exchanges, the unfold): it takes one id per stage,
/// collective_id + the stage.
constexpr int64_t kMaxCollectiveId = int64_t{1} << 19;
constexpr int64_t kMaxCollectiveMembers = int64_t{1} << 12;
uint64_t collective_tag(int64_t collective_id, int64_t receiving_member);

}  // namespace ofl
