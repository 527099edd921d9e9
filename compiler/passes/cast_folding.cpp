// Casts folded into the products before them.
//
// Note [Casts folded into products]
// ---------------------------------
// Under mixed precision (Note [Mixed precision] in amp.cpp) many float32 values are made by a
// 16-bit product and a cast to float32 right after it: the projections that end a residual
// branch, and in the backward every weight's gradient (the weight cast's gradient brings it back
// to the float32 parameter) and the gradient of every norm's input. The product already sums in
// float32, so rounding its result to 16 bits only to widen it again loses bits and costs a pass
// over the tensor and, on a GPU, a kernel launch and an act. In the GPT step in bfloat16 these
// are 50 of the 103 casts.
//
// Under mixed precision only (TrainConfig::amp_dtype; graph.config.enable_amp): elsewhere a
// cast after a product is the user's own, or an eager op's on global tensors, which must give
// what the same op on local tensors gives, rounding included.
//
// This pass makes each such cast the product itself with MatmulParams::float32_out, whose
// kernels write the float32 sums as they are (oneDNN's and cuBLASLt's products with a float32
// destination), when the cast is the product's only reader and the two ops run alike (placement,
// pipeline stage, role, recomputation, and in the forward the checkpoint group; a backward fold
// keeps the product's group, whose recomputed activations it reads):
//  - the cast op becomes the product: its output tensor stays, so its readers, fetches and
//    variable gradients need no rewriting, and the product takes the name and source line the
//    user would look for;
//  - the old product, read by nobody now, goes with dead-code elimination; control inputs that
//    named it name the folded op;
//  - the product's output SBP hint moves with it (a pair with a hint on each is left alone).
// It runs after autograd, so the backward's products fold too, and a folded product's own
// gradient (an eager one, or a graph differentiated again) casts dy to the operands' dtype
// first, as the cast's gradient did.
// Results change by the dropped rounding only: a folded value is the float32 sum, where the
// pair gave it rounded to 16 bits; torch.autocast rounds (it has no such fold), so ours are a
// little closer to float32 than its.

#include <set>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/matmul.h"

namespace ofl::compiler {

namespace {

bool is_16_bit(DataType dtype) {
  return dtype == DataType::kBFloat16 || dtype == DataType::kFloat16;
}

class CastFoldingPass final : public Pass {
 public:
  std::string name() const override { return "cast_folding"; }
  std::vector<std::string> needs() const override { return {"gradients"}; }

  void run(Graph& graph, const CompileOptions&) override {
    if (graph.train.amp_dtype == DataType::kFloat32) return;
    const std::set<int> pinned = graph.pinned_tensors();
    const auto consumers = graph.consumers();
    std::vector<int> folded_into(graph.num_ops(), -1);  // old product -> the folded op
    bool any = false;
    for (int i = 0; i < graph.num_ops(); ++i) {
      const int producer = product_before(graph, i);
      if (producer < 0) continue;
      const int value = graph.op(i).inputs[0];
      if (consumers[value].size() != 1 || pinned.count(value)) continue;
      if (!fold(graph, producer, i)) continue;
      folded_into[producer] = i;
      any = true;
    }
    if (!any) return;
    for (int i = 0; i < graph.num_ops(); ++i) {
      std::set<int> control;
      for (int c : graph.op(i).control_inputs) {
        const int now = folded_into[c] >= 0 ? folded_into[c] : c;
        if (now != i) control.insert(now);
      }
      graph.op(i).control_inputs.assign(control.begin(), control.end());
    }
  }

 private:
  // The product op whose 16-bit output op `i` casts to float32, or -1.
  static int product_before(const Graph& graph, int i) {
    const LogicalOp& cast = graph.op(i);
    if (cast.kind != OpKind::kCompute || cast.schema->name() != "cast" || cast.inputs.size() != 1 ||
        graph.tensor(cast.outputs[0]).meta.dtype != DataType::kFloat32 ||
        !is_16_bit(graph.tensor(cast.inputs[0]).meta.dtype)) {
      return -1;
    }
    const int producer = graph.tensor(cast.inputs[0]).producer;
    if (producer < 0) return -1;
    const LogicalOp& product = graph.op(producer);
    if (product.kind != OpKind::kCompute ||
        (product.schema->name() != "matmul" && product.schema->name() != "batch_matmul" &&
         product.schema->name() != "broadcast_matmul_grad_b") ||
        product.params.as<MatmulParams>().float32_out) {
      return -1;
    }
    return producer;
  }

  // Makes cast op `i` the product `producer` with float32_out; false when the two run apart.
  static bool fold(Graph& graph, int producer, int i) {
    const LogicalOp& product = graph.op(producer);
    const LogicalOp& cast = graph.op(i);
    // A backward op's group says whose recomputed activations it reads: the product's
    // (Note [Activation checkpointing]); the cast reads only the product. Forward groups are
    // segments of the graph, which a fold across two would change.
    const bool groups_agree =
        product.role == OpRole::kBackward || product.checkpoint_group == cast.checkpoint_group;
    if (product.placement != cast.placement || product.stage != cast.stage ||
        product.role != cast.role || !groups_agree || product.recompute != cast.recompute ||
        (product.has_output_sbp_hint() && cast.has_output_sbp_hint())) {
      return false;
    }
    LogicalOp folded = product;
    MatmulParams params = product.params.as<MatmulParams>();
    params.float32_out = true;
    folded.params = params;
    folded.outputs = cast.outputs;
    if (!product.has_output_sbp_hint()) folded.output_sbp_hints = cast.output_sbp_hints;
    folded.schedule_early = product.schedule_early || cast.schedule_early;
    std::set<int> control(product.control_inputs.begin(), product.control_inputs.end());
    control.insert(cast.control_inputs.begin(), cast.control_inputs.end());
    control.erase(producer);
    folded.control_inputs.assign(control.begin(), control.end());
    graph.op(producer).name = graph.unique_name(product.name + ".unfolded");
    graph.op(i) = std::move(folded);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_cast_folding_pass() { return std::make_unique<CastFoldingPass>(); }

}  // namespace ofl::compiler
