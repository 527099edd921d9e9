// ZeRO as SBP (DESIGN.md "ZeRO is SBP"): with zero_stage >= 1 every trainable variable that is
// replicated (B) on a hierarchy dimension of several ranks is split S(axis) there instead. Its
// optimizer state copies the variable's layout, so the state is sharded too; SBP inference then
// reduces gradients P -> S (reduce-scatter) instead of P -> B, and boxing gathers the variable
// S -> B before the ops that need it whole. Each rank updates only its shard, in place.
//
// That is stage 3. Note [ZeRO stages 1 and 2]: stages 1 and 2 keep every parameter whole on
// every rank; the sharded layout is only recorded (Graph::zero_shards) for the optimizer pass,
// which makes the optimizer state sharded and updates each rank's shard of the parameter: a
// sharded copy of the parameter and of its gradient (stage 1: the gradient is all-reduced whole
// first; stage 2: reduce-scattered straight to the shard), the update on the shards, and the
// updated shards gathered and written back into the parameter (assign), after its last reader.

#include "compiler/passes/passes.h"

namespace ofl::compiler {

namespace {

class ZeroPass final : public Pass {
 public:
  std::string name() const override { return "zero"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }
  std::vector<std::string> provides() const override { return {"zero"}; }

  void run(Graph& graph, const CompileOptions&) override {
    if (graph.train.zero_stage <= 0) return;
    for (int i = 0; i < graph.num_ops(); ++i) {
      LogicalOp& op = graph.op(i);
      if (op.kind != OpKind::kVariable || !op.trainable) continue;
      const Shape& shape = graph.tensor(op.outputs[0]).meta.shape;
      const Shape& hierarchy = op.placement.hierarchy();
      if (op.output_sbp_hints.empty() || op.output_sbp_hints[0].empty()) {
        op.output_sbp_hints = {NdSbp(hierarchy.ndim(), B())};
      }
      NdSbp sbp = op.output_sbp_hints[0];
      for (int d = 0; d < hierarchy.ndim(); ++d) {
        if (!sbp[d].is_broadcast() || hierarchy[d] == 1) continue;
        const int axis = shard_axis(shape, sbp, hierarchy, hierarchy[d]);
        if (axis >= 0) sbp[d] = S(axis);
      }
      if (sbp == op.output_sbp_hints[0]) continue;  // nothing to shard on
      if (graph.train.zero_stage >= 2) graph.zero_grad_shards[i] = sbp;
      if (graph.train.zero_stage >= 3) {
        op.output_sbp_hints[0] = sbp;
      } else {
        graph.zero_shards[i] = sbp;
      }
    }
  }

 private:
  // The first axis not split yet whose extent covers the ranks (each gets at least one row);
  // -1 when none does (the variable then stays replicated on that dimension).
  static int shard_axis(const Shape& shape, const NdSbp& sbp, const Shape& hierarchy,
                        int64_t ranks) {
    for (int axis = 0; axis < shape.ndim(); ++axis) {
      int64_t parts = 1;
      for (size_t d = 0; d < sbp.size(); ++d) {
        if (sbp[d].is_split() && sbp[d].axis == axis) parts *= hierarchy[static_cast<int>(d)];
      }
      if (shape[axis] / parts >= ranks) return axis;
    }
    return -1;
  }
};

}  // namespace

std::unique_ptr<Pass> make_zero_pass() { return std::make_unique<ZeroPass>(); }

}  // namespace ofl::compiler
