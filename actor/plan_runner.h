#pragma once
// PlanRunner: what the executors of a compiled plan have in common, so that one test (or tool)
// can train a model with either the sequential reference executor or the actor runtime and
// compare them. Both load the plan through PlanIndex and move data through actor/pieces.h, so
// they accept the same plans and report a bad feed with the same message.

#include <map>
#include <string>

#include "oneflowlike/tensor.h"

namespace ofl::actor {

class PlanRunner {
 public:
  virtual ~PlanRunner() = default;

  /// Sets every variable from its InitializerProto. Random initialisers draw each element from
  /// its logical position, so a split variable equals the one-device variable.
  virtual void initialize_variables() = 0;

  /// One iteration: feeds `inputs` (logical tensors by the INPUT tasks' logical_op), runs every
  /// task (per-micro-batch tasks once per micro-batch) and returns the fetched logical tensors by
  /// the OUTPUT tasks' logical op (logical_op_of: the task's name where logical_op is empty).
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) = 0;

  /// The logical value of a variable (by its VARIABLE tasks' logical_op), assembled from pieces.
  virtual Tensor read_variable(const std::string& name) const = 0;
  /// Scatters a logical value into every piece of the variable.
  virtual void write_variable(const std::string& name, const Tensor& value) = 0;
};

}  // namespace ofl::actor
