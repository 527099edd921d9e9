// Mixed precision as a graph rewrite.
//
// Note [Mixed precision]
// ----------------------
// With TrainConfig::amp_dtype bfloat16 or float16 (nn.Graph's config.enable_amp), every forward
// op gets the input dtypes of the mixed-precision policy (amp_input_dtypes, Note [Mixed
// precision policy] in oneflowlike/op.h), the one eager autocast applies: matmul-class ops and
// attention read and write the low dtype, data movement and cheap elementwise ops follow their
// inputs, and the rest (softmax, norms, losses, reductions) cast up to float32. So the
// activations between a projection and the next one (split into heads, transposes, GELU) stay
// low, and the residual stream, where a float32 sum meets a low-precision branch, stays float32.
//  - Each cast is one op per (tensor, dtype, placement), however many ops read it: a weight used
//    by several matmuls is cast once per step. A cast of a variable depends on no micro-batch
//    input, so it acts once per step, not once per micro-batch (Note [Micro-batches] in
//    plan.proto): the plan's rates hoist it out of the accumulation window, with no rule here.
//  - A cast back to the dtype a cast came from reads the original tensor instead.
//  - Outputs are inferred again in topological order as their inputs change dtype. Fetches and
//    the loss keep the dtype they were traced with (cast back where they changed), and so do the
//    inputs of ops that are not forward compute ops.
// The pass runs before autograd, so the backward follows the casts: the matmuls' gradients are
// low-precision matmuls too, and the cast's gradient brings each weight's gradient back to
// float32 before it is reduced and applied (in float32, or bfloat16: Note [Gradient reduction
// dtype] in optimizer.cpp). Parameters stay float32 in checkpoints. A cast belongs to its
// input's activation-checkpointing group, so a checkpointed block stays one segment.

#include <map>
#include <set>
#include <tuple>

#include "compiler/passes/passes.h"
#include "oneflowlike/autocast.h"
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
    std::vector<DataType> traced;
    for (int t = 0; t < graph.num_tensors(); ++t) traced.push_back(graph.tensor(t).meta.dtype);
    // (tensor, dtype, placement) -> the cast's output; a cast's output -> the tensor it read.
    std::map<std::tuple<int, DataType, std::string>, int> casts;
    std::map<int, int> cast_from;
    // `tensor` in `dtype` for an op placed like `at` (by value: add_compute_op may move ops).
    auto in_dtype = [&](const LogicalOp at, int tensor, DataType dtype) {
      if (graph.tensor(tensor).meta.dtype == dtype) return tensor;
      auto from = cast_from.find(tensor);
      if (from != cast_from.end() && graph.tensor(from->second).meta.dtype == dtype) {
        return from->second;
      }
      const auto key = std::make_tuple(tensor, dtype, at.placement.to_string());
      auto it = casts.find(key);
      if (it != casts.end()) return it->second;
      LogicalOp op;
      op.name = graph.unique_name(str_cat(graph.tensor(tensor).name, ".", dtype_name(dtype)));
      op.schema = &cast;
      op.params = CastParams{dtype};
      op.inputs = {tensor};
      op.placement = at.placement;
      op.stage = at.stage;
      op.role = at.role;
      op.location = at.location;
      // In its input's activation-checkpointing group (Note [Activation checkpointing]): a cast
      // between two ops of a group is part of it, or the group's path would leave it and come
      // back. A cast of what no compute op made (a weight, an input) stays outside, and so
      // does one on another placement or pipeline stage than its input (a group stays on one).
      const int producer = graph.tensor(tensor).producer;
      if (producer >= 0) {
        const LogicalOp& made_by = graph.op(producer);
        if (made_by.kind == OpKind::kCompute && made_by.placement == at.placement &&
            made_by.stage == at.stage) {
          op.checkpoint_group = made_by.checkpoint_group;
        }
      }
      const int out = graph.add_compute_op(std::move(op)).at(0);
      cast_from[out] = tensor;
      casts.emplace(key, out);
      return out;
    };
    for (int i : graph.topological_order()) {
      const LogicalOp& op = graph.op(i);
      if (op.kind != OpKind::kCompute || op.inputs.empty()) continue;
      std::vector<DataType> now;
      for (int t : op.inputs) now.push_back(graph.tensor(t).meta.dtype);
      std::vector<DataType> wanted;
      if (op.role == OpRole::kForward) {
        wanted = amp_input_dtypes(*op.schema, now, low);
      } else {
        for (int t : op.inputs) wanted.push_back(traced.at(t));
      }
      // Inferred again when an input is cast here or arrives in another dtype than traced.
      bool changed_inputs = wanted != now;
      for (size_t k = 0; k < wanted.size(); ++k) {
        const int traced_input = graph.op(i).inputs[k];
        changed_inputs = changed_inputs || wanted[k] != traced.at(traced_input);
        graph.op(i).inputs[k] = in_dtype(graph.op(i), traced_input, wanted[k]);
      }
      if (!changed_inputs) continue;
      LogicalOp& changed = graph.op(i);
      std::vector<TensorMeta> in;
      for (int t : changed.inputs) in.push_back(graph.tensor(t).meta);
      const std::vector<TensorMeta> out = changed.schema->infer(changed.params, in);
      for (size_t k = 0; k < changed.outputs.size(); ++k) {
        graph.tensor(changed.outputs[k]).meta = out[k];
      }
    }
    // What the user fetches, and the loss, in the dtype they were traced with.
    auto as_traced = [&](int t) {
      if (graph.tensor(t).meta.dtype == traced.at(t)) return t;
      return in_dtype(graph.op(graph.tensor(t).producer), t, traced.at(t));
    };
    // A fetch's cast takes the fetched tensor's name: the caller looks its value up by the
    // name it traced (nn.Graph's outputs; a bf16 product without a bias was handed back as
    // None).
    std::set<int> renamed;
    for (int& f : graph.fetches) {
      const int cast = as_traced(f);
      if (cast != f && renamed.insert(f).second) graph.swap_tensor_names(f, cast);
      f = cast;
    }
    if (graph.train.loss >= 0) graph.train.loss = as_traced(graph.train.loss);
    for (auto& [t, grad] : graph.output_grads) t = as_traced(t);
  }
};

}  // namespace

std::unique_ptr<Pass> make_amp_pass() { return std::make_unique<AmpPass>(); }

}  // namespace ofl::compiler
