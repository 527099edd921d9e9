#pragma once
// The reference executor: runs a whole PlanProto (every rank) sequentially in one thread, so
// that tests can check that a distributed plan computes exactly what one device computes. It is
// the slow, obviously right model that the actor runtime is tested against.
//
// Semantics (Note [Reference execution]):
//  - One tensor per register. Registers produced by VARIABLE tasks keep their value across
//    run() calls; every other register is allocated afresh when its producer acts. Memory blocks
//    and offsets from memory planning are ignored (each register gets its own buffer), so this
//    executor checks the plan's dataflow, not its memory reuse.
//  - Tasks act once per iteration in a fixed order: repeatedly the lowest (rank,
//    position-in-rank) task whose predecessors have acted, where the predecessors are the
//    producers of its input registers, its control_inputs, for a RECV the SEND with the same
//    transfer_id, and for a COLLECTIVE the producers of every member's input. The order does not
//    depend on data, so it is computed (and a deadlock reported) when the plan is loaded.
//  - A COLLECTIVE's first member to act computes every member's result from all the members'
//    inputs (Note [Collective tasks] in oneflowlike/collective.h), summing each chunk in
//    ring_sum_order, or the whole in recursive_doubling_adds' tree (the plan's algorithm), so
//    the sums are bit-identical to the runtime's; each member's act then writes its result.
//    Every member must be in the plan.
//  - INPUT/OUTPUT/VARIABLE pieces sit at their output_region of the logical tensor (empty: the
//    whole tensor). Fetched tensors are zeros of logical_output_shape plus every contributing
//    OUTPUT piece added at its region, which sums partial sums and places splits.
//
// Micro-batches (Note [Micro-batches] in plan.proto), m = plan.micro_batches (0 means 1):
//  - run() is one iteration in three phases: the once tasks that do not depend on any
//    per-micro-batch task; then, for k = 0..m-1, every per_micro_batch task; then the other once
//    tasks (those after an ACCUMULATE, a PACK or another per-micro-batch task). Each phase is
//    ordered by the rule above.
//  - Data enters the micro-batch part only through UNPACK (of an INPUT's whole batch) and REPEAT
//    (of a once value), and leaves it only through ACCUMULATE (sum over k) and PACK (row k =
//    micro-batch k); the constructor rejects any other crossing, naming both tasks. A control
//    input of a once task on a per-micro-batch task puts the once task after the micro-batches.
//  - An INPUT read by an UNPACK takes the whole batch, (m * s0, s1, ...) for a micro-batch of
//    logical shape (s0, s1, ...), and keeps its region of every micro-batch: (m * r0, r1, ...).

#include <map>
#include <string>
#include <vector>

#include "actor/plan_index.h"
#include "actor/plan_runner.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

class ReferenceExecutor : public PlanRunner {
 public:
  /// Validates the plan (PlanIndex: ids exist and are unique, every register has one producer
  /// that lists it, every SEND has one RECV with its transfer_id and shape, every task's
  /// registers have the shapes its kind needs, COMPUTE ops and kernels exist, and the tasks can
  /// all act, with no cycle). Raises ofl::Error naming the task or register otherwise.
  explicit ReferenceExecutor(proto::PlanProto plan);

  /// Backs every register that memory planning put in a block with that block at its offset, so
  /// registers that share memory really overwrite each other and a wrong memory plan gives wrong
  /// results (tests use it to check memory planning). Off by default.
  void use_planned_memory();

  /// Sets every VARIABLE register from its InitializerProto. Random initialisers draw each
  /// element from its logical position, so a split variable equals the one-device variable.
  void initialize_variables() override;

  /// One iteration: feeds `inputs` (logical tensors by the INPUT tasks' logical_op), runs every
  /// task once and returns the fetched logical tensors by the OUTPUT tasks' logical op
  /// (logical_op_of: the task's name where logical_op is empty).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) override;

  /// The logical value of a variable (by its VARIABLE tasks' logical_op), assembled from pieces.
  Tensor read_variable(const std::string& name) const override;
  /// Scatters a logical value into every piece of the variable.
  void write_variable(const std::string& name, const Tensor& value) override;

  /// Task names in the order run() executes them (for tests and debugging). With m > 1, a
  /// per-micro-batch task appears once per micro-batch k, as "name#k".
  std::vector<std::string> schedule() const;

  /// m: how many micro-batches one run() goes through (1 without micro-batching).
  int micro_batches() const { return index_.micro_batches(); }

 private:
  using TaskInfo = PlanIndex::TaskInfo;
  // One act of a task; micro_batch is k for per-micro-batch tasks and 0 for once tasks.
  struct Step {
    int task = 0;
    int micro_batch = 0;
  };

  void compute_schedule();
  void act(int task, int micro_batch, const std::map<std::string, Tensor>& inputs,
           std::vector<std::pair<int, Tensor>>* fetched);
  void run_compute(const TaskInfo& task, int index, int micro_batch);
  void run_collective(const TaskInfo& task);
  void place_in_blocks(const TaskInfo& task);
  // The register of a VARIABLE task.
  Tensor variable_piece(int task) const { return values_[index_.task(task).outputs[0]]; }

  PlanIndex index_;
  // run() calls so far: random ops draw fresh numbers each one.
  int64_t iteration_ = 0;
  bool planned_memory_ = false;
  // (rank, memory block id) -> its bytes (use_planned_memory)
  std::map<std::pair<int64_t, int64_t>, Tensor> blocks_;
  std::vector<Step> schedule_;  // in execution order
  std::vector<Tensor> values_;  // per register
  // Per task: what a SEND sent, until its RECV acts; a COLLECTIVE member's result, from when
  // the first member acts until it acts.
  std::vector<Tensor> in_flight_;
};

}  // namespace ofl::actor
