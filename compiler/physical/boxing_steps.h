#pragma once
// What the boxing decompositions are made of (Note [Boxing decompositions] in boxing.h): the
// emitter of elementary tasks, and one expansion per kind of transition, each in its own file:
//   boxing_same_placement.cpp  one hierarchy dimension changes on one placement: collectives,
//                              local slices, B -> P
//   boxing_grouped.cpp         one rank to B on a placement holding it: a broadcast; two
//                              layouts of one set of ranks: a grouped send/recv
//   boxing_generic.cpp         any placements, any SBPs: region intersections
// Internal to compiler/physical; expand_boxing (boxing.h) is the interface.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/physical/boxing.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/error.h"
#include "oneflowlike/plan_task.h"
#include "oneflowlike/proto_convert.h"

namespace ofl::compiler::physical {

using Region = std::vector<Range>;  // one range per axis

/// given one when nothing needs doing), so callers chain steps without special cases.
class StepEmitter {
 public:
  /// `location`: where the user's code made the boxed tensor's op (LogicalOp::location), kept
  /// on collective tasks for the errors of the collective-order proof.
  StepEmitter(PlanBuilder& builder, std::string name, DataType dtype, int thread,
              std::string location = "")
      : builder_(builder),
        name_(std::move(name)),
        dtype_(dtype),
        thread_(thread),
        location_(std::move(location)) {}

  PlanBuilder& builder() { return builder_; }

  /// The part `local` of `reg` (in reg's coordinates), on reg's rank.
  int64_t slice(int64_t reg, const Region& local) {
    if (local == whole_region(builder_.register_shape(reg))) return reg;
    proto::TaskProto* t = task(builder_.register_rank(reg), proto::TaskProto::SLICE, "slice");
    builder_.add_input(t, reg);
    add_ranges(local, t->mutable_slice());
    return output(t, region_shape(local));
  }

  /// `reg` on `rank`: a SEND/RECV pair when it lives elsewhere, or between GPUs a send/recv
  /// collective of the pair (Note [Transfers between GPUs], set_device_transfers).
  int64_t move(int64_t reg, int64_t rank) {
    const int64_t from = builder_.register_rank(reg);
    if (from == rank) return reg;
    if (device_transfers_ && builder_.register_device(reg) == proto::PLAN_DEVICE_CUDA) {
      return device_move(reg, rank);
    }
    const int64_t transfer = builder_.new_transfer_id();
    proto::TaskProto* send = task(from, proto::TaskProto::SEND, "send", /*thread=*/1);
    builder_.add_input(send, reg);
    send->set_peer(rank);
    send->set_transfer_id(transfer);
    proto::TaskProto* recv = task(rank, proto::TaskProto::RECV, "recv", /*thread=*/1);
    recv->set_peer(from);
    recv->set_transfer_id(transfer);
    return output(recv, builder_.register_shape(reg));
  }

  /// The elementwise sum of same-shaped registers on one rank: on the GPU when they all are
  /// there (Note [Local boxing steps on a GPU] in expansion.h; bools, whose sum is a logical or,
  /// on the host), else on the host.
  int64_t add(const std::vector<int64_t>& regs) {
    OFL_ASSERT(!regs.empty());
    if (regs.size() == 1) return regs[0];
    bool on_gpu = dtype_ != DataType::kBool;
    for (int64_t reg : regs) {
      on_gpu = on_gpu && builder_.register_device(reg) == proto::PLAN_DEVICE_CUDA;
    }
    const proto::PlanDevice saved = builder_.device();
    const bool saved_on_gpu = on_gpu_;
    if (on_gpu) set_device(proto::PLAN_DEVICE_CUDA);
    proto::TaskProto* t = task(builder_.register_rank(regs[0]), proto::TaskProto::ADD, "add");
    builder_.set_device(saved);
    on_gpu_ = saved_on_gpu;
    for (int64_t reg : regs) {
      OFL_ASSERT(builder_.register_shape(reg) == builder_.register_shape(regs[0]));
      builder_.add_input(t, reg);
    }
    return output(t, builder_.register_shape(regs[0]));
  }

  /// A tensor of `shape` on `rank` assembled from (register, its region in the result).
  int64_t concat(int64_t rank, const std::vector<std::pair<int64_t, Region>>& pieces,
                 const Shape& shape) {
    proto::TaskProto* t = task(rank, proto::TaskProto::CONCAT, "concat");
    for (const auto& [reg, region] : pieces) {
      OFL_ASSERT(builder_.register_shape(reg) == region_shape(region));
      builder_.add_input(t, reg);
      add_ranges(region, t->mutable_concat_regions());
    }
    return output(t, shape);
  }

  /// One collective over the members (parallel ids, in ring order) of `placement`, reading
  /// in[member] (none where it is -1: a broadcast's members but the root) and writing a
  /// register of out_shapes[member] on each (Note [Collective tasks] in
  /// oneflowlike/collective.h). `k`: the hierarchy dimension the members span, -1 for every rank
  /// of the placement. `root`: a broadcast's; `blocks`: a grouped send/recv's, by member. Runs on
  /// the communication thread: the work happens on the rank's collective engine, not in the
  /// chain of the compute thread, so its registers must not share memory with the chain's. On a
  /// CUDA placement it runs on the GPU, its registers in GPU memory (Note [Device collectives] in
  /// actor/device_collectives.h).
  std::vector<int64_t> collective(proto::CollectiveProto::Op op, const Placement& placement, int k,
                                  const std::vector<int64_t>& members,
                                  const std::vector<int64_t>& in,
                                  const std::vector<Shape>& out_shapes, int axis, int out_axis = 0,
                                  int64_t root = 0,
                                  const std::vector<CollectiveBlocks>* blocks = nullptr) {
    std::vector<int64_t> ranks, inputs;
    for (int64_t pid : members) {
      ranks.push_back(placement.rank(pid));
      inputs.push_back(in[pid]);
    }
    const std::string communicator = k >= 0 ? str_cat("dimension ", k, " of ", placement.brief())
                                            : str_cat("the ranks of ", placement.brief());
    return collective_over(op, ranks, communicator, placement.device_type() == DeviceType::kCUDA,
                           inputs, out_shapes, axis, out_axis, root, blocks);
  }

  /// Transfers between GPUs (Note [Transfers between GPUs]) from now on.
  void set_device_transfers(bool on) { device_transfers_ = on; }

  /// The steps from now on (but collectives and transfers, which say where they run) run on
  /// `device` (Note [Local boxing steps on a GPU] in expansion.h): on a GPU on the rank's
  /// compute thread, whose stream the GPU work is queued on.
  void set_device(proto::PlanDevice device) {
    builder_.set_device(device);
    on_gpu_ = device == proto::PLAN_DEVICE_CUDA;
  }

  int64_t zeros(int64_t rank, const Shape& shape) {
    return output(task(rank, proto::TaskProto::ZEROS, "zeros"), shape);
  }

  int64_t copy(int64_t reg) {
    proto::TaskProto* t = task(builder_.register_rank(reg), proto::TaskProto::COPY, "copy");
    builder_.add_input(t, reg);
    return output(t, builder_.register_shape(reg));
  }

 private:
  // One collective over `ranks` (members in order) named `communicator`; inputs[m] is member m's
  // register (-1: none), out_shapes[m] its output's shape; on the GPU when `on_gpu`.
  std::vector<int64_t> collective_over(proto::CollectiveProto::Op op,
                                       const std::vector<int64_t>& ranks,
                                       const std::string& communicator, bool on_gpu,
                                       const std::vector<int64_t>& inputs,
                                       const std::vector<Shape>& out_shapes, int axis, int out_axis,
                                       int64_t root, const std::vector<CollectiveBlocks>* blocks) {
    // The whole tensor's bytes choose the algorithm (collective_algorithm).
    proto::CollectiveProto op_only;
    op_only.set_op(op);
    op_only.set_axis(axis);
    const Shape first_in_shape = inputs[0] >= 0 ? builder_.register_shape(inputs[0]) : Shape{};
    const int64_t whole_bytes = collective_whole(op_only, first_in_shape, out_shapes[0]).numel() *
                                static_cast<int64_t>(dtype_size(dtype_));
    const int64_t n = static_cast<int64_t>(ranks.size());
    const proto::CollectiveProto::Algorithm algorithm = collective_algorithm(op, whole_bytes, n);
    const int64_t control_id = on_gpu ? builder_.control_id(ranks) : 0;
    const auto [id, sequence] = builder_.new_collective(ranks, collective_ids(op, n, algorithm));
    std::vector<int64_t> out;
    for (size_t m = 0; m < ranks.size(); ++m) {
      if (on_gpu) builder_.set_device(proto::PLAN_DEVICE_CUDA);
      proto::TaskProto* t =
          task(ranks[m], proto::TaskProto::COLLECTIVE, collective_op_name(op), /*thread=*/1);
      builder_.set_device(proto::PLAN_DEVICE_CPU);
      const int64_t input = inputs[m];
      if (input >= 0) builder_.add_input(t, input);
      if (builder_.kept(ranks[m])) {
        proto::CollectiveProto* c = t->mutable_collective();
        c->set_op(op);
        for (int64_t r : ranks) c->add_members(r);
        c->set_communicator(communicator);
        c->set_collective_id(id);
        c->set_sequence(sequence);
        c->set_axis(axis);
        if (op == proto::CollectiveProto::ALL_TO_ALL) c->set_out_axis(out_axis);
        c->set_algorithm(algorithm);
        c->set_control_id(control_id);
        c->set_root(root);
        if (blocks != nullptr) {
          auto add = [](const std::vector<CollectiveBlock>& list, auto* to) {
            for (const CollectiveBlock& b : list) {
              proto::CollectiveBlockProto* block = to->Add();
              block->set_member(b.member);
              add_ranges(b.region, block->mutable_region());
            }
          };
          add((*blocks)[m].sends, c->mutable_sends());
          add((*blocks)[m].receives, c->mutable_receives());
        }
        if (!on_gpu) {  // Note [Collective scratch]: planned with the rank's registers
          c->set_scratch_bytes(
              collective_scratch(*c, static_cast<int64_t>(m),
                                 input >= 0 ? builder_.register_shape(input) : Shape{},
                                 out_shapes[m], dtype_)
                  .bytes());
        }
        if (!location_.empty()) t->set_location(location_);
      }
      out.push_back(output(t, out_shapes[m]));
    }
    return out;
  }

  // Note [Transfers between GPUs]: between two CUDA placements of one hierarchy on disjoint
  // ranks (pipeline stages: every rank sends to one peer), `reg` (in GPU memory) moves to `rank`'s
  // GPU as a grouped send/recv of one block over the pair (sender, receiver), which on GPUs is one
  // ncclSend and one ncclRecv on the pair's NCCL communicator, instead of a copy to the host, a
  // SEND/RECV through UCX and a copy back. The receiver reads no register; the sender writes an
  // empty one. The sender is member 0: on a GPU communicator member 0 decides the order of its
  // collectives as their inputs become ready there (Note [Device collectives] in
  // actor/device_collectives.h), and a receiver, which reads nothing, would be ready at once and
  // could queue a gradient's transfer back ahead of the activation it depends on. So each
  // direction of a pair is a communicator of its own, made when the plan loads, so transfers that
  // gather onto fewer ranks (fetching a loss) or run among the ranks of one placement keep
  // SEND/RECV: a rank would join one communicator per peer. On the host and simulated backends
  // (Note [Device collectives]) the pair runs on the CPU engine.
  int64_t device_move(int64_t reg, int64_t rank) {
    const Shape shape = builder_.register_shape(reg);
    const int64_t from = builder_.register_rank(reg);
    std::vector<CollectiveBlocks> blocks(2);
    blocks[0].sends.push_back({1, whole_region(shape)});
    blocks[1].receives.push_back({0, whole_region(shape)});
    return collective_over(proto::CollectiveProto::SEND_RECV, {from, rank},
                           str_cat("the GPUs of ranks ", from, " to ", rank), /*on_gpu=*/true,
                           {reg, -1}, {Shape{0}, shape}, /*axis=*/-1, /*out_axis=*/0,
                           /*root=*/0, &blocks)[1];
  }

  // Steps other than SEND / RECV run on the boxing op's thread (Note [Gradient boxing on the
  // communication thread] in boxing.h).
  proto::TaskProto* task(int64_t rank, proto::TaskProto::Kind kind, const char* what,
                         int thread = -1) {
    if (thread < 0) thread = on_gpu_ ? 0 : thread_;
    // Tasks of ranks not compiled here are only numbered: skip building their text.
    const bool kept = builder_.kept(rank);
    proto::TaskProto* t = builder_.add_task(
        rank, kind, kept ? str_cat(name_, "/", what, counter_) : std::string(), thread);
    ++counter_;
    if (kept) set_logical_op(t, name_);
    return t;
  }
  int64_t output(proto::TaskProto* t, const Shape& shape) {
    return builder_.add_output(t, t->name(), shape, dtype_);
  }

  PlanBuilder& builder_;
  std::string name_;
  DataType dtype_;
  int thread_;
  bool on_gpu_ = false;  // set_device
  std::string location_;
  int64_t counter_ = 0;
  bool device_transfers_ = false;
};

/// A change of one hierarchy dimension on one placement (any kind but kGeneric).
std::vector<int64_t> expand_same_placement(const BoxingStep& step, const Shape& logical,
                                           const std::vector<int64_t>& in, StepEmitter& e);

/// Where each destination of a conversion finds its region among the sources (Note [Region
/// overlap] in oneflowlike/sbp.h): the sources grouped by the region they hold (their split
/// coordinates), then by their partial-sum coordinates (addends to sum); the parallel ids left
/// in a group are replicas, of which each destination takes one, its own rank's if it has one.
class SourcePieces {
 public:
  SourcePieces(const BoxingSpec& spec, const Shape& logical);
  struct Piece {
    Region overlap;                // of the logical tensor
    Region source;                 // the region its sources hold
    std::vector<int64_t> addends;  // in parallel ids, one per partial-sum coordinate
  };
  /// The pieces that make up `target`, the region of out parallel id `d` on `rank`.
  std::vector<Piece> covering(const Region& target, int64_t d, int64_t rank) const;

 private:
  struct Group {
    Region region;
    std::map<std::vector<int64_t>, std::vector<int64_t>> replicas_by_partial;
  };
  const BoxingSpec& spec_;
  std::map<std::vector<int64_t>, Group> groups_;  // by split coordinates
};

/// One rank's tensor to B on a placement holding that rank (BoxingKind::kBroadcast).
std::vector<int64_t> expand_broadcast(const BoxingSpec& spec, const Shape& logical,
                                      const std::vector<int64_t>& in, StepEmitter& e);

/// Two layouts of one set of ranks, no partial sums (BoxingKind::kSendRecv): one grouped
/// send/recv, or the generic decomposition when no piece crosses ranks.
std::vector<int64_t> expand_send_recv(const BoxingSpec& spec, const Shape& logical,
                                      const std::vector<int64_t>& in, StepEmitter& e);

/// Any placements and SBPs: each destination assembles its region from the sources'.
std::vector<int64_t> expand_generic(const BoxingSpec& spec, const Shape& logical,
                                    const std::vector<int64_t>& in, StepEmitter& e);

}  // namespace ofl::compiler::physical
