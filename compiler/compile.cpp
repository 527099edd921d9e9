#include "compiler/compile.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "compiler/passes/passes.h"
#include "compiler/physical/expansion.h"
#include "compiler/physical/in_place_boxing.h"
#include "compiler/physical/memory_planning.h"
#include "oneflowlike/common/id_index.h"
#include "oneflowlike/common/parallel.h"
#include "oneflowlike/plan_contract.h"

namespace ofl::compiler {

PassManager default_pass_manager() {
  PassManager pm;
  pm.add(make_shape_inference_pass());
  pm.add(make_amp_pass());
  pm.add(make_attention_layout_pass());
  pm.add(make_autograd_pass());
  pm.add(make_cast_folding_pass());
  pm.add(make_checkpointing_pass());
  pm.add(make_zero_pass());
  pm.add(make_optimizer_pass());
  pm.add(make_common_subexpression_elimination_pass());
  pm.add(make_fusion_pass());
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
// register in the same iteration, or a reader would see the updated value; except a reader
// that itself waits for the writer (a control input), which is there to read the update (the
// gather of an updated ZeRO shard). Under micro-batching the readers include those reading it
// through a REPEAT, which may be a view of it (Note [Repeated views] in
// physical/in_place_boxing.h).
void order_in_place_writers(proto::PlanProto* plan) {
  parallel_each(plan->ranks_size(), [&](int64_t position) {
    proto::RankPlanProto& rank = *plan->mutable_ranks(static_cast<int>(position));
    std::unordered_map<int64_t, std::vector<int64_t>> readers;  // register -> tasks reading it
    std::unordered_map<int64_t, std::set<int64_t>> waits_for;   // task -> its control inputs
    bool repeats = false;
    for (const auto& task : rank.tasks()) {
      for (int64_t r : task.inputs()) readers[r].push_back(task.id());
      waits_for[task.id()].insert(task.control_inputs().begin(), task.control_inputs().end());
      repeats = repeats || task.kind() == proto::TaskProto::REPEAT;
    }
    if (repeats) {
      const physical::RepeatedReaders repeated(rank);
      for (const auto& task : rank.tasks()) {
        // A writer acting before the micro-batches (none today) keeps the REPEATs of what it
        // writes copies: waiting for their readers could close a cycle.
        if (!task.after_micro_batches()) continue;
        for (int index : task.mutated_inputs()) {
          const int64_t r = task.inputs(index);
          for (int64_t reader : repeated.of(r)) readers[r].push_back(reader);
        }
      }
    }
    for (auto& task : *rank.mutable_tasks()) {
      if (task.mutated_inputs().empty()) continue;
      std::set<int64_t> control(task.control_inputs().begin(), task.control_inputs().end());
      for (int index : task.mutated_inputs()) {
        for (int64_t reader : readers[task.inputs(index)]) {
          if (reader == task.id() || waits_for[reader].count(task.id())) continue;
          if (control.insert(reader).second) task.add_control_inputs(reader);
        }
      }
    }
  });
}

// Re-lists each rank's tasks so that every task follows its producers and control inputs on
// that rank (stable: otherwise plan order is kept). Memory planning takes plan order as the
// execution order of the compute chain, so it must respect the edges added above. With
// micro-batches each rank lists three phases (Note [Micro-batches] in plan.proto): the once
// tasks that need nothing from the micro-batches, the per-micro-batch tasks, and the once tasks
// after them; a task is "after" when some per-micro-batch task on any rank leads to it.
void sort_rank_tasks(proto::PlanProto* plan) {
  parallel_each(plan->ranks_size(), [&](int64_t position_of_rank) {
    proto::RankPlanProto& rank = *plan->mutable_ranks(static_cast<int>(position_of_rank));
    const int n = rank.tasks_size();
    std::vector<int64_t> task_ids;
    task_ids.reserve(n);
    for (const auto& t : rank.tasks()) task_ids.push_back(t.id());
    const IdIndex position(task_ids);  // task id -> index in the rank
    std::vector<int64_t> register_ids;
    std::vector<int> producer_of_register;  // its producer's index in the rank, or -1
    for (const auto& r : rank.registers()) {
      register_ids.push_back(r.id());
      producer_of_register.push_back(position.find(r.producer()));
    }
    const IdIndex register_position(register_ids);
    auto producer = [&](int64_t reg) {
      const int k = register_position.find(reg);
      return k < 0 ? -1 : producer_of_register[k];
    };
    std::vector<std::vector<int>> next(n);
    std::vector<int> pending(n, 0);
    std::vector<int> before;
    for (int i = 0; i < n; ++i) {
      before.clear();
      for (int64_t r : rank.tasks(i).inputs()) {
        const int p = producer(r);
        if (p >= 0) before.push_back(p);
      }
      for (int64_t c : rank.tasks(i).control_inputs()) {
        const int p = position.find(c);
        if (p >= 0) before.push_back(p);
      }
      std::sort(before.begin(), before.end());
      before.erase(std::unique(before.begin(), before.end()), before.end());
      for (int b : before) {
        next[b].push_back(i);
        ++pending[i];
      }
    }
    // Communication first: among ready tasks, the one fewest steps away from feeding the
    // communication thread (a gradient about to be reduced, data about to be sent) goes first,
    // so transfers and reductions start early and overlap the rest of the compute chain (Note
    // [Gradient boxing on the communication thread] in physical/boxing.h). Distance 0: a
    // compute-thread task whose output a communication-thread task reads.
    constexpr int kFar = std::numeric_limits<int>::max();
    std::vector<int> distance(n, kFar);
    std::vector<std::vector<int>> previous(n);
    for (int i = 0; i < n; ++i) {
      for (int j : next[i]) previous[j].push_back(i);
    }
    std::queue<int> frontier;
    for (int i = 0; i < n; ++i) {
      if (rank.tasks(i).thread() == 0) continue;
      for (int p : previous[i]) {
        if (rank.tasks(p).thread() == 0 && distance[p] == kFar) {
          distance[p] = 0;
          frontier.push(p);
        }
      }
    }
    while (!frontier.empty()) {
      const int i = frontier.front();
      frontier.pop();
      for (int p : previous[i]) {
        if (rank.tasks(p).thread() == 0 && distance[p] == kFar) {
          distance[p] = distance[i] + 1;
          frontier.push(p);
        }
      }
    }
    // Tasks marked schedule_early (and the communication-thread tasks feeding them) come
    // before everything else ready in their phase (Note [Pacing ZeRO-2 reductions]).
    for (int i = 0; i < n; ++i) {
      if (!rank.tasks(i).schedule_early()) continue;
      distance[i] = -1;
      for (int p : previous[i]) {
        if (rank.tasks(p).thread() != 0) distance[p] = -1;
      }
    }
    // Earliest phase, then nearest to communication, then lowest plan position (stable).
    auto key = [&](int i) {
      const proto::TaskProto& t = rank.tasks(i);
      const int phase = t.per_micro_batch() ? 1 : t.after_micro_batches() ? 2 : 0;
      return std::make_tuple(phase, distance[i], i);
    };
    auto later = [&](int a, int b) { return key(a) > key(b); };
    std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
    for (int i = 0; i < n; ++i) {
      if (pending[i] == 0) ready.push(i);
    }
    std::vector<int> order;
    order.reserve(n);
    while (!ready.empty()) {
      const int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int j : next[i]) {
        if (--pending[j] == 0) ready.push(j);
      }
    }
    // A cycle inside one rank is left for check_plan_contract to report with its task names.
    if (static_cast<int>(order.size()) != n) return;
    bool identity = true;
    for (int i = 0; i < n && identity; ++i) identity = order[i] == i;
    if (identity) return;
    // Permuted in place by swapping element pointers (no message is made or copied): slot k
    // takes task order[k]; where[i] is the slot task i sits in now.
    std::vector<int> where(n), at(n);  // at[k]: the task in slot k
    for (int i = 0; i < n; ++i) where[i] = at[i] = i;
    google::protobuf::RepeatedPtrField<proto::TaskProto>& list = *rank.mutable_tasks();
    for (int k = 0; k < n; ++k) {
      const int slot = where[order[k]];
      if (slot == k) continue;
      list.SwapElements(k, slot);
      where[at[k]] = slot;
      at[slot] = at[k];
      where[order[k]] = k;
      at[k] = order[k];
    }
  });
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
    // ACCUMULATE and PACK keep one running value per iteration: one slot.
    std::set<int64_t> per_micro_tasks;
    for (const auto& task : rank.tasks()) {
      if (task.per_micro_batch() && task.kind() != proto::TaskProto::ACCUMULATE &&
          task.kind() != proto::TaskProto::PACK) {
        per_micro_tasks.insert(task.id());
      }
    }
    for (auto& reg : *rank.mutable_registers()) {
      if (per_micro_tasks.count(reg.producer()) && !reg.persistent()) reg.set_register_num(depth);
    }
  }
}

// Note [Compiling per rank]: a process needs only its own ranks' parts. Expansion still walks
// every rank, numbering tasks, registers and transfers exactly as in the whole plan (so parts
// compiled by different processes fit together), but materialises only the kept ranks' tasks;
// task order, memory planning and the checks then see those alone.
void check_ranks(const Graph& graph, const std::vector<int64_t>& ranks) {
  const std::vector<int64_t> all = graph.all_ranks();
  OFL_CHECK(!all.empty(),
            "[compile] the job has no ops left to run: nothing is fetched, and no gradient or "
            "update needs an op (a gradient asked of values the outputs do not depend on?).");
  for (int64_t r : ranks) {
    OFL_CHECK(std::binary_search(all.begin(), all.end(), r), "[compile] rank ", r,
              " is not in the job: its ops are placed on ranks ", all.front(), "..", all.back(),
              ".");
  }
}

}  // namespace

proto::PlanProto compile_graph(Graph graph, const CompileOptions& options, Graph* logical) {
  run_logical_passes(graph, options);
  if (logical != nullptr) *logical = graph;
  std::set<int> stage_ids;
  for (int i = 0; i < graph.num_ops(); ++i) stage_ids.insert(graph.op(i).stage);
  const int stages = static_cast<int>(stage_ids.size());
  check_ranks(graph, options.ranks);
  proto::PlanProto plan = physical::expand_to_plan(graph, options.ranks);
  set_pipeline_depth(&plan, stages);
  order_in_place_writers(&plan);
  sort_rank_tasks(&plan);
  physical::mark_in_place_boxing(&plan);
  physical::plan_memory(&plan, options.memory_limit_bytes);
  check_plan_contract(plan);
  return plan;
}

Result<proto::PlanProto> compile(const proto::JobProto& job, const CompileOptions& options) {
  proto::PlanProto plan;
  Status status = capture_status([&] { plan = compile_graph(graph_from_job(job), options); });
  if (!status.ok()) return status;
  return plan;
}

}  // namespace ofl::compiler
