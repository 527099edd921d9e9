// Common-subexpression elimination: two compute ops of the same type, params, inputs,
// placement and hints compute the same values, so consumers of the second read the first.
// Ops that write in place are never merged, nor ops recomputed by activation checkpointing
// (merging them back would keep the activations alive). (Random ops with equal seed and offset
// do produce equal values, so merging them is right.)

#include <map>
#include <set>
#include <tuple>

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

class CommonSubexpressionEliminationPass final : public Pass {
 public:
  std::string name() const override { return "common_subexpression_elimination"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }

  void run(Graph& graph, const CompileOptions&) override {
    std::vector<int> replacement(graph.num_tensors());
    for (int t = 0; t < graph.num_tensors(); ++t) replacement[t] = t;
    std::set<int> pinned(graph.fetches.begin(), graph.fetches.end());
    if (graph.train.loss >= 0) pinned.insert(graph.train.loss);
    for (const auto& [var, grad] : graph.variable_grads) pinned.insert(grad);
    std::vector<int> op_replacement(graph.num_ops());  // for control inputs
    for (int i = 0; i < graph.num_ops(); ++i) op_replacement[i] = i;
    std::multimap<size_t, int> seen;  // hash -> op index
    for (int i : graph.topological_order()) {
      LogicalOp& op = graph.op(i);
      for (int& t : op.inputs) t = replacement[t];
      for (int& c : op.control_inputs) c = op_replacement[c];
      // Recomputed ops (activation checkpointing) equal their originals on purpose.
      if (op.kind != OpKind::kCompute || writes_inputs(*op.schema) || op.recompute) continue;
      // A fetched tensor, the loss and gradients are named results: merging would rename them.
      bool pinned_output = false;
      for (int t : op.outputs) pinned_output = pinned_output || pinned.count(t) > 0;
      if (pinned_output) continue;
      const size_t h = hash(op);
      bool merged = false;
      auto [begin, end] = seen.equal_range(h);
      for (auto it = begin; it != end && !merged; ++it) {
        const LogicalOp& other = graph.op(it->second);
        if (!same(op, other)) continue;
        for (size_t k = 0; k < op.outputs.size(); ++k)
          replacement[op.outputs[k]] = other.outputs[k];
        op_replacement[i] = it->second;
        merged = true;
      }
      if (!merged) seen.emplace(h, i);
    }
    for (int& t : graph.fetches) t = replacement[t];
    if (graph.train.loss >= 0) graph.train.loss = replacement[graph.train.loss];
    for (auto& [var, grad] : graph.variable_grads) grad = replacement[grad];
  }

 private:
  static size_t hash(const LogicalOp& op) {
    size_t h = std::hash<std::string>()(op.schema->name()) ^ (op.params.hash() << 1);
    for (int t : op.inputs) h = h * 31 + static_cast<size_t>(t);
    return h;
  }
  static bool same(const LogicalOp& a, const LogicalOp& b) {
    return a.role == b.role && a.checkpoint_group == b.checkpoint_group && a.schema == b.schema &&
           a.params == b.params && a.inputs == b.inputs && a.placement == b.placement &&
           a.output_sbp_hints == b.output_sbp_hints && a.outputs.size() == b.outputs.size();
  }
};

}  // namespace

std::unique_ptr<Pass> make_common_subexpression_elimination_pass() {
  return std::make_unique<CommonSubexpressionEliminationPass>();
}

}  // namespace ofl::compiler
