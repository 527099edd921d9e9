#pragma once
// Physical expansion: the SBP-annotated, boxed logical graph becomes a PlanProto with one
// RankPlanProto per rank. Every op becomes one task per parallel id of its placement (boxing
// ops become the steps of boxing.h), and every task output becomes a register on the task's
// rank. Data crosses ranks only through SEND/RECV pairs, so each rank's part is complete.
//
//   input x (5, 4) S(0) on [0, 1, 2]  ->  rank 0: INPUT -> reg (2, 4)
//                                         rank 1: INPUT -> reg (2, 4)
//                                         rank 2: INPUT -> reg (1, 4)

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/graph.h"
#include "oneflowlike/proto/plan.pb.h"

namespace ofl::compiler::physical {

// Note [Devices in a plan]
// ------------------------
// A placement's device type says where its ops compute: COMPUTE tasks, the COPY of a view op
// and VARIABLE tasks (whose persistent registers the optimizer updates in place) run on a CUDA
// placement's GPU, and their output registers live in its memory, as do the micro-batch tasks
// that touch GPU data (Note [Micro-batch tasks on a GPU] below), collectives and the local
// boxing steps (Note [Local boxing steps on a GPU]). Everything else stays on the host: INPUT
// and OUTPUT (fed and fetched from the host) and the other boxing steps (SLICE, SEND, RECV, ADD,
// CONCAT, ZEROS between placements: data leaves a process through UCX from host memory). Where
// a task reads a register of the other device,
// the builder puts a COPY_H2D or COPY_D2H task between them, one per (register, device) however
// many tasks read it there. A copy acts at its producer's rate, except after ACCUMULATE and PACK
// (whose outputs are read once, after the micro-batches), where it acts once, after them.
//
// So a CPU stage feeding a GPU stage, a gradient reduced between GPUs and a fetched loss all go
// through these copies; within one GPU, data never leaves the device. Host boxing between GPUs
// is the first step: issue 16's collective tasks (NCCL) replace it on the device.
//
// Memory planning plans one block per (rank, device). The copies are compute-chain tasks, so
// chain order is execution order across the two memories too: the runtime runs a rank's CUDA
// tasks and copies on one stream, and a host task after a copy waits for the copy's work to be
// done (Note [Event-gated acts] in actor/act_stream.h).

// Note [Micro-batch tasks on a GPU]
// ---------------------------------
// Under gradient accumulation or pipelining (m micro-batches), the tasks that carry data into and
// out of the micro-batches run where that data is, so that nothing of the model's size crosses
// between the host and a GPU per micro-batch:
//   - REPEAT runs on its readers' device: a weight on a GPU is handed to each micro-batch
//     there (a view of it, Note [Repeated views] in in_place_boxing.h, or a device copy), and a
//     host value a GPU reads (an input fed once) crosses once per iteration, then repeats on
//     the GPU. A boxing op reads on the GPU only when its first step stays within the placement
//     (a collective, a local slice, B -> P); before other steps (host steps) the REPEAT stays
//     on the host, so a GPU value crosses once, not once per micro-batch;
//   - ACCUMULATE runs on its input's device: a GPU's weight gradients are summed there, and
//     cross (to a host reader) once, after the last micro-batch. Bool values stay on the host
//     (the sum of bools is a logical or, which has no GPU kernel). The sums then take GPU
//     memory for the iteration, as PyTorch's accumulated .grad tensors do (they took host
//     memory before);
//   - PACK runs on its input's device: a fetched per-micro-batch value (the loss) leaves the
//     GPU once, packed;
//   - UNPACK reads the fed batch, on the host: each micro-batch's rows cross on their own.
// Before, all four ran on the host: every weight left the GPU once and came back m times an
// iteration, and every gradient left it m times. On a GPU, a REPEAT that is no view,
// ACCUMULATE's first act and PACK are copies queued on the GPU's stream and ACCUMULATE's later
// acts the `add` op's CUDA kernel (actor/actor_kinds.cpp); without a GPU (simulated devices)
// the host's copies and sums.

// Note [Local boxing steps on a GPU]
// ----------------------------------
// Boxing within one CUDA placement that moves no data between ranks runs on the GPU: a local
// slice (B -> S, a SLICE: a view where its region is one contiguous run, else the slice op's
// CUDA kernel) and B -> P (a COPY on coordinate 0, a view, and ZEROS elsewhere, a memset on the
// GPU's stream). So does an ADD of pieces that are all on the GPU (partial sums received from
// GPU stages: the add op's CUDA kernel, input after input, as the host's sum_into adds), and
// the zero piece boxing between placements gives a rank of a CUDA placement that holds nothing
// of a partial sum. On
// the host they cost a copy of each piece to the host and of the result back, every time they
// act (every micro-batch for the loss's gradient under DP, and for an activation's gradient
// between TP stages).

// Note [Slices in a plan]
// -----------------------
// A `slice` op with unit steps on a host placement becomes a SLICE task, as boxing's slices are,
// instead of a COMPUTE task running the slice kernel: where its region is one contiguous run of
// its input (rows of a matrix, a range of a flat gradient bucket) the SLICE can then be a view
// (Note [Slice views] in in_place_boxing.h), and a gradient read back out of its bucket costs no
// copy. Elsewhere it copies the region as the kernel would. Likewise a `concat` op on a host
// placement whose pieces are contiguous runs of its output (a gradient bucket) becomes a CONCAT
// task, which may then be in place (Note [Concats in place]): under gradient accumulation the
// accumulators are the bucket's runs.

/// A plan under construction. It hands out task, register and transfer ids that are unique
/// across the plan and files each task and register under its rank. Register ids and task ids
/// are dense from 0, in creation order, so creation order is a valid sequential schedule.
class PlanBuilder {
 public:
  /// One RankPlanProto per entry of `ranks` (sorted, distinct); world_size = max rank + 1.
  /// With `kept` non-empty only those ranks' tasks and registers are materialised: the others
  /// are numbered exactly as in a whole plan (so ids agree between processes) but written to
  /// scratch messages and dropped (Note [Compiling per rank] in compile.cpp).
  explicit PlanBuilder(const std::vector<int64_t>& ranks, const std::vector<int64_t>& kept = {});
  PlanBuilder(const PlanBuilder&) = delete;
  PlanBuilder& operator=(const PlanBuilder&) = delete;

  /// Appends a task on `rank`. The pointer stays valid as long as the builder holds the plan.
  proto::TaskProto* add_task(int64_t rank, proto::TaskProto::Kind kind, const std::string& name,
                             int thread = 0);
  /// A new register written by `task` on the task's rank, appended to the task's outputs.
  int64_t add_output(proto::TaskProto* task, const std::string& name, const Shape& shape,
                     DataType dtype, bool persistent = false);
  /// `task` reads `register_id`: appended to the task's inputs and the register's consumers.
  /// Both must be on the same rank (data moves between ranks only by SEND/RECV). A register of
  /// another device than the task's is read through a copy (Note [Devices in a plan]).
  void add_input(proto::TaskProto* task, int64_t register_id);
  int64_t new_transfer_id() { return next_transfer_id_++; }
  /// A collective's id and its sequence number on the communicator `members` (Note [Collective
  /// tasks] in oneflowlike/collective.h); raises past kMaxCollectiveId.
  std::pair<int64_t, int64_t> new_collective(const std::vector<int64_t>& members, int64_t ids = 1);
  /// The collective id of the control messages of the GPU communicator `members` (Note [Device
  /// collectives] in actor/device_collectives.h): taken at its first GPU collective.
  int64_t control_id(const std::vector<int64_t>& members);
  /// Tasks added from now on act once per micro-batch (Note [Micro-batches] in plan.proto).
  void set_per_micro_batch(bool per_micro_batch) { per_micro_batch_ = per_micro_batch; }
  /// Tasks added from now on act once, after the micro-batches (when not per micro-batch).
  void set_after_micro_batches(bool after) { after_micro_batches_ = after; }
  /// Tasks added from now on run on `device` (Note [Devices in a plan]); CPU until set.
  void set_device(proto::PlanDevice device) { device_ = device; }
  proto::PlanDevice device() const { return device_; }

  const proto::TaskProto& task(int64_t id) const;
  proto::TaskProto& mutable_task(int64_t id);
  /// Register `id`'s name; empty on ranks this build leaves out.
  std::string register_name(int64_t id) const;
  int64_t register_rank(int64_t id) const;
  Shape register_shape(int64_t id) const;
  DataType register_dtype(int64_t id) const;
  proto::PlanDevice register_device(int64_t id) const { return register_devices_.at(id); }
  int64_t num_tasks() const { return static_cast<int64_t>(tasks_.size()); }
  int64_t task_rank(int64_t id) const { return task_ranks_.at(id); }
  int64_t num_registers() const { return static_cast<int64_t>(registers_.size()); }
  /// Whether `rank`'s tasks and registers go into the plan.
  bool kept(int64_t rank) const { return kept_.empty() || kept_.count(rank) > 0; }

  proto::PlanProto& plan() { return plan_; }
  /// Hands the plan over; the builder must not be used afterwards.
  proto::PlanProto release();

 private:
  proto::RankPlanProto& rank_plan(int64_t rank);
  proto::TaskProto* scratch_task();
  // `register_id` on `device`: itself, or the output of its (one) copy there.
  int64_t on_device(int64_t register_id, proto::PlanDevice device);

  proto::PlanProto plan_;
  std::map<int64_t, proto::RankPlanProto*> rank_plans_;
  // Protobuf repeated message fields keep their elements in place, so these stay valid. Tasks
  // and registers of ranks not kept are scratch (tasks) or absent (registers: nullptr).
  std::vector<proto::TaskProto*> tasks_;             // by task id
  std::vector<int64_t> task_ranks_;                  // by task id
  std::vector<proto::RegisterProto*> registers_;     // by register id
  std::vector<int64_t> register_ranks_;              // by register id
  std::vector<Shape> register_shapes_;               // by register id
  std::vector<DataType> register_dtypes_;            // by register id
  std::vector<proto::PlanDevice> task_devices_;      // by task id
  std::vector<proto::PlanDevice> register_devices_;  // by register id
  // By register id: the rate a copy of it acts at, (per micro-batch, after the micro-batches).
  std::vector<std::pair<bool, bool>> copy_rates_;
  std::map<std::pair<int64_t, proto::PlanDevice>, int64_t> copies_;  // (register, device) -> copy
  std::set<int64_t> kept_;
  // A task of a dropped rank is filled in by the caller and discarded; a small ring of them
  // keeps a pointer valid while the caller builds the next few tasks.
  std::array<proto::TaskProto, 16> scratch_tasks_;
  size_t next_scratch_ = 0;
  int64_t next_transfer_id_ = 0;
  int64_t next_collective_id_ = 0;
  int64_t new_collective_id_block(int64_t ids);  // the first of `ids` fresh collective ids
  std::map<std::vector<int64_t>, int64_t> collective_sequences_;  // by communicator
  std::map<std::vector<int64_t>, int64_t> control_ids_;           // by GPU communicator
  bool per_micro_batch_ = false;
  bool after_micro_batches_ = false;
  proto::PlanDevice device_ = proto::PLAN_DEVICE_CPU;
};

/// Where the ops of `placement` compute: its GPU for a CUDA placement, else the host.
proto::PlanDevice plan_device(const Placement& placement);

/// Expands `graph` (after boxing insertion: every op has its signature, every compute op's
/// inputs come from producers on the same placement with the SBP it consumes) into a plan.
/// Memory blocks are left to memory planning (memory_block = -1).
/// The plan of `graph`; with `kept` non-empty, only those ranks' parts (identical to theirs in
/// the whole plan).
proto::PlanProto expand_to_plan(const Graph& graph, const std::vector<int64_t>& kept = {});

}  // namespace ofl::compiler::physical
