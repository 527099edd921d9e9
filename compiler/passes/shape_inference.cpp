// Shape and dtype inference on logical tensors. Graphs made by GraphBuilder already carry
// metas; jobs read from a file get them here, and every op is re-checked either way.

#include <map>

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

class ShapeInferencePass final : public Pass {
 public:
  std::string name() const override { return "shape_inference"; }
  std::vector<std::string> provides() const override { return {"shapes"}; }

  void run(Graph& graph, const CompileOptions&) override {
    std::map<int, int> writer_of;  // tensor -> the op that writes it in place
    for (int i : graph.topological_order()) {
      LogicalOp& op = graph.op(i);
      OFL_CHECK(op.output_sbp_hints.size() <= op.outputs.size(), op.describe(), " has ",
                op.output_sbp_hints.size(), " SBP hints for ", op.outputs.size(),
                " outputs. However, there must be at most one hint per output.");
      if (op.kind == OpKind::kCompute) {
        infer(graph, op);
        for (int k : mutated_inputs(*op.schema, op.params, static_cast<int>(op.inputs.size()))) {
          const int t = op.inputs.at(k);
          auto [it, fresh] = writer_of.emplace(t, i);
          OFL_CHECK(fresh, op.describe(), " and ", graph.op(it->second).describe(),
                    " both write tensor '", graph.tensor(t).name,
                    "' in place. However, a tensor may have one in-place writer per "
                    "iteration (one optimizer update per variable).");
        }
      }
      // Hints are checked against the shapes, which compute ops have only now.
      for (size_t k = 0; k < op.output_sbp_hints.size(); ++k) {
        if (op.output_sbp_hints[k].empty()) continue;
        const LogicalTensor& t = graph.tensor(op.outputs[k]);
        try {
          check_nd_sbp(t.meta.shape, op.output_sbp_hints[k], op.placement, t.name);
        } catch (const Error& e) {
          throw Error(e.code(), str_cat(e.what(), " ", op.describe()));
        }
      }
    }
  }

 private:
  static void infer(Graph& graph, const LogicalOp& op) {
    std::vector<TensorMeta> in;
    for (int t : op.inputs) in.push_back(graph.tensor(t).meta);
    std::vector<TensorMeta> out;
    try {
      out = op.schema->infer(op.params, in);
    } catch (const Error& e) {
      throw Error(e.code(), str_cat(e.what(), " ", op.describe()));
    }
    OFL_CHECK(out.size() == op.outputs.size(), op.describe(), " declares ", op.outputs.size(),
              " outputs but the op produces ", out.size(), ".");
    for (size_t k = 0; k < out.size(); ++k) graph.tensor(op.outputs[k]).meta = out[k];
  }
};

}  // namespace

std::unique_ptr<Pass> make_shape_inference_pass() { return std::make_unique<ShapeInferencePass>(); }

}  // namespace ofl::compiler
