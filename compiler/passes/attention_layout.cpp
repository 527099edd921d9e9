// The transposes into heads and back folded into fused attention.
//
// Note [Attention layout folding]
// -------------------------------
// A model moves the heads forward before attention and back after it, as PyTorch's SDPA wants
// (B, H, L, E): q, k, v = (t.transpose(1, 2) for t in qkv.split(...)); y = sdpa(q, k, v)
// .transpose(1, 2).reshape(B, T, C). In PyTorch those transposes are views, read by the
// attention kernel at their strides. Here each is a task: a pass over the tensor, and on a GPU
// an act and a kernel launch. In the GPT step they were 48 of the 310 tasks with kernels
// (docs/benchmarks.md, "Fused attention").
//
// This pass gives the attention the tensors before the transposes and asks for its output
// before the transpose after it: the op runs sequence-first (AttentionParams::sequence_first,
// Note [Sequence-first attention] in oneflowlike/ops/attention.h), whose kernels read and
// write rows at the strides the transposes would have undone. It runs before autograd, so the
// backward op is sequence-first too and the gradients' transposes never exist. Results are the
// same bits (the kernels sum in one order in either layout).
//
// Folded where every one of q, k and v is a swap of axes 1 and 2 of a 4-d tensor, the output's
// only reader is such a swap, and all of them run alike (placement, stage, role, checkpoint
// group, recomputation) with no SBP hint and no pinned tensor among them (a fetched
// transposed value keeps its transpose). The swap after the attention becomes the attention
// itself (its output tensor, and so its readers, stay); the old attention op, read by nobody,
// goes with dead-code elimination, and the swaps before it too unless something else reads
// them.
//
// On CPU placements only, for now. The CUDA kernels' batched products need a group's heads
// adjacent, so sequence-first operands are staged through (B, H, L, E) scratch inside the op:
// four swaps forward and eight backward (the saved q, k, v and out again, besides dout, dq, dk
// and dv) in place of eight transposes, and scratch the plan does not count. That trades acts
// for kernels and memory, and it has not run on a GPU; strided products, or the staging
// measured against the acts it saves, decide it there.

#include <set>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/attention.h"
#include "oneflowlike/ops/shape_ops.h"

namespace ofl::compiler {

namespace {

bool is_attention(const LogicalOp& op) {
  return op.kind == OpKind::kCompute && op.schema != nullptr &&
         op.placement.device_type() == DeviceType::kCPU &&
         (op.schema->name() == "scaled_dot_product_attention" ||
          op.schema->name() == "scaled_dot_product_attention_masked" ||
          op.schema->name() == "scaled_dot_product_attention_documents") &&
         !op.params.as<AttentionParams>().sequence_first;
}

// Whether op `i` swaps axes 1 and 2 of a 4-d tensor and nothing else.
bool swaps_heads_and_sequence(const Graph& graph, int i) {
  if (i < 0) return false;
  const LogicalOp& op = graph.op(i);
  if (op.kind != OpKind::kCompute || op.schema == nullptr || op.schema->name() != "transpose" ||
      graph.tensor(op.inputs[0]).meta.shape.ndim() != 4) {
    return false;
  }
  std::vector<int64_t> perm = op.params.as<TransposeParams>().perm;
  for (int64_t& p : perm) p = p < 0 ? p + 4 : p;
  return perm == std::vector<int64_t>{0, 2, 1, 3};
}

bool runs_alike(const LogicalOp& a, const LogicalOp& b) {
  return a.placement == b.placement && a.stage == b.stage && a.role == b.role &&
         a.checkpoint_group == b.checkpoint_group && a.recompute == b.recompute;
}

class AttentionLayoutPass final : public Pass {
 public:
  std::string name() const override { return "attention_layout"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }

  void run(Graph& graph, const CompileOptions&) override {
    const std::set<int> pinned = graph.pinned_tensors();
    const auto consumers = graph.consumers();
    const int ops = graph.num_ops();
    std::vector<int> folded_into(ops, -1);  // old attention op -> the folded one
    for (int i = 0; i < ops; ++i) {
      const LogicalOp& attention = graph.op(i);
      if (!is_attention(attention) || attention.has_output_sbp_hint()) continue;
      const int out = attention.outputs[0], lse = attention.outputs[1];
      if (consumers[out].size() != 1 || !consumers[lse].empty() || pinned.count(out) ||
          pinned.count(lse)) {
        continue;
      }
      const int after = consumers[out][0];
      if (!swaps_heads_and_sequence(graph, after) || !fits(graph, attention, after, pinned)) {
        continue;
      }
      std::vector<int> sources;  // what q, k and v are swaps of
      for (int a = 0; a < 3; ++a) {
        const int before = graph.tensor(attention.inputs[a]).producer;
        if (!swaps_heads_and_sequence(graph, before) || !fits(graph, attention, before, pinned)) {
          break;
        }
        sources.push_back(graph.op(before).inputs[0]);
      }
      if (sources.size() != 3) continue;
      fold(graph, i, after, sources);
      folded_into[i] = after;
    }
    // Control inputs that named an old attention op name the folded one.
    for (int i = 0; i < graph.num_ops(); ++i) {
      std::set<int> control;
      for (int c : graph.op(i).control_inputs) {
        const int now = c < ops && folded_into[c] >= 0 ? folded_into[c] : c;
        if (now != i) control.insert(now);
      }
      graph.op(i).control_inputs.assign(control.begin(), control.end());
    }
  }

 private:
  // Whether swap op `j` may go into `attention`: it runs alike, has no hint, and its output is
  // not pinned.
  static bool fits(const Graph& graph, const LogicalOp& attention, int j,
                   const std::set<int>& pinned) {
    const LogicalOp& op = graph.op(j);
    return runs_alike(attention, op) && !op.has_output_sbp_hint() && !pinned.count(op.outputs[0]);
  }

  // Attention op `i` over `sources`, sequence-first, in the place of swap op `after`.
  static void fold(Graph& graph, int i, int after, const std::vector<int>& sources) {
    LogicalOp folded = graph.op(i);
    for (int a = 0; a < 3; ++a) folded.inputs[a] = sources[a];
    AttentionParams params = folded.params.as<AttentionParams>();
    params.sequence_first = true;
    folded.params = params;
    const int lse = graph.add_tensor(graph.unique_name(folded.name + "/lse"),
                                     graph.tensor(folded.outputs[1]).meta);
    folded.outputs = {graph.op(after).outputs[0], lse};
    std::vector<TensorMeta> in;
    for (int t : folded.inputs) in.push_back(graph.tensor(t).meta);
    const std::vector<TensorMeta> metas = folded.schema->infer(folded.params, in);
    OFL_ASSERT(metas[0] == graph.tensor(folded.outputs[0]).meta &&
               metas[1] == graph.tensor(lse).meta)
        << folded.describe() << ": the sequence-first op gives other shapes than the swaps did";
    std::set<int> control(folded.control_inputs.begin(), folded.control_inputs.end());
    const auto& theirs = graph.op(after).control_inputs;
    control.insert(theirs.begin(), theirs.end());
    control.erase(i);
    folded.control_inputs.assign(control.begin(), control.end());
    folded.schedule_early = folded.schedule_early || graph.op(after).schedule_early;
    graph.op(i).name = graph.unique_name(folded.name + ".unfolded");
    graph.op(after) = std::move(folded);
    graph.tensor(lse).producer = after;
    graph.tensor(lse).producer_output = 1;
  }
};

}  // namespace

std::unique_ptr<Pass> make_attention_layout_pass() {
  return std::make_unique<AttentionLayoutPass>();
}

}  // namespace ofl::compiler
