// Boxing insertion: wherever a compute op needs an input in another (placement, SBP) than its
// producer gives, a boxing op converts it. One boxing op serves every consumer that needs the
// same conversion of the same tensor, with one exception:
//
// Note [ZeRO-3 gathers twice]: under ZeRO stage 3 a sharded parameter is gathered for its
// forward readers and again for its backward readers, so the gathered copy is released after
// its last forward reader instead of living through the whole backward. Each gather waits (a
// control input) for the producer of its first reader's other input (the activation, or the
// incoming gradient), which places it next to that reader in the plan's order instead of at
// the start, where memory planning sees its short lifetime.

#include <map>
#include <tuple>

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

class BoxingInsertionPass final : public Pass {
 public:
  std::string name() const override { return "boxing_insertion"; }
  std::vector<std::string> needs() const override { return {"sbp"}; }
  std::vector<std::string> provides() const override { return {"boxing"}; }

  void run(Graph& graph, const CompileOptions&) override {
    // (tensor, placement text, sbp text, backward regather) -> the boxed tensor
    std::map<std::tuple<int, std::string, std::string, bool>, int> boxed;
    const int num_ops = graph.num_ops();
    for (int i = 0; i < num_ops; ++i) {
      if (graph.op(i).kind != OpKind::kCompute) continue;
      for (size_t k = 0; k < graph.op(i).inputs.size(); ++k) {
        const int t = graph.op(i).inputs[k];
        const Placement to_placement = graph.op(i).placement;  // copies: insert() grows the graph
        const NdSbp to = graph.op(i).signature.inputs[k];
        const LogicalOp& producer = graph.op(graph.tensor(t).producer);
        if (producer.placement == to_placement && graph.tensor(t).sbp == to) continue;
        // Read now: insert() below grows the graph's ops, which moves `producer`.
        const bool from_variable = producer.kind == OpKind::kVariable;
        const bool regather =
            graph.train.zero_stage >= 3 && from_variable && graph.op(i).role == OpRole::kBackward;
        const auto key =
            std::make_tuple(t, to_placement.to_string(), nd_sbp_to_string(to), regather);
        auto it = boxed.find(key);
        if (it == boxed.end()) {
          const int out = insert(graph, t, to_placement, to);
          // An in-place writer's control inputs hold for what feeds it too (Note [ZeRO stages
          // 1 and 2]: the gather of an updated shard waits for the update).
          if (writes_inputs(*graph.op(i).schema)) {
            const std::vector<int> control = graph.op(i).control_inputs;  // a copy
            for (int c : control) graph.op(graph.tensor(out).producer).control_inputs.push_back(c);
          }
          if (graph.train.zero_stage >= 3 && from_variable) {
            wait_for_reader_input(graph, graph.tensor(out).producer, i, t);
          }
          it = boxed.emplace(key, out).first;
        }
        graph.op(i).inputs[k] = it->second;
      }
    }
  }

 private:
  // Note [ZeRO-3 gathers twice]: the gather `boxing` of parameter tensor `t` waits for the
  // producer of another compute-made input of its first reader `reader`.
  static void wait_for_reader_input(Graph& graph, int boxing, int reader, int t) {
    for (int input : graph.op(reader).inputs) {
      if (input == t) continue;
      const int producer = graph.tensor(input).producer;
      if (graph.op(producer).kind == OpKind::kCompute) {
        graph.op(boxing).control_inputs.push_back(producer);
        return;
      }
    }
  }

  static int insert(Graph& graph, int t, const Placement& to_placement, const NdSbp& to) {
    const LogicalTensor in = graph.tensor(t);  // copies: add_op grows the graph
    const LogicalOp& producer = graph.op(in.producer);
    LogicalOp op;
    op.kind = OpKind::kBoxing;
    op.role = OpRole::kBoxing;
    op.name = graph.unique_name(str_cat(in.name, ".boxing"));
    op.inputs = {t};
    op.placement = to_placement;
    op.stage = producer.stage;
    op.location = producer.location;
    op.boxing = BoxingSpec{producer.placement, in.sbp, to_placement, to};
    op.signature = NdSbpSignature{{in.sbp}, {to}};
    const TensorMeta meta = in.meta;
    const int index = graph.add_op(
        std::move(op), 1, {graph.unique_name(str_cat(in.name, "@", nd_sbp_to_string(to)))});
    const int out = graph.op(index).outputs[0];
    graph.tensor(out).meta = meta;
    graph.tensor(out).sbp = to;
    return out;
  }
};

}  // namespace

std::unique_ptr<Pass> make_boxing_insertion_pass() {
  return std::make_unique<BoxingInsertionPass>();
}

}  // namespace ofl::compiler
