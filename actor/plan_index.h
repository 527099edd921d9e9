#pragma once
// PlanIndex: a PlanProto checked once and indexed for running. Both the reference executor and
// the actor runtime load plans through it, so both accept and reject exactly the same plans and
// report a bad one with the same message.
//
// Checks (each failure is an ofl::Error naming the task or register): first the plan contract
// the compiler checks too (oneflowlike/plan_contract.h: registers stay on their rank, transfers
// are matched, collectives run in one order on their members, and, unless turned off, no cycle
// runs through data, control inputs, transfers or collectives); then what running needs: ids are
// unique, every register has one producer that lists it and its consumers, every task's registers
// have the shapes and dtypes its kind needs, COMPUTE ops and cpu kernels exist, the pieces of one
// logical input / output / variable agree, data crosses between once-per-iteration and
// per-micro-batch tasks only where Note [Micro-batches] in plan.proto allows, a COLLECTIVE's
// registers have the shapes of its op (Note [Collective tasks] in oneflowlike/collective.h) and its
// members present agree on acting per micro-batch. Registers in a memory block lie inside it and
// have one slot.

#include <map>
#include <string>
#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

/// What every error of the plan checks starts with.
inline constexpr const char* kPlanTag = "[plan] ";

struct PlanIndexOptions {
  /// Reject plans with a cycle through data, control inputs, transfers or collectives. The
  /// watchdog tests turn it off to run such a plan.
  bool check_acyclic = true;
  /// Look up CPU kernels for every task, those placed on a GPU too: the reference executor and
  /// RuntimeOptions::simulate_cuda run a plan's GPU tasks on the host.
  bool cpu_kernels = false;
};

class PlanIndex {
 public:
  struct RegisterInfo {
    proto::RegisterProto proto;
    int64_t rank = 0;
    Shape shape;
    DataType dtype = DataType::kFloat32;
    int producer = -1;  // task index
  };
  struct TaskInfo {
    proto::TaskProto proto;
    std::vector<int> inputs;   // register indices, in op input order (may repeat)
    std::vector<int> outputs;  // register indices
    // INPUT / OUTPUT / VARIABLE, and COMPUTE with an output_region: the piece's place in the
    // logical tensor (the whole of it when output_region is empty).
    std::vector<Range> region;
    Shape logical_shape;
    // COMPUTE; an ACCUMULATE on a GPU has the add op's kernel and a SLICE that copies on a GPU
    // the slice op's, with no op (Note [Micro-batch tasks on a GPU] and Note [Local boxing steps
    // on a GPU] in compiler/physical/expansion.h).
    const OpSchema* op = nullptr;
    AnyParams params;
    KernelFn kernel = nullptr;
    bool cuda_kernel = false;  // kernel runs on the GPU of its tensors (Note [Current devices])
    // SLICE: the one region to copy; CONCAT: where each input goes.
    std::vector<std::vector<Range>> regions;
    int send = -1;  // RECV: the matching SEND task
    // COLLECTIVE: this task's position in collective().members, and the tasks of the members
    // by that position (this task at member_index; -1 for a member outside this plan, Note
    // [Partial plans]).
    int member_index = -1;
    std::vector<int> peers;
    // INPUT: read by an UNPACK, so it takes the whole batch of m micro-batches.
    bool micro_batched = false;
    // Once-per-iteration task that runs after the micro-batches (it depends on one).
    bool after_micro_batches = false;
  };
  // How a task depends on one of its predecessors.
  // kCollective: a COLLECTIVE task waits for the producer of another member's input (Note
  // [Collective order] in oneflowlike/plan_contract.h).
  enum class EdgeKind { kData, kControl, kTransfer, kCollective };
  struct Edge {
    int from = 0;  // task index
    EdgeKind kind = EdgeKind::kData;
    int reg = -1;  // kData: the register read; kCollective: the other member's input
  };
  using NameIndex = std::map<std::string, std::vector<int>>;  // logical name -> task indices

  /// Checks and indexes the plan; raises ofl::Error naming what is wrong.
  explicit PlanIndex(const proto::PlanProto& plan, PlanIndexOptions options = {});

  const std::vector<RegisterInfo>& registers() const { return registers_; }
  const std::vector<TaskInfo>& tasks() const { return tasks_; }
  const RegisterInfo& reg(int index) const { return registers_[index]; }
  const TaskInfo& task(int index) const { return tasks_[index]; }
  int num_tasks() const { return static_cast<int>(tasks_.size()); }
  int num_registers() const { return static_cast<int>(registers_.size()); }
  /// Task index of a task id; -1 when the plan has none.
  int task_index(int64_t id) const;
  /// Register index of a register id; -1 when the plan has none.
  int register_index(int64_t id) const;

  const NameIndex& inputs_by_name() const { return inputs_by_name_; }
  const NameIndex& outputs_by_name() const { return outputs_by_name_; }
  const NameIndex& variables_by_name() const { return variables_by_name_; }

  /// m: micro-batches per iteration (1 without micro-batching).
  int micro_batches() const { return micro_batches_; }
  /// plan.pipeline_depth (0 means 1).
  int pipeline_depth() const { return pipeline_depth_; }
  /// plan.world_size, or one more than the highest rank when the plan leaves it 0.
  int64_t world_size() const { return world_size_; }
  /// The ranks the plan holds, ascending. Note [Partial plans]: a plan may hold some ranks of
  /// the job only (what one process compiles and runs); a SEND or RECV whose peer is outside
  /// them is paired in the peer's process.
  const std::vector<int64_t>& ranks() const { return ranks_; }
  bool has_rank(int64_t rank) const;

  struct MemoryBlockInfo {
    int64_t bytes = 0;
    proto::PlanDevice device = proto::PLAN_DEVICE_CPU;
  };
  /// The memory blocks of the plan's ranks, by (rank, block id).
  const std::map<std::pair<int64_t, int64_t>, MemoryBlockInfo>& memory_blocks() const {
    return memory_blocks_;
  }

  bool per_micro(int task) const { return tasks_[task].proto.per_micro_batch(); }
  /// Every task's predecessors: producers of its inputs, control inputs, a RECV's SEND, and for
  /// a COLLECTIVE the producers of the other present members' inputs.
  const std::vector<std::vector<Edge>>& predecessors() const { return predecessors_; }

  /// The tasks of `member` in a sequential order: repeatedly the lowest (rank, position) one
  /// whose predecessors in `member` acted. Shorter than the members when they hold a cycle.
  std::vector<int> order_tasks(const std::vector<bool>& member) const;

  /// "task 'a' (id 3, rank 0, COMPUTE relu)", "task 'b' (id 5, rank 1, COLLECTIVE all_reduce)"
  std::string describe_task(int task) const;
  std::string describe_register(int reg) const;  // "register 'r' (id 3)"
  std::string describe_edge(int task, const Edge& edge) const;

 private:
  void index_plan(const proto::PlanProto& plan);
  void check_task(const proto::PlanProto& plan, int index);
  void link_transfers();
  void link_collectives();
  void check_pieces(const NameIndex& pieces, const char* kind) const;
  void compute_predecessors();
  void check_micro_batch_edges(const std::vector<int>& order);

  std::vector<RegisterInfo> registers_;
  std::vector<TaskInfo> tasks_;            // in (rank, position) order
  std::map<int64_t, int> register_index_;  // register id -> index
  std::map<int64_t, int> task_index_;      // task id -> index
  NameIndex inputs_by_name_;
  NameIndex outputs_by_name_;
  NameIndex variables_by_name_;
  std::vector<std::vector<Edge>> predecessors_;
  std::vector<int64_t> ranks_;
  std::map<std::pair<int64_t, int64_t>, MemoryBlockInfo> memory_blocks_;
  bool cpu_kernels_ = false;  // PlanIndexOptions::cpu_kernels
  int micro_batches_ = 1;
  int pipeline_depth_ = 1;
  int64_t world_size_ = 0;
};

}  // namespace ofl::actor
