// Elementwise fusion: a chain of unary elementwise ops (each intermediate read only by the next
// op, on one placement, neither pinned nor hinted) becomes one fused_elementwise op, which reads
// and writes memory once instead of once per op. The fused op takes over the chain's last
// tensor (its index and name), so whatever reads, fetches or keeps that tensor by index or name
// gets it from the fused op; the chain's last op is left producing a fresh tensor nobody reads,
// and dead-code elimination drops the chain.

#include <set>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/fused.h"

namespace ofl::compiler {

namespace {

class FusionPass final : public Pass {
 public:
  std::string name() const override { return "elementwise_fusion"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }

  void run(Graph& graph, const CompileOptions&) override {
    const auto consumers = graph.consumers();
    const std::set<int> pinned = graph.pinned_tensors();  // must stay as they are
    std::vector<bool> fused(graph.num_ops(), false);
    const int num_ops = graph.num_ops();
    std::vector<int> op_replacement(num_ops);  // chain member -> its fused op (control inputs)
    for (int i = 0; i < num_ops; ++i) op_replacement[i] = i;
    for (int i : graph.topological_order()) {
      if (i >= num_ops || fused[i] || step(graph, i).empty()) continue;
      // Only start a chain at its head: an op whose input does not come from a chain member.
      std::vector<int> chain = {i};
      while (true) {
        const LogicalOp& last = graph.op(chain.back());
        const int out = last.outputs[0];
        if (pinned.count(out) || consumers[out].size() != 1 || last.has_output_sbp_hint()) break;
        const int next = consumers[out][0];
        const LogicalOp& n = graph.op(next);
        if (fused[next] || step(graph, next).empty() || n.placement != last.placement ||
            n.inputs.size() != 1) {
          break;
        }
        chain.push_back(next);
      }
      if (chain.size() < 2) continue;
      std::string steps;
      for (int op : chain) {
        steps.append(steps.empty() ? "" : ",").append(step(graph, op));
        fused[op] = true;
      }
      const LogicalOp& head = graph.op(chain.front());
      const LogicalOp& tail = graph.op(chain.back());
      LogicalOp op;
      op.name = graph.unique_name(tail.name + ".fused");
      op.schema = &OpRegistry::global().find("fused_elementwise");
      op.params = FusedElementwiseParams{steps};
      op.inputs = {head.inputs[0]};
      op.placement = tail.placement;
      op.output_sbp_hints = tail.output_sbp_hints;
      op.location = tail.location;
      op.stage = tail.stage;
      op.role = tail.role;
      op.checkpoint_group = tail.checkpoint_group;
      std::set<int> control;
      for (int member : chain) {
        op.recompute = op.recompute || graph.op(member).recompute;
        control.insert(graph.op(member).control_inputs.begin(),
                       graph.op(member).control_inputs.end());
      }
      for (int member : chain) control.erase(member);
      op.control_inputs.assign(control.begin(), control.end());
      const int tail_index = chain.back();
      const int tail_out = tail.outputs[0];
      const TensorMeta meta = graph.tensor(tail_out).meta;
      const int index = graph.add_op(std::move(op), 1);
      const int fresh = graph.op(index).outputs[0];
      // The fused op produces the chain's last tensor; the chain's last op the fresh one.
      graph.op(index).outputs[0] = tail_out;
      graph.tensor(tail_out).producer = index;
      graph.op(tail_index).outputs[0] = fresh;
      graph.tensor(fresh).producer = tail_index;
      graph.tensor(fresh).meta = meta;
      for (int member : chain) op_replacement[member] = index;
    }
    op_replacement.resize(graph.num_ops());
    for (int i = num_ops; i < graph.num_ops(); ++i) op_replacement[i] = i;
    for (int i = 0; i < graph.num_ops(); ++i) {
      std::set<int> control;
      for (int c : graph.op(i).control_inputs) {
        if (op_replacement[c] != i) control.insert(op_replacement[c]);
      }
      graph.op(i).control_inputs.assign(control.begin(), control.end());
    }
  }

 private:
  static std::string step(const Graph& graph, int i) {
    const LogicalOp& op = graph.op(i);
    if (op.kind != OpKind::kCompute || op.inputs.size() != 1 || op.outputs.size() != 1) return "";
    const DataType dtype = graph.tensor(op.outputs[0]).meta.dtype;
    if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) return "";
    return fused_step_text(op.schema->name(), op.params);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fusion_pass() { return std::make_unique<FusionPass>(); }

}  // namespace ofl::compiler
