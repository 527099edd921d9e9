// Autograd on the logical graph: backward ops from each op's FGradient, from the loss back to
// every trainable variable. FGradient is the same function eager autograd calls (Note [One
// gradient] in oneflowlike/autograd.h); here GradBuilder's values are tensor indices and apply()
// appends ops to the graph instead of running kernels.
//
// Only ops on a path from a trainable variable to the loss are differentiated, and only through
// floating tensors (an integer or bool tensor carries no gradient, as in eager mode). A tensor
// with several consumers on the path gets one gradient per consumer, summed by "add" ops when its
// producer's gradient is built.

#include <algorithm>
#include <map>
#include <set>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/scalar.h"

namespace ofl::compiler {

// Note [Given output gradients]
// -----------------------------
// Instead of a loss, a graph may give the gradients of some of its tensors (Graph::output_grads,
// GraphBuilder::set_output_grad; torch.autograd.backward(tensors, grad_tensors)): each is added
// to its tensor's gradient as the loss's seed would be, and the backward runs from there. Eager
// autograd of global tensors differentiates one op so (Note [Eager global autograd] in
// framework/global_autograd.py): its VJP graph gets dy as an input and seeds the op's output
// with it. With a loss sum(y * dy) instead, the backward had to recompute y, multiply, sum, fill
// the seed, expand it and multiply by dy again: six ops around the op's own gradient, and the
// op itself, which dead-code elimination now drops unless its gradient reads its output (as
// softmax's does).

// Note [Saved forward values]
// ---------------------------
// Differentiated from given output gradients (eager autograd of global tensors), the backward
// of an op whose gradient reads its outputs (attention's out and logsumexp, layer norm's mean and
// rstd, softmax) keeps the op in the graph to compute them again. Instead, as PyTorch's
// autograd saves tensors: autograd lists the forward op outputs its backward ops read
// (Graph::backward_reads); a caller that fetched those values when it ran the forward gives them
// back (Graph::given_values): each becomes an input, the backward ops read it, and dead-code
// elimination drops the forward ops nothing else reads.

namespace {

// The seed gradient of the loss. With m micro-batches the loss is each micro-batch's mean and
// the gradients of the m micro-batches are summed (Note [Micro-batches] in plan.proto), so each
// is scaled by 1/m to give the gradient of the whole batch's mean.
double seed_value(const TrainConfig& train) {
  OFL_CHECK(train.loss_scale > 0, "[autograd] the loss scale must be positive. However, got ",
            train.loss_scale, ".");
  OFL_CHECK(train.gradient_accumulation_steps >= 1,
            "[autograd] gradient accumulation steps "
            "must be at least 1. However, got ",
            train.gradient_accumulation_steps, ".");
  return train.loss_scale / train.gradient_accumulation_steps;
}

// Note [Dynamic loss scaling in a graph]
// --------------------------------------
// With TrainConfig::dynamic_loss_scale (nn.Graph's set_grad_scaler, for float16 mixed
// precision) the loss scale is a float32 scalar variable, "_loss_scale", initialised to
// init_scale and replicated on every rank of the job (as its step counts are), so that every
// process can read it and checkpoint it, whatever stage it runs; boxing brings it to the loss. The
// backward is seeded with it (times 1/micro-batches) and each variable's gradient is divided by it.
// The optimizer pass then counts the inf and nan elements of every gradient where it lives, sums
// the counts (across ranks by SBP: a split gradient's counts are partial sums), skips every update
// when the sum is not 0 (the skippable update ops) and updates the scale and its count of good
// steps ("_loss_scale.good_steps") with loss_scale_update (Note [Dynamic loss scaling] in
// oneflowlike/ops/optimizer.h). Every rank sees the same sum, so every rank skips the same steps.
// The three variables are part of nn.Graph's state_dict ("_graph.grad_scaler"), so a resumed run
// continues the same scale.
constexpr const char* kLossScaleVariable = "_loss_scale";

// `at`: a copy of the loss's producer (graph.add_op below may move the graph's ops).
int make_scale_variable(Graph& graph, const LogicalOp& at, DataType dtype) {
  OFL_CHECK(!graph.find_tensor(kLossScaleVariable).has_value(), "[autograd] the name '",
            kLossScaleVariable,
            "' is reserved for the loss scale. However, the graph has a "
            "tensor of that name.");
  LogicalOp var;
  var.name = kLossScaleVariable;
  var.kind = OpKind::kVariable;
  const std::vector<int64_t> ranks = graph.all_ranks();
  var.placement =
      Placement(at.placement.device_type(), ranks, Shape{static_cast<int64_t>(ranks.size())});
  var.location = at.location;
  var.output_sbp_hints = {NdSbp{B()}};
  var.initializer =
      Initializer{Initializer::Kind::kConstant, graph.train.dynamic_loss_scale.init_scale, 0, 0};
  var.trainable = false;
  var.role = OpRole::kOptimizer;
  const int index = graph.add_op(std::move(var), 1, {kLossScaleVariable});
  const int t = graph.op(index).outputs[0];
  graph.tensor(t).meta = TensorMeta{Shape{}, DataType::kFloat32};
  graph.loss_scale_tensor = t;
  int scale = t;
  if (dtype != DataType::kFloat32) {
    LogicalOp cast;
    cast.schema = &OpRegistry::global().find("cast");
    cast.name = graph.unique_name(str_cat(kLossScaleVariable, "/", dtype_name(dtype)));
    cast.params = CastParams{dtype};
    cast.inputs = {t};
    cast.placement = at.placement;
    cast.stage = at.stage;
    cast.role = OpRole::kBackward;
    scale = graph.add_compute_op(std::move(cast)).at(0);
  }
  return scale;
}

// Where the backward ops of one forward op go: its placement, stage, source line, name and
// checkpoint group (the checkpointing pass finds a group's backward ops by it).
struct BackwardSite {
  std::string name;
  Placement placement;
  int stage = 0;
  std::string location;
  std::string checkpoint_group;

  static BackwardSite of(const LogicalOp& op) {
    return BackwardSite{op.name, op.placement, op.stage, op.location, op.checkpoint_group};
  }
  // The seed and the variables' gradient sums belong to no group: they differentiate no
  // forward op of one.
  static BackwardSite outside_groups(const LogicalOp& op) {
    BackwardSite site = of(op);
    site.checkpoint_group.clear();
    return site;
  }
};

// Appends compute op `type` for `site` and returns its outputs (metas inferred at once, so a
// gradient that builds a bad op fails here, naming the forward op it differentiates).
std::vector<int> append_backward_op(Graph& graph, const BackwardSite& site, std::string_view type,
                                    AnyParams params, std::vector<int> inputs) {
  LogicalOp op;
  op.schema = &OpRegistry::global().find(type);
  op.name = graph.unique_name(str_cat(site.name, ".grad/", type));
  op.params = std::move(params);
  op.inputs = std::move(inputs);
  op.placement = site.placement;
  op.stage = site.stage;
  op.location = site.location;
  op.role = OpRole::kBackward;
  op.checkpoint_group = site.checkpoint_group;
  return graph.add_compute_op(std::move(op), str_cat(" (the gradient of '", site.name, "')"));
}

// Gradient contributions per forward tensor, summed on demand.
class GradientTable {
 public:
  void add(int tensor, int grad) { contributions_[tensor].push_back(grad); }

  // The sum of the contributions to `tensor` (built with "add" ops at `site`), or kNone.
  int sum(Graph& graph, int tensor, const BackwardSite& site) {
    auto it = contributions_.find(tensor);
    if (it == contributions_.end() || it->second.empty()) return GradBuilder::kNone;
    std::vector<int>& grads = it->second;
    int total = grads[0];
    for (size_t k = 1; k < grads.size(); ++k) {
      total = append_backward_op(graph, site, "add", NoParams{}, {total, grads[k]}).at(0);
    }
    grads = {total};  // later calls reuse the sum
    return total;
  }

 private:
  std::map<int, std::vector<int>> contributions_;
};

// GradBuilder over the graph for one forward op: Value is a tensor index.
class GraphGradBuilder final : public GradBuilder {
 public:
  GraphGradBuilder(Graph& graph, int op_index, const std::vector<bool>& requires_grad,
                   GradientTable& table)
      : graph_(graph),
        op_index_(op_index),
        site_(BackwardSite::of(graph.op(op_index))),
        params_(graph.op(op_index).params),
        inputs_(graph.op(op_index).inputs),
        outputs_(graph.op(op_index).outputs),
        requires_grad_(requires_grad),
        table_(table) {
    // Sum every output's gradient before FGradient runs, so that calling output_grad(i) twice
    // emits one sum.
    for (int t : outputs_) output_grads_.push_back(table_.sum(graph_, t, site_));
  }

  const AnyParams& any_params() const override { return params_; }
  int num_inputs() const override { return static_cast<int>(inputs_.size()); }
  int num_outputs() const override { return static_cast<int>(outputs_.size()); }
  Value input(int i) override { return inputs_.at(i); }
  Value output(int i) override { return outputs_.at(i); }
  Value output_grad(int i) override { return output_grads_.at(i); }
  bool needs_input_grad(int i) const override { return requires_grad_[inputs_.at(i)]; }
  void set_input_grad(int i, Value grad) override {
    if (grad == kNone || !needs_input_grad(i)) return;
    const TensorMeta expected = graph_.tensor(inputs_[i]).meta;
    const TensorMeta actual = graph_.tensor(grad).meta;
    OFL_ASSERT(actual == expected)
        << graph_.op(op_index_).describe() << " gradient of input " << i << " is "
        << actual.shape.to_string() << " " << dtype_name(actual.dtype) << ", expected "
        << expected.shape.to_string() << " " << dtype_name(expected.dtype);
    table_.add(inputs_[i], grad);
  }
  TensorMeta meta(Value v) const override { return graph_.tensor(v).meta; }
  std::vector<Value> apply(std::string_view op, AnyParams params,
                           std::vector<Value> inputs) override {
    return append_backward_op(graph_, site_, op, std::move(params), std::move(inputs));
  }

 private:
  Graph& graph_;
  int op_index_;
  BackwardSite site_;
  AnyParams params_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::vector<int> output_grads_;
  const std::vector<bool>& requires_grad_;
  GradientTable& table_;
};

class AutogradPass final : public Pass {
 public:
  std::string name() const override { return "autograd"; }
  std::vector<std::string> needs() const override { return {"shapes"}; }
  std::vector<std::string> provides() const override { return {"gradients"}; }

  void run(Graph& graph, const CompileOptions&) override {
    const int loss = graph.train.loss;
    // Note [Given output gradients]: consumed here; the passes after rebuild tensors freely.
    const std::vector<std::pair<int, int>> given = std::move(graph.output_grads);
    graph.output_grads.clear();
    if (loss < 0 && given.empty()) return;
    OFL_CHECK(loss < 0 || given.empty(),
              "[autograd] a graph is differentiated from its loss or from given output "
              "gradients, not both. However, got the loss '",
              loss >= 0 ? graph.tensor(loss).name : "", "' and ", given.size(),
              " output gradients.");
    for (const auto& [t, grad] : given) {
      const LogicalTensor& y = graph.tensor(t);
      const LogicalTensor& dy = graph.tensor(grad);
      OFL_CHECK_TYPE(is_floating(y.meta.dtype) && dy.meta == y.meta,
                     "[autograd] a given output gradient must have its tensor's shape and "
                     "floating dtype. However, got '",
                     dy.name, "' ", dy.meta.shape.to_string(), " ", dtype_name(dy.meta.dtype),
                     " for '", y.name, "' ", y.meta.shape.to_string(), " ",
                     dtype_name(y.meta.dtype), ".");
    }
    // What the backward starts from, for messages: the loss or the given gradients.
    const std::string target =
        loss >= 0 ? str_cat("the loss '", graph.tensor(loss).name, "'") : "the given gradients";
    if (loss >= 0) {
      const LogicalTensor loss_tensor = graph.tensor(loss);  // a copy: ops get appended
      OFL_CHECK_TYPE(is_floating(loss_tensor.meta.dtype),
                     "[autograd] the loss must be a floating-point tensor. However, got '",
                     loss_tensor.name, "' ", loss_tensor.meta.shape.to_string(), " ",
                     dtype_name(loss_tensor.meta.dtype), ".");
      OFL_CHECK(loss_tensor.meta.shape.numel() == 1,
                "[autograd] the loss must have one element (reduce it first, e.g. with "
                "reduce_mean). However, got '",
                loss_tensor.name, "' of shape ", loss_tensor.meta.shape.to_string(), ".");
    }

    const std::vector<int> order = graph.topological_order();
    const int num_forward_tensors = graph.num_tensors();

    // Forward: which tensors depend on a trainable variable (or differentiable input, Note
    // [Input gradients]) through floating tensors.
    std::vector<bool> requires_grad(num_forward_tensors, false);
    for (int i : order) {
      const LogicalOp& op = graph.op(i);
      bool any = (op.kind == OpKind::kVariable || op.kind == OpKind::kInput) && op.trainable;
      // Note [Detach in a graph] (ops/reshape.cpp): a stop_gradient's output is a constant, and
      // so is that of an op traced under no_grad (Note [No grad in a trace]).
      if (op.kind == OpKind::kCompute && !op.schema->has<TStopsGradient>() && !op.no_grad) {
        for (int t : op.inputs) any = any || requires_grad[t];
      }
      for (int t : op.outputs) requires_grad[t] = any && is_floating(graph.tensor(t).meta.dtype);
    }
    // Backward: which of those the loss (or a tensor with a given gradient) depends on.
    std::vector<bool> reaches_loss(num_forward_tensors, false);
    if (loss >= 0) reaches_loss[loss] = requires_grad[loss];
    bool any_target = loss >= 0 && reaches_loss[loss];
    for (const auto& [t, grad] : given) {
      reaches_loss[t] = requires_grad[t];
      any_target = any_target || reaches_loss[t];
    }
    std::vector<int> on_path;  // reverse topological order
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const LogicalOp& op = graph.op(*it);
      if (op.kind != OpKind::kCompute) continue;
      bool feeds_loss = false;
      for (int t : op.outputs) feeds_loss = feeds_loss || reaches_loss[t];
      if (!feeds_loss) continue;
      on_path.push_back(*it);
      for (int t : op.inputs) reaches_loss[t] = reaches_loss[t] || requires_grad[t];
    }
    // Gradients only flow into tensors that lead to the loss.
    for (int t = 0; t < num_forward_tensors; ++t) requires_grad[t] = reaches_loss[t];
    if (!any_target) return;  // no trainable variable affects the loss

    for (int i : on_path) {
      const LogicalOp& op = graph.op(i);
      OFL_CHECK(op.schema->has<FGradient>(),
                "[autograd] every op between a trainable variable and the loss must be "
                "differentiable. However, got ",
                op.describe(), ", which is not differentiable (op type '", op.schema->name(),
                "' has no gradient), on the path to ", target, ".");
    }

    GradientTable table;
    for (const auto& [t, grad] : given) {
      if (reaches_loss[t]) table.add(t, grad);
    }
    // Seed: d(loss) = loss_scale, on the loss producer's placement; under dynamic loss scaling
    // the scale is a variable (Note [Dynamic loss scaling in a graph]).
    int scale = -1;
    if (loss >= 0) {
      // A copy: appending ops below may move the graph's ops.
      const LogicalOp producer = graph.op(graph.tensor(loss).producer);
      const BackwardSite site = BackwardSite::outside_groups(producer);
      const TensorMeta m = graph.tensor(loss).meta;
      int seed = append_backward_op(graph, site, "fill",
                                    FillParams{m.shape, m.dtype, seed_value(graph.train)}, {})
                     .at(0);
      if (graph.train.dynamic_loss_scale.enabled()) {
        scale = make_scale_variable(graph, producer, m.dtype);
        seed = append_backward_op(graph, site, "mul", NoParams{}, {seed, scale}).at(0);
      }
      table.add(loss, seed);
    }
    for (int i : on_path) {
      GraphGradBuilder builder(graph, i, requires_grad, table);
      (*graph.op(i).schema->get<FGradient>())(builder);
    }

    for (int i : order) {
      const LogicalOp& var = graph.op(i);
      if (var.kind != OpKind::kVariable || !var.trainable) continue;
      const int t = var.outputs.at(0);
      if (!reaches_loss[t]) continue;
      const BackwardSite site = BackwardSite::outside_groups(var);
      int grad = table.sum(graph, t, site);
      // A gradient function may emit nothing for an input (e.g. when only outputs it ignores
      // lead to the loss); as in eager mode the variable then has no gradient and no update.
      if (grad == GradBuilder::kNone) continue;
      // Loss scaling hook: the backward ran on loss * loss_scale (the seed); the update must
      // see the true gradient.
      if (graph.train.loss_scale != 1) {
        grad = append_backward_op(graph, site, "scalar_mul",
                                  ScalarParams{1.0 / graph.train.loss_scale}, {grad})
                   .at(0);
      }
      if (scale >= 0) {
        const int same_dtype =
            graph.tensor(grad).meta.dtype == graph.tensor(scale).meta.dtype
                ? scale
                : append_backward_op(graph, site, "cast", CastParams{graph.tensor(grad).meta.dtype},
                                     {scale})
                      .at(0);
        grad = append_backward_op(graph, site, "div", NoParams{}, {grad, same_dtype}).at(0);
      }
      graph.variable_grads[i] = grad;
    }
    fetch_input_grads(graph, order, reaches_loss, table);
    if (!given.empty()) {
      graph.backward_reads = backward_reads(graph);
      give_values(graph);
    }
  }

 private:
  // Note [Saved forward values]: the outputs of forward compute ops that backward ops read.
  static std::vector<std::string> backward_reads(const Graph& graph) {
    std::vector<std::string> names;
    std::set<int> seen;
    for (int i = 0; i < graph.num_ops(); ++i) {
      const LogicalOp& op = graph.op(i);
      if (op.role != OpRole::kBackward) continue;
      for (int t : op.inputs) {
        const LogicalOp& producer = graph.op(graph.tensor(t).producer);
        if (producer.kind != OpKind::kCompute || producer.role != OpRole::kForward) continue;
        if (seen.insert(t).second) names.push_back(graph.tensor(t).name);
      }
    }
    return names;
  }

  // Note [Saved forward values]: each given forward tensor becomes an input the backward reads.
  static void give_values(Graph& graph) {
    for (const auto& [name, given] : graph.given_values) {
      // A name the graph lacks (or an input's) is computed as without it: never wrong.
      const std::optional<int> found = graph.find_tensor(name);
      if (!found.has_value()) continue;
      const int t = *found;
      if (graph.op(graph.tensor(t).producer).kind != OpKind::kCompute) continue;
      const LogicalOp producer = graph.op(graph.tensor(t).producer);  // a copy: ops get added
      LogicalOp input;
      input.name = given.first;
      input.kind = OpKind::kInput;
      input.placement = producer.placement;
      input.stage = producer.stage;
      input.location = producer.location;
      input.output_sbp_hints = {given.second};
      const TensorMeta meta = graph.tensor(t).meta;
      const int op = graph.add_op(std::move(input), 1, {given.first});
      const int value = graph.op(op).outputs.at(0);
      graph.tensor(value).meta = meta;
      for (int i = 0; i < graph.num_ops(); ++i) {
        LogicalOp& reader = graph.op(i);
        if (reader.role != OpRole::kBackward) continue;
        for (int& in : reader.inputs) {
          if (in == t) in = value;
        }
      }
    }
  }

  // Note [Input gradients]: an input op marked trainable (eager autograd of global tensors
  // differentiates a one-op graph with respect to its inputs) gets its gradient fetched; the
  // graph records where, by the input's name. Inputs whose gradient is one tensor share it.
  static void fetch_input_grads(Graph& graph, const std::vector<int>& order,
                                const std::vector<bool>& reaches_loss, GradientTable& table) {
    for (int i : order) {
      const LogicalOp input = graph.op(i);  // a copy: summing may append ops
      if (input.kind != OpKind::kInput || !input.trainable) continue;
      const int t = input.outputs.at(0);
      if (!reaches_loss[t]) continue;
      const int grad = table.sum(graph, t, BackwardSite::outside_groups(input));
      // (With given output gradients it may be one of them: an add's input gets dy as it is.)
      if (grad == GradBuilder::kNone) continue;
      const auto at = std::find(graph.fetches.begin(), graph.fetches.end(), grad);
      if (at == graph.fetches.end()) graph.fetches.push_back(grad);
      graph.input_grad_fetches[input.name] = static_cast<int>(
          std::find(graph.fetches.begin(), graph.fetches.end(), grad) - graph.fetches.begin());
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_autograd_pass() { return std::make_unique<AutogradPass>(); }

}  // namespace ofl::compiler
