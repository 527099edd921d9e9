// Optimizer ops on the logical graph: gradient clipping by global norm, the optimizer's state
// variables and the in-place updates, one multi-tensor op per group of trainable variables
// (multi_tensor_sgd_update, multi_tensor_adam_update; Note [Multi-tensor updates]).
//
// The learning rate and the step count are graph INPUTS ("lr", "step"), fed by the runtime every
// iteration, so that a schedule changes values and not the plan. There is one pair per distinct
// (placement, dtype) of the trainable variables, named "lr", "lr@1", ... in the order of the
// variables, because the update op reads them on its own placement and in its param's dtype.
//
// Note [Parameter groups]: with several groups (nanoGPT: no weight decay on norms and
// embeddings), each variable's update takes its group's weight decay (compiled in) and its
// group's lr input: group g > 0 has inputs "lr_g<g>@k", which the front end feeds from
// param_groups[g]["lr"], so a scheduler acting on each group changes values, not the plan. The
// other hyper-parameters and clipping (over all gradients, as clip_grad_norm_ over all
// parameters) are one for all groups.
//
// Everything here works on LOGICAL tensors, so a gradient split across ranks (or living on
// another stage) needs no special case: SBP inference and boxing turn, e.g., the reduce_sum of a
// split gradient into a partial sum and all-reduce it before the square root.
//
// Note [Compiled SGD first step]: torch.optim.SGD sets the momentum buffer to d_p on the first
// step and to momentum * buffer + (1 - dampening) * d_p afterwards; eager flow.optim.SGD gets
// this by passing dampening = 0 on the first step (Note [SGD first step] in
// oneflowlike/ops/optimizer.h). A compiled plan runs the SAME op every step, so with
// dampening != 0 its first step leaves the buffer at (1 - dampening) * d_p instead of d_p. With
// the default dampening = 0 both agree exactly. Fixing it needs an op that reads `step` (or a
// first-step variant of the plan).

#include "oneflowlike/ops/optimizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/passes/gradient_reduction.h"
#include "compiler/passes/optimizer_ops.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/shape_ops.h"

namespace ofl::compiler {

namespace {

using optimizer_ops::append_op;
using optimizer_ops::append_op1;
using optimizer_ops::append_source;
using optimizer_ops::append_state;
using optimizer_ops::bucket_gradients;
using optimizer_ops::cast_to;
using optimizer_ops::in_variable_layout;
using optimizer_ops::laid_out;
using optimizer_ops::lower_gradients;
using optimizer_ops::pace_zero_reductions;
using optimizer_ops::restore_gradients;
using optimizer_ops::shard_gradients_per_micro_batch;
using optimizer_ops::Site;
using optimizer_ops::Update;

// Note [Multi-tensor updates] in ops/optimizer.h: the clip's sums of squares and the updates
// run one op per group of variables that share a placement, stage, layout and dtype (and for
// the updates, a parameter group), in chunks of at most kUpdateChunkBytes of parameters. The
// chunks follow the backward's order (latest variables first, as the gradient buckets), so
// without clipping a chunk's update runs once the backward has made its gradients: a chunk
// keeps its gradients until then, which the bound keeps to a part of the model. A variable
// whose layout SBP inference picks (no hint, several ranks) is a group of its own: its layout
// is not known here.
constexpr int64_t kUpdateChunkBytes = int64_t{64} << 20;

// The layout variable `var_op`'s gradient has where the clip reads it (`for_update` false) or
// its update runs (true): its ZeRO shard or its own; "" when unknown.
std::string layout_key(const Graph& graph, int var_op, bool for_update) {
  const LogicalOp& var = graph.op(var_op);
  const auto shard = graph.zero_shards.find(var_op);
  if (shard != graph.zero_shards.end() && (for_update || graph.train.zero_stage == 2)) {
    return nd_sbp_to_string(shard->second);
  }
  if (!var.output_sbp_hints.empty() && !var.output_sbp_hints[0].empty()) {
    return nd_sbp_to_string(var.output_sbp_hints[0]);
  }
  return var.placement.num_ranks() == 1 ? "whole" : "";
}

// The indices of `updates` in chunks: each chunk one key (keys(i) == "" stands alone), at most
// kUpdateChunkBytes of parameters (or one variable), the latest variables first.
std::vector<std::vector<size_t>> update_chunks(const Graph& graph,
                                               const std::vector<Update>& updates,
                                               const std::function<std::string(size_t)>& key) {
  std::vector<std::vector<size_t>> chunks;
  std::map<std::string, std::pair<size_t, int64_t>> open;  // key -> (chunk, its bytes)
  for (size_t i = updates.size(); i-- > 0;) {
    const std::string k = key(i);
    const TensorMeta& meta = graph.tensor(graph.op(updates[i].var_op).outputs.at(0)).meta;
    const int64_t bytes = meta.shape.numel() * static_cast<int64_t>(dtype_size(meta.dtype));
    auto it = open.find(k);
    if (k.empty() || it == open.end() || it->second.second + bytes > kUpdateChunkBytes) {
      chunks.push_back({});
      if (k.empty()) {
        chunks.back().push_back(i);
        continue;
      }
      it = open.insert_or_assign(k, std::make_pair(chunks.size() - 1, int64_t{0})).first;
    }
    chunks[it->second.first].push_back(i);
    it->second.second += bytes;
  }
  return chunks;
}

// The gradients laid out as their variables (or ZeRO-2 shards; the layout ops named after the
// variable and `suffix`), in chunks of one placement, stage, layout and dtype.
std::vector<std::vector<size_t>> gradient_chunks(Graph& graph, std::vector<Update>& updates,
                                                 const std::string& suffix) {
  for (Update& u : updates) {
    const Site site = Site::of(graph.op(u.var_op));
    u.grad = in_variable_layout(graph, site, graph.op(u.var_op).name + suffix, u);
  }
  return update_chunks(graph, updates, [&](size_t i) {
    const LogicalOp& var = graph.op(updates[i].var_op);
    const std::string layout = layout_key(graph, updates[i].var_op, /*for_update=*/false);
    if (layout.empty()) return layout;
    return str_cat(var.placement.to_string(), "|", var.stage, "|", layout, "|",
                   dtype_name(graph.tensor(updates[i].grad).meta.dtype));
  });
}

// Note [Dynamic loss scaling in a graph]: the inf and nan elements of every gradient, counted
// where it lives in its variable's layout (a multi-tensor count per chunk of gradients, Note
// [Multi-tensor updates]), summed on the loss scale's placement.
int count_nonfinite(Graph& graph, std::vector<Update>& updates) {
  const Site scale_site = Site::of(graph.op(graph.tensor(graph.loss_scale_tensor).producer));
  int total = -1;
  for (const std::vector<size_t>& chunk : gradient_chunks(graph, updates, ".grad")) {
    std::vector<int> grads;
    for (size_t i : chunk) grads.push_back(updates[i].grad);
    const Site site = Site::of(graph.op(updates[chunk[0]].var_op));
    const int count = append_op1(graph, site, "loss_scale/nonfinite",
                                 "multi_tensor_count_nonfinite", NoParams{}, grads);
    total = total < 0 ? count
                      : append_op1(graph, scale_site, "loss_scale/nonfinite_sum", "add", NoParams{},
                                   {total, count});
  }
  return total;
}

// The skip input of `param`'s update: the count in param's dtype.
int skip_input(Graph& graph, const Site& site, const std::string& var_name, int found, int param) {
  return cast_to(graph, site, var_name + ".skip", found, graph.tensor(param).meta.dtype);
}

// The count of applied steps ("_loss_scale.steps"): Adam's step count under dynamic loss
// scaling, which a skipped step does not advance (torch does not call the optimizer then).
int applied_steps(Graph& graph) {
  const int scale_op = graph.tensor(graph.loss_scale_tensor).producer;
  const std::string name = graph.op(scale_op).name + ".steps";
  if (auto t = graph.find_tensor(name)) return *t;
  return append_state(graph, scale_op, ".steps");
}

// The scale, its good-step count and the applied steps after this step (loss_scale_update).
void update_loss_scale(Graph& graph, int found) {
  const int scale = graph.loss_scale_tensor;
  const int scale_op = graph.tensor(scale).producer;
  const int steps = applied_steps(graph);
  const int good = append_state(graph, scale_op, ".good_steps");
  const DynamicLossScale& d = graph.train.dynamic_loss_scale;
  append_op(graph, Site::of(graph.op(scale_op)), "loss_scale/update", "loss_scale_update",
            LossScaleParams{d.growth_factor, d.backoff_factor, d.growth_interval},
            {scale, good, steps, found});
}

// torch.nn.utils.clip_grad_norm_ over all gradients, returning its coefficient ():
//   total = sqrt(sum_g sum(g * g)),  coefficient = where(total > max_norm, max_norm / (total +
//   1e-6), 1);
// the updates multiply each gradient by it (Note [Multi-tensor updates]). Each chunk's sum of
// squares runs where its gradients live (a scalar crosses placements, not a gradient); the total
// and the coefficient run on the first variable's placement.
int clip_coefficient(Graph& graph, double max_norm, std::vector<Update>& updates) {
  const Site norm_site = Site::of(graph.op(updates[0].var_op));
  const DataType dtype = graph.tensor(updates[0].grad).meta.dtype;
  int total_sq = -1;
  for (const std::vector<size_t>& chunk : gradient_chunks(graph, updates, ".clip")) {
    const Site site = Site::of(graph.op(updates[chunk[0]].var_op));
    std::vector<int> grads;
    for (size_t i : chunk) grads.push_back(updates[i].grad);
    int sum_sq = append_op1(graph, site, "clip_grad_norm/sum_squares", "multi_tensor_sum_squares",
                            NoParams{}, grads);  // ()
    sum_sq = cast_to(graph, site, "clip_grad_norm/cast", sum_sq, dtype);
    total_sq = total_sq < 0 ? sum_sq
                            : append_op1(graph, norm_site, "clip_grad_norm/add", "add", NoParams{},
                                         {total_sq, sum_sq});
  }
  const int total =
      append_op1(graph, norm_site, "clip_grad_norm/sqrt", "sqrt", NoParams{}, {total_sq});
  const int limit = append_op1(graph, norm_site, "clip_grad_norm/max_norm", "fill",
                               FillParams{Shape{}, dtype, max_norm}, {});
  const int one = append_op1(graph, norm_site, "clip_grad_norm/one", "fill",
                             FillParams{Shape{}, dtype, 1.0}, {});
  const int over =
      append_op1(graph, norm_site, "clip_grad_norm/greater", "greater", NoParams{}, {total, limit});
  const int denominator = append_op1(graph, norm_site, "clip_grad_norm/add_eps", "scalar_add",
                                     ScalarParams{1e-6}, {total});
  const int ratio =
      append_op1(graph, norm_site, "clip_grad_norm/div", "div", NoParams{}, {limit, denominator});
  return append_op1(graph, norm_site, "clip_grad_norm/coefficient", "where", NoParams{},
                    {over, ratio, one});  // ()
}

// The lr and step inputs, one pair per (placement, dtype) of the trainable variables.
class HyperParameterInputs {
 public:
  HyperParameterInputs(Graph& graph, bool with_step) : graph_(graph), with_step_(with_step) {}

  // {lr, step} tensors for `var_op` of parameter group `group` (step is -1 without Adam).
  std::pair<int, int> for_variable(int var_op, int group) {
    const LogicalOp& var = graph_.op(var_op);
    const DataType dtype = graph_.tensor(var.outputs.at(0)).meta.dtype;
    for (const Entry& e : entries_) {
      if (e.group == group && e.placement == var.placement && e.dtype == dtype) {
        return {e.lr, e.step};
      }
    }
    const Placement placement = var.placement;
    const int stage = var.stage;
    const std::string suffix = entries_.empty() ? "" : str_cat("@", entries_.size());
    const std::string lr_name = group == 0 ? "lr" : str_cat("lr_g", group);
    Entry e{group, placement, dtype, make_input(lr_name + suffix, placement, stage, dtype), -1};
    if (with_step_) e.step = make_input("step" + suffix, placement, stage, dtype);
    entries_.push_back(e);
    return {e.lr, e.step};
  }

 private:
  struct Entry {
    int group;
    Placement placement;
    DataType dtype;
    int lr;
    int step;
  };

  int make_input(const std::string& name, const Placement& placement, int stage, DataType dtype) {
    LogicalOp op;
    op.name = name;
    op.kind = OpKind::kInput;
    op.placement = placement;
    op.stage = stage;
    op.role = OpRole::kOptimizer;
    op.output_sbp_hints = {NdSbp(placement.hierarchy().ndim(), B())};
    return append_source(graph_, std::move(op), TensorMeta{Shape{}, dtype});
  }

  Graph& graph_;
  bool with_step_;
  std::vector<Entry> entries_;
};

// Note [ZeRO stages 1 and 2] in zero.cpp: the updated shard `shard`, gathered, written back into
// the parameter `param`. The assign waits (a control input) for the update op `update`, so it
// and the gather of the shard read the updated values; the parameter's other readers come first
// (Note [In-place updates wait for readers] in compile.cpp).
void write_back(Graph& graph, const Site& site, const std::string& var_name, int param, int shard,
                int update) {
  LogicalOp op;
  op.schema = &OpRegistry::global().find("assign");
  op.name = graph.unique_name(var_name + ".assign");
  op.params = NoParams{};
  op.inputs = {param, shard};
  op.placement = site.placement;
  op.stage = site.stage;
  op.location = site.location;
  op.role = OpRole::kOptimizer;
  op.control_inputs = {update};
  graph.add_compute_op(std::move(op));
}

// The parameter group of variable `name` (Note [Parameter groups]).
int group_of(const OptimizerConfig& config, const std::string& name) {
  const auto it = config.group_of.find(name);
  const int group = it == config.group_of.end() ? 0 : it->second;
  OFL_CHECK(group == 0 || (group > 0 && group < static_cast<int>(config.group_weight_decay.size())),
            "[optimizer] variable '", name, "' is in parameter group ", group,
            ". However, there are ", std::max<size_t>(1, config.group_weight_decay.size()),
            " groups.");
  return group;
}

// One variable's update: its hyper-parameters and the tensors its update op reads.
struct Prepared {
  int var_op;
  int lr;
  int step;  // Adam's step input; -1 for SGD or under dynamic loss scaling (applied_steps)
  double weight_decay;
  int whole_param;           // the variable's tensor
  int shard = -1;            // ZeRO: the shard of the parameter the update writes
  std::vector<int> tensors;  // param (or its shard), grad, then the state
};

Prepared prepare(Graph& graph, const OptimizerConfig& config, HyperParameterInputs& hyper,
                 bool adam, const Update& u) {
  const std::string var_name = graph.op(u.var_op).name;  // a copy: appending ops moves ops
  const int group = group_of(config, var_name);
  Prepared p;
  p.var_op = u.var_op;
  p.weight_decay =
      config.group_weight_decay.empty() ? config.weight_decay : config.group_weight_decay[group];
  std::tie(p.lr, p.step) = hyper.for_variable(u.var_op, group);
  p.whole_param = graph.op(u.var_op).outputs.at(0);
  int param = p.whole_param;
  int grad = u.grad;
  // Note [ZeRO stages 1 and 2] in zero.cpp: the update runs on this rank's shards of a
  // replicated parameter and its gradient, and writes the gathered result back.
  const auto shard = graph.zero_shards.find(u.var_op);
  if (shard != graph.zero_shards.end()) {
    const NdSbp layout = shard->second;
    const Site site = Site::of(graph.op(u.var_op));
    param = p.shard = laid_out(graph, site, var_name + ".shard", param, layout);
    // Under ZeRO-2 the gradient is laid out as the shard already (laid_out keeps it: a copy
    // of each would live until its group's update).
    grad = laid_out(graph, site, var_name + ".grad/shard",
                    in_variable_layout(graph, site, var_name + ".grad", u), layout);
  }
  p.tensors = {param, grad};
  if (adam) {
    p.tensors.push_back(append_state(graph, u.var_op, ".exp_avg"));
    p.tensors.push_back(append_state(graph, u.var_op, ".exp_avg_sq"));
  } else {
    // See Note [Compiled SGD first step] for dampening != 0.
    p.tensors.push_back(append_state(graph, u.var_op, ".momentum"));
  }
  return p;
}

// One multi-tensor update of `members` (Note [Multi-tensor updates]), their gradients scaled by
// the clip's `coefficient` (-1: no clipping) and skipped when `found` counts an inf or nan (-1:
// no loss scaling); then the ZeRO shards' write-backs.
void append_update(Graph& graph, const OptimizerConfig& config, bool adam,
                   const std::vector<const Prepared*>& members, int coefficient, int found) {
  const Prepared& first = *members[0];
  const Site site = Site::of(graph.op(first.var_op));
  const std::string name = graph.op(first.var_op).name;
  const DataType dtype = graph.tensor(first.whole_param).meta.dtype;
  std::vector<int> inputs{first.lr};
  if (adam) {
    int step = first.step;
    if (found >= 0) {
      const int next = append_op1(graph, site, name + ".step", "scalar_add", ScalarParams{1.0},
                                  {applied_steps(graph)});
      step = cast_to(graph, site, name + ".step", next, dtype);
    }
    inputs.push_back(step);
  }
  if (coefficient >= 0) {
    inputs.push_back(cast_to(graph, site, name + ".clip/cast", coefficient, dtype));
  }
  if (found >= 0) inputs.push_back(skip_input(graph, site, name, found, first.whole_param));
  for (const Prepared* m : members)
    inputs.insert(inputs.end(), m->tensors.begin(), m->tensors.end());
  if (adam) {
    const MultiAdamParams params{
        config.beta1,
        config.beta2,
        config.epsilon,
        first.weight_decay,
        /*decoupled_weight_decay=*/config.kind == OptimizerConfig::Kind::kAdamW,
        /*scaled=*/coefficient >= 0,
        /*skippable=*/found >= 0};
    append_op(graph, site, "adam_update/" + name, "multi_tensor_adam_update", params, inputs);
  } else {
    const MultiSgdParams params{config.momentum,
                                config.dampening,
                                first.weight_decay,
                                config.nesterov,
                                /*scaled=*/coefficient >= 0,
                                /*skippable=*/found >= 0};
    append_op(graph, site, "sgd_update/" + name, "multi_tensor_sgd_update", params, inputs);
  }
  const int update = graph.num_ops() - 1;
  for (const Prepared* m : members) {
    if (m->shard < 0) continue;
    const LogicalOp& var = graph.op(m->var_op);
    write_back(graph, Site::of(var), std::string(var.name), m->whole_param, m->shard, update);
  }
}

class OptimizerPass final : public Pass {
 public:
  std::string name() const override { return "optimizer"; }
  std::vector<std::string> needs() const override { return {"gradients"}; }
  std::vector<std::string> provides() const override { return {"optimizer"}; }

  void run(Graph& graph, const CompileOptions&) override {
    const OptimizerConfig config = graph.train.optimizer;
    if (config.kind == OptimizerConfig::Kind::kNone) return;
    std::vector<Update> updates;        // by variable op index: a deterministic order
    std::map<int, int> grad_producers;  // variable op -> the backward op making its gradient
    for (const auto& [var_op, grad] : graph.variable_grads) {
      if (!graph.op(var_op).trainable) continue;
      updates.push_back({var_op, grad});
      grad_producers[var_op] = graph.tensor(grad).producer;
    }
    if (updates.empty()) return;
    const DataType reduce = graph.train.grad_reduce_dtype;
    OFL_CHECK_TYPE(reduce == DataType::kFloat32 || reduce == DataType::kBFloat16,
                   "[optimizer] gradients are reduced in float32 or bfloat16. However, got ",
                   dtype_name(reduce), ".");
    const std::set<int> reduced = shard_gradients_per_micro_batch(graph, updates, reduce);
    // Note [Buckets under accumulation]: float32 buckets there, each cast down once a step.
    const bool accumulating = graph.train.gradient_accumulation_steps > 1;
    const int64_t bucket_bytes = graph.train.gradient_bucket_bytes;
    if (accumulating) bucket_gradients(graph, updates, bucket_bytes, reduce);
    if (reduce != DataType::kFloat32) lower_gradients(graph, updates, reduce, reduced);
    if (!accumulating) bucket_gradients(graph, updates, bucket_bytes, reduce);
    if (reduce != DataType::kFloat32) restore_gradients(graph, updates);
    // Note [Dynamic loss scaling in a graph] in autograd.cpp: inf or nan anywhere skips all.
    const int found = graph.loss_scale_tensor >= 0 ? count_nonfinite(graph, updates) : -1;
    // Graph::variable_grads keeps the unclipped gradients; the updates scale them.
    const int coefficient = config.clip_grad_max_norm > 0
                                ? clip_coefficient(graph, config.clip_grad_max_norm, updates)
                                : -1;
    const bool adam =
        config.kind == OptimizerConfig::Kind::kAdam || config.kind == OptimizerConfig::Kind::kAdamW;
    // Under dynamic loss scaling Adam counts the steps applied in the graph (applied_steps).
    HyperParameterInputs hyper(graph, /*with_step=*/adam && found < 0);
    std::vector<Prepared> prepared;
    for (Update& u : updates) prepared.push_back(prepare(graph, config, hyper, adam, u));
    const auto chunks = update_chunks(graph, updates, [&](size_t i) {
      const std::string layout = layout_key(graph, updates[i].var_op, /*for_update=*/true);
      if (layout.empty()) return layout;
      // lr is one tensor per parameter group, placement and dtype.
      return str_cat(prepared[i].lr, "|", graph.op(updates[i].var_op).stage, "|", layout);
    });
    for (const std::vector<size_t>& chunk : chunks) {
      std::vector<const Prepared*> members;
      for (size_t i : chunk) members.push_back(&prepared[i]);
      append_update(graph, config, adam, members, coefficient, found);
    }
    if (found >= 0) update_loss_scale(graph, found);
    pace_zero_reductions(graph, grad_producers);
  }
};

}  // namespace

std::unique_ptr<Pass> make_optimizer_pass() { return std::make_unique<OptimizerPass>(); }

}  // namespace ofl::compiler
