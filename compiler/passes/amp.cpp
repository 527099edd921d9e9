// Mixed precision as a graph rewrite.
//
// Note [Mixed precision]
// ----------------------
// With TrainConfig::amp_dtype bfloat16 or float16 (nn.Graph's config.enable_amp), every forward
// op marked TLowPrecisionUnderAmp (Note [Mixed precision policy] in oneflowlike/op.h: matmul
// and batch_matmul) runs in that dtype:
//  - each float32 input is cast down. One cast per (tensor, placement), however many such ops
//    read it: a weight used by several matmuls is cast once per step. A cast of a variable
//    depends on no micro-batch input, so it acts once per step, not once per micro-batch
//    (Note [Micro-batches] in plan.proto): the cast is hoisted out of the accumulation window
//    by the plan's rates, with no rule of its own here;
//  - each output is cast back to float32 for its consumers, so everything else (softmax, norms,
//    losses, reductions, elementwise ops) runs in float32, as do the parameters (float32 master
//    weights), their gradients and the optimizer state. An input that is such a cast-back output
//    is read in the low dtype directly (matmul after matmul casts nothing twice).
// The pass runs before autograd, so the backward follows the casts: the matmuls' gradients are
// low-precision matmuls too, and the cast's gradient brings each weight's gradient back to
// float32 before it is reduced and applied. Parameters stay float32 in checkpoints.
// Not done: low-precision kernels for the other ops (they would save the casts' memory traffic),
// a low-precision gradient reduction, and loss scaling for float16.

#include <map>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"

namespace ofl::compiler {

namespace {

class AmpPass final : public Pass {
 public:
  std::string name() const override { return "amp"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }
  std::vector<std::string> provides() const override { return {"amp"}; }

  void run(Graph& graph, const CompileOptions&) override {
    const DataType low = graph.train.amp_dtype;
    if (low == DataType::kFloat32) return;
    OFL_CHECK_TYPE(low == DataType::kBFloat16 || low == DataType::kFloat16,
                   "[amp] mixed precision runs in bfloat16 or float16. However, got ",
                   dtype_name(low), ".");
    const OpSchema& cast = OpRegistry::global().find("cast");
    const std::vector<std::vector<int>> consumers = graph.consumers();
    const int original_ops = graph.num_ops();
    std::map<std::pair<int, std::string>, int> cast_down;  // (tensor, placement) -> low tensor
    std::map<int, int> low_source;  // cast-back output -> the low-precision tensor it came from
    auto add_cast = [&](const LogicalOp& at, int tensor, DataType dtype, const std::string& why) {
      LogicalOp op;
      op.name = graph.unique_name(str_cat(graph.tensor(tensor).name, why));
      op.schema = &cast;
      op.params = CastParams{dtype};
      op.inputs = {tensor};
      op.placement = at.placement;
      op.stage = at.stage;
      op.role = at.role;
      op.location = at.location;
      return graph.add_compute_op(std::move(op)).at(0);
    };
    for (int i = 0; i < original_ops; ++i) {
      // By index throughout: add_cast appends ops, which may move graph.op(i) and its inputs.
      {
        const LogicalOp& op = graph.op(i);
        if (op.kind != OpKind::kCompute || op.role != OpRole::kForward) continue;
        const bool* marked = op.schema->get<TLowPrecisionUnderAmp>();
        if (marked == nullptr || !*marked) continue;
        bool any = false;
        for (int t : op.inputs) any = any || graph.tensor(t).meta.dtype == DataType::kFloat32;
        if (!any) continue;
      }
      for (size_t k = 0; k < graph.op(i).inputs.size(); ++k) {
        const int t = graph.op(i).inputs[k];
        if (graph.tensor(t).meta.dtype != DataType::kFloat32) continue;
        auto source = low_source.find(t);
        if (source != low_source.end()) {
          graph.op(i).inputs[k] = source->second;
          continue;
        }
        const auto key = std::make_pair(t, graph.op(i).placement.to_string());
        auto it = cast_down.find(key);
        if (it == cast_down.end()) {
          const LogicalOp at = graph.op(i);
          it = cast_down.emplace(key, add_cast(at, t, low, ".amp")).first;
        }
        graph.op(i).inputs[k] = it->second;
      }
      // The op's outputs in the low dtype, and a cast back to float32 for their readers.
      LogicalOp& now = graph.op(i);
      std::vector<TensorMeta> in;
      for (int t : now.inputs) in.push_back(graph.tensor(t).meta);
      const std::vector<TensorMeta> out = now.schema->infer(now.params, in);
      const std::vector<int> outputs = now.outputs;
      for (size_t k = 0; k < outputs.size(); ++k) {
        graph.tensor(outputs[k]).meta = out[k];
        if (out[k].dtype != low) continue;
        const LogicalOp at = graph.op(i);
        const int up = add_cast(at, outputs[k], DataType::kFloat32, ".float32");
        low_source[up] = outputs[k];
        for (int c : consumers[outputs[k]]) {
          for (int& t : graph.op(c).inputs) {
            if (t == outputs[k]) t = up;
          }
        }
        for (int& f : graph.fetches) {
          if (f == outputs[k]) f = up;
        }
        if (graph.train.loss == outputs[k]) graph.train.loss = up;
      }
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_amp_pass() { return std::make_unique<AmpPass>(); }

}  // namespace ofl::compiler
