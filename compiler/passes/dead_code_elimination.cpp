// Dead-code elimination: keeps the ops that fetches, the loss and in-place updates depend on
// (and every variable, which is state whether read or not), and rebuilds the graph without the
// rest. Indices change, so the graph's tensor references (fetches, loss, gradients) and the ops'
// control inputs are mapped.

#include <algorithm>
#include <functional>

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

class DeadCodeEliminationPass final : public Pass {
 public:
  std::string name() const override { return "dead_code_elimination"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }
  // Cast folding and fusion leave the ops they replaced for it to drop.
  bool skippable() const override { return false; }

  void run(Graph& graph, const CompileOptions&) override {
    std::vector<bool> live(graph.num_ops(), false);
    std::vector<int> stack;
    auto mark = [&](int op) {
      if (op >= 0 && !live[op]) {
        live[op] = true;
        stack.push_back(op);
      }
    };
    for (int t : graph.fetches) mark(graph.tensor(t).producer);
    if (graph.train.loss >= 0) mark(graph.tensor(graph.train.loss).producer);
    for (int i = 0; i < graph.num_ops(); ++i) {
      const LogicalOp& op = graph.op(i);
      if (op.kind == OpKind::kVariable) mark(i);
      if (op.kind == OpKind::kCompute && writes_inputs(*op.schema)) mark(i);
    }
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      for (int t : graph.op(i).inputs) mark(graph.tensor(t).producer);
    }
    if (std::all_of(live.begin(), live.end(), [](bool b) { return b; })) return;

    Graph out;
    out.name = graph.name;
    out.train = graph.train;
    std::vector<int> tensor_map(graph.num_tensors(), -1);
    std::vector<int> op_map(graph.num_ops(), -1);
    for (int i : graph.topological_order()) {
      if (!live[i]) continue;
      LogicalOp op = graph.op(i);
      for (int& t : op.inputs) t = tensor_map[t];
      // Control inputs come first in the topological order; an edge from a dead op is dropped.
      std::vector<int> control;
      for (int c : op.control_inputs) {
        if (op_map[c] >= 0) control.push_back(op_map[c]);
      }
      op.control_inputs = std::move(control);
      std::vector<std::string> names;
      for (int t : graph.op(i).outputs) names.push_back(graph.tensor(t).name);
      const int index = out.add_op(std::move(op), static_cast<int>(names.size()), names);
      op_map[i] = index;
      for (size_t k = 0; k < names.size(); ++k) {
        const int old_t = graph.op(i).outputs[k];
        const int new_t = out.op(index).outputs[k];
        tensor_map[old_t] = new_t;
        out.tensor(new_t).meta = graph.tensor(old_t).meta;
        out.tensor(new_t).sbp = graph.tensor(old_t).sbp;
      }
    }
    for (int t : graph.fetches) out.fetches.push_back(tensor_map[t]);
    if (graph.train.loss >= 0) out.train.loss = tensor_map[graph.train.loss];
    out.input_grad_fetches = graph.input_grad_fetches;  // positions in fetches, kept in order
    // Note [Saved forward values] in autograd.cpp: by name, which the rebuild keeps.
    out.given_values = graph.given_values;
    out.backward_reads = graph.backward_reads;
    for (const auto& [var, grad] : graph.variable_grads) {
      if (op_map[var] >= 0 && tensor_map[grad] >= 0)
        out.variable_grads[op_map[var]] = tensor_map[grad];
    }
    graph = std::move(out);
  }
};

}  // namespace

std::unique_ptr<Pass> make_dead_code_elimination_pass() {
  return std::make_unique<DeadCodeEliminationPass>();
}

}  // namespace ofl::compiler
