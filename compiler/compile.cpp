#include "compiler/compile.h"

#include <algorithm>
#include <set>

#include "compiler/passes/passes.h"
#include "compiler/physical/expansion.h"
#include "compiler/physical/memory_planning.h"

namespace ofl::compiler {

PassManager default_pass_manager() {
  PassManager pm;
  pm.add(make_shape_inference_pass());
  pm.add(make_autograd_pass());
  pm.add(make_optimizer_pass());
  pm.add(make_common_subexpression_elimination_pass());
  pm.add(make_dead_code_elimination_pass());
  pm.add(make_sbp_inference_pass());
  pm.add(make_boxing_insertion_pass());
  return pm;
}

void run_logical_passes(Graph& graph, const CompileOptions& options) {
  default_pass_manager().run(graph, options);
}

namespace {

// Note [In-place updates wait for readers]: an op that writes a register in place (an
// optimizer update of a variable) must act after every other task of its rank that reads that
// register in the same iteration, or a reader would see the updated value.
void order_in_place_writers(proto::PlanProto* plan) {
  for (auto& rank : *plan->mutable_ranks()) {
    std::map<int64_t, std::vector<int64_t>> readers;  // register -> tasks reading it
    for (const auto& task : rank.tasks()) {
      for (int64_t r : task.inputs()) readers[r].push_back(task.id());
    }
    for (auto& task : *rank.mutable_tasks()) {
      std::set<int64_t> control(task.control_inputs().begin(), task.control_inputs().end());
      for (int index : task.mutated_inputs()) {
        for (int64_t reader : readers[task.inputs(index)]) {
          if (reader != task.id() && control.insert(reader).second) task.add_control_inputs(reader);
        }
      }
    }
  }
}

}  // namespace

proto::PlanProto compile_graph(Graph graph, const CompileOptions& options) {
  run_logical_passes(graph, options);
  proto::PlanProto plan = physical::expand_to_plan(graph);
  order_in_place_writers(&plan);
  physical::plan_memory(&plan, options.memory_limit_bytes);
  return plan;
}

Result<proto::PlanProto> compile(const proto::JobProto& job, const CompileOptions& options) {
  proto::PlanProto plan;
  Status status = capture_status([&] { plan = compile_graph(graph_from_job(job), options); });
  if (!status.ok()) return status;
  return plan;
}

}  // namespace ofl::compiler
