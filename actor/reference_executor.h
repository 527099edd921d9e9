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
//    producers of its input registers, its control_inputs, and for a RECV the SEND with the same
//    transfer_id. The order does not depend on data, so it is computed (and a deadlock reported)
//    when the plan is loaded.
//  - INPUT/OUTPUT/VARIABLE pieces sit at their output_region of the logical tensor (empty: the
//    whole tensor). Fetched tensors are zeros of logical_output_shape plus every contributing
//    OUTPUT piece added at its region, which sums partial sums and places splits.

#include <map>
#include <string>
#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/proto/plan.pb.h"
#include "oneflowlike/tensor.h"

namespace ofl::actor {

class ReferenceExecutor {
 public:
  /// Validates the plan: ids exist and are unique, every register has one producer that lists
  /// it, every SEND has one RECV with its transfer_id and shape, every task's registers have the
  /// shapes its kind needs, COMPUTE ops and kernels exist, and the tasks can all act (no cycle).
  /// Raises ofl::Error naming the task or register otherwise.
  explicit ReferenceExecutor(proto::PlanProto plan);

  /// Sets every VARIABLE register from its InitializerProto. Random initialisers draw each
  /// element from its logical position, so a split variable equals the one-device variable.
  void initialize_variables();

  /// One iteration: feeds `inputs` (logical tensors by the INPUT tasks' logical_op), runs every
  /// task once and returns the fetched logical tensors by the OUTPUT tasks' logical_op (or, when
  /// that is empty, by the name of the register the OUTPUT consumes).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  /// The logical value of a variable (by its VARIABLE tasks' logical_op), assembled from pieces.
  Tensor read_variable(const std::string& name) const;
  /// Scatters a logical value into every piece of the variable.
  void write_variable(const std::string& name, const Tensor& value);

  /// Task names in the order run() executes them (for tests and debugging).
  std::vector<std::string> schedule() const;

 private:
  struct RegisterInfo {
    proto::RegisterProto proto;
    int64_t rank = 0;
    Shape shape;
    DataType dtype = DataType::kFloat32;
    int producer = -1;  // task index
  };
  struct TaskInfo {
    proto::TaskProto proto;
    std::vector<int> inputs;   // register indices
    std::vector<int> outputs;  // register indices
    // INPUT / OUTPUT / VARIABLE, and COMPUTE with an output_region: the piece's place in the
    // logical tensor (the whole of it when output_region is empty).
    std::vector<Range> region;
    Shape logical_shape;
    // COMPUTE
    const OpSchema* op = nullptr;
    AnyParams params;
    KernelFn kernel = nullptr;
    // SLICE: the one region to copy; CONCAT: where each input goes.
    std::vector<std::vector<Range>> regions;
    int send = -1;  // RECV: the matching SEND task
  };
  using NameIndex = std::map<std::string, std::vector<int>>;  // name -> task indices

  void index_plan(const proto::PlanProto& plan);
  void check_task(int index);
  void check_transfers();
  void check_pieces(const NameIndex& pieces, const char* kind) const;
  void compute_schedule();
  std::string describe_task(int task) const;
  std::string describe_register(int reg) const;
  std::string output_name(const TaskInfo& task) const;
  void act(int task, const std::map<std::string, Tensor>& inputs,
           std::vector<std::pair<int, Tensor>>* fetched);
  void run_compute(const TaskInfo& task);

  std::vector<RegisterInfo> registers_;
  std::vector<TaskInfo> tasks_;            // in (rank, position) order
  std::map<int64_t, int> register_index_;  // register id -> index
  std::map<int64_t, int> task_index_;      // task id -> index
  NameIndex inputs_by_name_;
  NameIndex outputs_by_name_;
  NameIndex variables_by_name_;
  std::vector<int> schedule_;      // task indices in execution order
  std::vector<Tensor> values_;     // per register
  std::vector<Tensor> in_flight_;  // per task: what a SEND sent, until its RECV acts
};

}  // namespace ofl::actor
