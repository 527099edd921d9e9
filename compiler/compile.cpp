#include "compiler/compile.h"

#include <algorithm>
#include <set>

#include "compiler/passes/passes.h"
#include "compiler/physical/expansion.h"
#include "compiler/physical/memory_planning.h"
#include "compiler/physical/plan_checks.h"

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

// Re-lists each rank's tasks so that every task follows its producers and control inputs on
// that rank (stable: otherwise plan order is kept). Memory planning takes plan order as the
// execution order of the compute chain, so it must respect the edges added above.
void sort_rank_tasks(proto::PlanProto* plan) {
  for (auto& rank : *plan->mutable_ranks()) {
    const int n = rank.tasks_size();
    std::map<int64_t, int> position;
    for (int i = 0; i < n; ++i) position[rank.tasks(i).id()] = i;
    std::map<int64_t, int64_t> producer;  // register -> task
    for (const auto& r : rank.registers()) producer[r.id()] = r.producer();
    std::vector<std::vector<int>> next(n);
    std::vector<int> pending(n, 0);
    for (int i = 0; i < n; ++i) {
      std::set<int> before;
      for (int64_t r : rank.tasks(i).inputs()) {
        auto it = producer.find(r);
        if (it != producer.end() && position.count(it->second)) before.insert(position[it->second]);
      }
      for (int64_t c : rank.tasks(i).control_inputs()) {
        if (position.count(c)) before.insert(position[c]);
      }
      for (int b : before) {
        next[b].push_back(i);
        ++pending[i];
      }
    }
    std::set<int> ready;
    for (int i = 0; i < n; ++i) {
      if (pending[i] == 0) ready.insert(i);
    }
    std::vector<int> order;
    while (!ready.empty()) {
      const int i = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(i);
      for (int j : next[i]) {
        if (--pending[j] == 0) ready.insert(j);
      }
    }
    // A cycle inside one rank is left for check_plan to report with its task names.
    if (static_cast<int>(order.size()) != n) continue;
    google::protobuf::RepeatedPtrField<proto::TaskProto> sorted;
    for (int i : order) *sorted.Add() = rank.tasks(i);
    rank.mutable_tasks()->Swap(&sorted);
  }
}

// Note [Pipeline register counts]: with p pipeline stages and m > 1 micro-batches, a stage
// keeps working on later micro-batches while earlier ones are still in the stages after it. A
// register written once per micro-batch therefore gets p slots (the most micro-batches that can
// be in flight between a stage's forward and its backward under a 1F1B-like order, and enough
// for GPipe-like overlap of neighbouring stages); the rest keep one. The depth is stated in
// PlanProto.pipeline_depth.
void set_pipeline_depth(proto::PlanProto* plan, int stages) {
  const int depth = plan->micro_batches() > 1 ? std::max(1, stages) : 1;
  plan->set_pipeline_depth(depth);
  if (depth == 1) return;
  for (auto& rank : *plan->mutable_ranks()) {
    std::set<int64_t> per_micro_tasks;
    for (const auto& task : rank.tasks()) {
      if (task.per_micro_batch()) per_micro_tasks.insert(task.id());
    }
    for (auto& reg : *rank.mutable_registers()) {
      if (per_micro_tasks.count(reg.producer()) && !reg.persistent()) reg.set_register_num(depth);
    }
  }
}

}  // namespace

proto::PlanProto compile_graph(Graph graph, const CompileOptions& options) {
  run_logical_passes(graph, options);
  int stages = 1;
  for (int i = 0; i < graph.num_ops(); ++i) stages = std::max(stages, graph.op(i).stage + 1);
  proto::PlanProto plan = physical::expand_to_plan(graph);
  set_pipeline_depth(&plan, stages);
  order_in_place_writers(&plan);
  sort_rank_tasks(&plan);
  physical::plan_memory(&plan, options.memory_limit_bytes);
  physical::check_plan(plan);
  return plan;
}

Result<proto::PlanProto> compile(const proto::JobProto& job, const CompileOptions& options) {
  proto::PlanProto plan;
  Status status = capture_status([&] { plan = compile_graph(graph_from_job(job), options); });
  if (!status.ok()) return status;
  return plan;
}

}  // namespace ofl::compiler
