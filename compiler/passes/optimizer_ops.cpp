#include "compiler/passes/optimizer_ops.h"

#include <utility>

#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/reshape.h"

namespace ofl::compiler::optimizer_ops {

std::vector<int> append_op(Graph& graph, const Site& site, const std::string& base,
                           std::string_view type, AnyParams params, std::vector<int> inputs) {
  LogicalOp op;
  op.schema = &OpRegistry::global().find(type);
  op.name = graph.unique_name(base);
  op.params = std::move(params);
  op.inputs = std::move(inputs);
  op.placement = site.placement;
  op.stage = site.stage;
  op.location = site.location;
  op.role = OpRole::kOptimizer;
  return graph.add_compute_op(std::move(op));
}

int append_op1(Graph& graph, const Site& site, const std::string& base, std::string_view type,
               AnyParams params, std::vector<int> inputs) {
  return append_op(graph, site, base, type, std::move(params), std::move(inputs)).at(0);
}

int append_source(Graph& graph, LogicalOp op, const TensorMeta& meta) {
  OFL_CHECK(!graph.find_tensor(op.name).has_value(), "[optimizer] the name '", op.name,
            "' is reserved for an optimizer ", op.kind == OpKind::kInput ? "input" : "state",
            " tensor. However, got a tensor of that name in the graph already.");
  const std::string name = op.name;
  const int index = graph.add_op(std::move(op), 1, {name});
  const int t = graph.op(index).outputs[0];
  graph.tensor(t).meta = meta;
  return t;
}

int append_state(Graph& graph, int var_op, const std::string& suffix) {
  const LogicalOp& var = graph.op(var_op);
  LogicalOp state;
  state.name = var.name + suffix;
  state.kind = OpKind::kVariable;
  state.placement = var.placement;
  state.stage = var.stage;
  state.location = var.location;
  state.output_sbp_hints = var.output_sbp_hints;
  if (const auto shard = graph.zero_shards.find(var_op); shard != graph.zero_shards.end()) {
    state.output_sbp_hints = {shard->second};
  }
  state.initializer = Initializer{};  // zeros
  state.trainable = false;
  state.role = OpRole::kOptimizer;
  const TensorMeta meta = graph.tensor(var.outputs.at(0)).meta;
  return append_source(graph, std::move(state), meta);
}

int cast_to(Graph& graph, const Site& site, const std::string& base, int t, DataType dtype) {
  if (graph.tensor(t).meta.dtype == dtype) return t;
  return append_op1(graph, site, base, "cast", CastParams{dtype}, {t});
}

int laid_out(Graph& graph, const Site& site, const std::string& base, int t, const NdSbp& layout) {
  if (laid_out_as(graph, t, layout)) return t;
  LogicalOp op;
  op.schema = &OpRegistry::global().find("reshape");
  op.name = graph.unique_name(base);
  op.params = ReshapeParams{graph.tensor(t).meta.shape};
  op.inputs = {t};
  op.placement = site.placement;
  op.stage = site.stage;
  op.location = site.location;
  op.role = OpRole::kOptimizer;
  op.output_sbp_hints = {layout};
  return graph.add_compute_op(std::move(op)).at(0);
}

bool laid_out_as(const Graph& graph, int t, const NdSbp& layout) {
  const LogicalOp& producer = graph.op(graph.tensor(t).producer);
  return producer.kind == OpKind::kCompute && producer.schema->name() == "reshape" &&
         producer.output_sbp_hints.size() == 1 && producer.output_sbp_hints[0] == layout;
}

int in_variable_layout(Graph& graph, const Site& site, const std::string& base, const Update& u) {
  const LogicalOp& var = graph.op(u.var_op);
  // ZeRO-2 (Note [ZeRO stages 1 and 2] in zero.cpp): the gradient goes to the shard.
  const auto shard = graph.zero_shards.find(u.var_op);
  if (graph.train.zero_stage == 2 && shard != graph.zero_shards.end()) {
    if (laid_out_as(graph, u.grad, shard->second)) return u.grad;
    const int reduced = laid_out(graph, site, base + "/reduced", u.grad, shard->second);
    graph.zero_reductions.emplace(u.var_op, graph.tensor(reduced).producer);  // the first
    return reduced;
  }
  if (var.output_sbp_hints.empty() || var.output_sbp_hints[0].empty()) return u.grad;
  const NdSbp layout = var.output_sbp_hints[0];  // a copy: laid_out appends an op
  return laid_out(graph, site, base + "/reduced", u.grad, layout);
}

int lowered(Graph& graph, const Site& site, const std::string& name, int grad, DataType reduce) {
  if (graph.tensor(grad).meta.dtype != DataType::kFloat32) return grad;
  return cast_to(graph, site, name + ".grad/" + dtype_name(reduce), grad, reduce);
}

}  // namespace ofl::compiler::optimizer_ops
