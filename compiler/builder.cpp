#include "compiler/builder.h"

#include <algorithm>

#include "oneflowlike/proto/job.pb.h"

namespace ofl::compiler {

GraphBuilder::GraphBuilder(std::string job_name) : placement_(DeviceType::kCPU, {0}) {
  graph_.name = std::move(job_name);
}

namespace {

NdSbp or_broadcast(const NdSbp& sbp, const Placement& placement) {
  return sbp.empty() ? NdSbp(placement.hierarchy().ndim(), B()) : sbp;
}

}  // namespace

int GraphBuilder::add_source(LogicalOp op, const Shape& shape, DataType dtype, const NdSbp& sbp,
                             const char* why_not_partial) {
  const std::string name = op.name;
  op.placement = placement_;
  op.stage = stage_;
  op.checkpoint_group = checkpoint_group_;
  op.location = location_;
  op.output_sbp_hints = {or_broadcast(sbp, placement_)};
  check_nd_sbp(shape, op.output_sbp_hints[0], placement_, name);
  for (const Sbp& s : op.output_sbp_hints[0]) {
    OFL_CHECK(why_not_partial == nullptr || !s.is_partial_sum(), op.describe(), " ",
              why_not_partial, " However, got ", nd_sbp_to_string(op.output_sbp_hints[0]), ".");
  }
  const int index = graph_.add_op(std::move(op), 1, {name});
  graph_.tensor(graph_.op(index).outputs[0]).meta = TensorMeta{shape, dtype};
  return graph_.op(index).outputs[0];
}

int GraphBuilder::input(const std::string& name, const Shape& shape, DataType dtype,
                        const NdSbp& sbp, bool donates) {
  LogicalOp op;
  op.name = name;
  op.kind = OpKind::kInput;
  op.donates = donates;
  // A partial-sum input is fed by pieces (Runtime::run_local), each rank its addend.
  return add_source(std::move(op), shape, dtype, sbp, nullptr);
}

int GraphBuilder::variable(const std::string& name, const Shape& shape, const Initializer& init,
                           const NdSbp& sbp, bool trainable, DataType dtype) {
  LogicalOp op;
  op.name = name;
  op.kind = OpKind::kVariable;
  op.initializer = init;
  op.trainable = trainable;
  return add_source(std::move(op), shape, dtype, sbp,
                    "a variable cannot be partial-sum (P): it holds whole values.");
}

std::vector<int> GraphBuilder::op(const std::string& type, const AnyParams& params,
                                  const std::vector<int>& inputs, const std::string& name,
                                  const std::vector<NdSbp>& output_sbp_hints) {
  LogicalOp op;
  op.schema = &OpRegistry::global().find(type);
  op.name = name.empty() ? graph_.unique_name(type) : name;
  op.params = params;
  op.inputs = inputs;
  op.placement = placement_;
  op.stage = stage_;
  op.checkpoint_group = checkpoint_group_;
  op.location = location_;
  op.output_sbp_hints = output_sbp_hints;
  // Hints are checked before the op joins the graph, so a bad hint leaves no half-made op.
  std::vector<TensorMeta> in;
  for (int t : inputs) {
    OFL_CHECK_INDEX(t >= 0 && t < graph_.num_tensors(), op.describe(), " input index ", t,
                    " is not a tensor of this graph.");
    in.push_back(graph_.tensor(t).meta);
  }
  std::vector<TensorMeta> out;
  try {
    out = op.schema->infer(op.params, in);
  } catch (const Error& e) {
    throw Error(e.code(), str_cat(e.what(), " ", op.describe()));
  }
  OFL_CHECK(output_sbp_hints.size() <= out.size(), op.describe(), " has ", output_sbp_hints.size(),
            " SBP hints for ", out.size(),
            " outputs. However, there must be at most one per output.");
  for (size_t k = 0; k < output_sbp_hints.size(); ++k) {
    if (!output_sbp_hints[k].empty())
      check_nd_sbp(out[k].shape, output_sbp_hints[k], placement_, op.name);
  }
  return graph_.add_compute_op(std::move(op));
}

int GraphBuilder::op1(const std::string& type, const AnyParams& params,
                      const std::vector<int>& inputs, const std::string& name,
                      const NdSbp& output_sbp_hint) {
  std::vector<NdSbp> hints;
  if (!output_sbp_hint.empty()) hints.push_back(output_sbp_hint);
  const std::vector<int> out = op(type, params, inputs, name, hints);
  OFL_CHECK(out.size() == 1, "[", type, "] has ", out.size(), " outputs; use op() for it.");
  return out[0];
}

void GraphBuilder::fetch(int tensor) {
  OFL_CHECK_INDEX(tensor >= 0 && tensor < graph_.num_tensors(), "[fetch] index ", tensor,
                  " is not a tensor of this graph.");
  OFL_CHECK(std::find(graph_.fetches.begin(), graph_.fetches.end(), tensor) == graph_.fetches.end(),
            "[fetch] tensor '", graph_.tensor(tensor).name, "' is fetched already.");
  graph_.fetches.push_back(tensor);
}

void GraphBuilder::to_job(proto::JobProto* job) const { graph_to_job(graph_, job); }

}  // namespace ofl::compiler
