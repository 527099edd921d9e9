// Optimizer ops on the logical graph: gradient clipping by global norm, the optimizer's state
// variables and one in-place update op per trainable variable (sgd_update, adam_update).
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
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/shape_ops.h"

namespace ofl::compiler {

namespace {

// Where an optimizer op goes: placement, stage and source line.
struct Site {
  Placement placement;
  int stage = 0;
  std::string location;

  static Site of(const LogicalOp& op) { return Site{op.placement, op.stage, op.location}; }
};

// Appends compute op `type` named `base` (made unique) with role kOptimizer; returns its outputs.
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

// Appends an input or variable op whose one output tensor has the op's name.
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

// A zero-initialised, non-trainable variable shaped and laid out like `var` (optimizer state),
// or sharded as ZeRO stages 1 and 2 record (Note [ZeRO stages 1 and 2] in zero.cpp).
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

struct Update {
  int var_op;
  int grad;  // tensor
};

// `t` as a new tensor laid out as `layout` (an identity reshape with that output hint: SBP
// inference boxes `t` into it).
int laid_out(Graph& graph, const Site& site, const std::string& base, int t, const NdSbp& layout) {
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

// Whether tensor t is the output of a layout reshape (laid_out) to `layout`.
bool laid_out_as(const Graph& graph, int t, const NdSbp& layout) {
  const LogicalOp& producer = graph.op(graph.tensor(t).producer);
  return producer.schema->name() == "reshape" && producer.output_sbp_hints.size() == 1 &&
         producer.output_sbp_hints[0] == layout;
}

// Note [Reduce gradients before clipping]: the gradient laid out as its variable (B over data
// parallel ranks, S under ZeRO): a reshape carrying the variable's SBP as a hint, so its
// reduction is boxing right after the backward op that made it, overlapping the rest of the
// backward. Without it, SBP inference leaves each gradient partial through the clip's multiply
// (P * B is P) and reduces it only after the global norm, when all of backward is over, and
// reduces it a second time for the norm itself (measured: GPT DP2 69 ms a step instead of 56).
// A gradient already laid out so (Note [Sharded gradients under accumulation]) stays as it is.
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
  if (laid_out_as(graph, u.grad, layout)) return u.grad;
  return laid_out(graph, site, base + "/reduced", u.grad, layout);
}

// Note [Gradient reduction dtype] below: `grad` cast down to `reduce` when it is float32.
int lowered(Graph& graph, const Site& site, const std::string& name, int grad, DataType reduce) {
  if (graph.tensor(grad).meta.dtype != DataType::kFloat32) return grad;
  return cast_to(graph, site, name + ".grad/" + dtype_name(reduce), grad, reduce);
}

// Note [Sharded gradients under accumulation]: with several micro-batches a reduction that runs
// once per step sums the micro-batches' gradients whole first (ACCUMULATE, Note [Micro-batches]
// in plan.proto), which keeps a whole gradient per variable for the step: ZeRO-2 and -3 would
// then hold more than ZeRO-1 (measured: GPT 4 x 256 on DP2, 4 micro-batches, ZeRO-2 planned
// 91.0 MiB against ZeRO-1's 79.8). So, before anything else reads them, the gradients of the
// variables ZeRO sharded (Graph::zero_grad_shards) are reduce-scattered every micro-batch, as
// DeepSpeed does, and accumulate as shards: the layout reshape acts in the backward's scope.
// Under a bfloat16 reduction (Note [Gradient reduction dtype]) the gradient is cast down and
// back in that scope too, so the shards still accumulate in float32. m reductions a step
// instead of one, for a shard-sized accumulator (ZeRO-2 then planned 61.7 MiB).
// Returns the variable ops whose gradients it reduced.
std::set<int> shard_gradients_per_micro_batch(Graph& graph, std::vector<Update>& updates,
                                              DataType reduce) {
  std::set<int> reduced;
  if (graph.train.gradient_accumulation_steps <= 1) return reduced;
  for (Update& u : updates) {
    const auto shard = graph.zero_grad_shards.find(u.var_op);
    if (shard == graph.zero_grad_shards.end()) continue;
    const NdSbp layout = shard->second;  // copies: appending ops moves the graph's ops
    const std::string name = graph.op(u.var_op).name;
    const Site site = Site::of(graph.op(u.var_op));
    const DataType dtype = graph.tensor(u.grad).meta.dtype;
    auto in_backward = [&](int t) {  // an op made here acts every micro-batch
      if (t != u.grad) graph.op(graph.tensor(t).producer).role = OpRole::kBackward;
      return t;
    };
    int grad = in_backward(lowered(graph, site, name, u.grad, reduce));
    grad = in_backward(laid_out(graph, site, name + ".grad/reduced", grad, layout));
    if (graph.train.zero_stage == 2) {
      graph.zero_reductions.emplace(u.var_op, graph.tensor(grad).producer);
    }
    if (graph.tensor(grad).meta.dtype != dtype) {
      grad = in_backward(cast_to(graph, site, name + ".grad/" + dtype_name(dtype), grad, dtype));
    }
    u.grad = grad;
    reduced.insert(u.var_op);
  }
  return reduced;
}

// Note [Pacing ZeRO-2 reductions]: a gradient's reduce-scatter can run as soon as the backward
// op making it has run, but the op reading its shard sits wherever the topological order puts
// it, which follows the backward first: after all of it. Memory planning bounds a collective by
// its readers (Note [Collective windows] in physical/memory_planning.cpp), so every whole
// gradient, and its reduction's working memory, would live until the backward ends, and stage 2
// would save nothing over stage 1. So the reader of gradient k's shard waits for the backward
// op making gradient k + 1 (a control edge, same placement, backward order) and each rank's
// task order lists it as soon as it may (LogicalOp::schedule_early, sort_rank_tasks in
// compile.cpp): each reduction overlaps the backward ops up to the next gradient, and about two
// gradients are whole at once, as DeepSpeed's stage 2 overlaps its buckets. (A control edge
// into a later backward op instead would block that op and let the order run down the rest of
// the backward first, keeping activations alive.) Stage 3 is not paced: doing the same there
// changed no planned peak measured (its peaks lie at the gathers). Under gradient accumulation
// the shards' readers act every micro-batch (Note [Sharded gradients under accumulation]), so
// the pacing holds within each micro-batch's backward.
void pace_zero_reductions(Graph& graph, const std::map<int, int>& grad_producers) {
  if (graph.zero_reductions.empty()) return;
  const std::vector<int> order = graph.topological_order();
  std::vector<int> position(graph.num_ops(), -1);
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  // Per placement: (position of the gradient's producer, that producer, the shard's reader).
  std::map<std::string, std::vector<std::array<int, 3>>> by_placement;
  for (const auto& [var_op, reader] : graph.zero_reductions) {
    const auto producer = grad_producers.find(var_op);
    if (producer == grad_producers.end() || producer->second < 0) continue;
    const Placement& placement = graph.op(var_op).placement;
    if (graph.op(producer->second).placement != placement) continue;
    by_placement[placement.to_string()].push_back(
        {position[producer->second], producer->second, reader});
  }
  for (auto& [key, list] : by_placement) {
    std::sort(list.begin(), list.end());
    for (size_t k = 0; k < list.size(); ++k) {
      LogicalOp& reader = graph.op(list[k][2]);
      reader.schedule_early = true;
      // The next gradient's producer, later in the order than gradient k's, never reads the
      // reader (which only the update and its layout ops follow): no cycle.
      const size_t next = k + 1;
      if (next >= list.size() || list[next][0] <= list[k][0]) continue;
      std::vector<int>& control = reader.control_inputs;
      if (std::find(control.begin(), control.end(), list[next][1]) == control.end()) {
        control.push_back(list[next][1]);
      }
    }
  }
}

// Note [Gradient buckets]: the gradients of replicated variables (B on every placement
// dimension) of one placement and dtype are flattened, concatenated into buckets of about
// `bucket_bytes`, laid out as their variables (one reduction per bucket instead of one per
// variable) and sliced back; the latest variables first, as the backward makes their gradients
// first. Fewer, larger transfers: each reduction's steps cost actor messages and the
// communication thread's time whatever their size (measured: GPT DP2 on 2 cores, 68-70 ms a
// step one by one, 60-61 ms with one 4 MiB bucket). Split or partial-sum variables (TP, ZeRO)
// keep their own layouts. The reduction sums in place and each gradient is a view of its run
// of the bucket (Note [All-reduces in place] in physical/in_place_boxing.h, Note [Slices in a
// plan] in physical/expansion.h): a bucket is the only copy of its gradients from the concat to
// the update.
//
// Note [Buckets under accumulation]: with micro-batches each gradient is flattened in the
// backward's scope, so that it is the flat gradient that ACCUMULATE sums over the micro-batches
// (Note [Micro-batches] in plan.proto), and the once-per-step concat of the flat sums is in
// place (Note [Concats in place] in physical/in_place_boxing.h): each accumulator is its run of
// the bucket, the all-reduce sums the bucket in place and each gradient is read back as a view.
// A step then holds one whole gradient, the buckets, and each micro-batch's gradient is added
// into its run as soon as the backward makes it, copied nowhere. Summed per variable and
// copied into buckets at the end instead, the accumulators, the buckets and the reductions'
// results lived at once (2.7 whole gradients on the GPT of docs/benchmarks.md). Under a
// bfloat16 reduction (Note [Gradient reduction dtype]) the float32 bucket is cast down once per
// step, so the micro-batches still accumulate in float32: the caller buckets before it lowers
// the other gradients.
void bucket_gradients(Graph& graph, std::vector<Update>& updates, int64_t bucket_bytes,
                      DataType reduce) {
  if (bucket_bytes <= 0) return;
  const bool accumulating = graph.train.gradient_accumulation_steps > 1;
  auto replicated = [&](const LogicalOp& var) {
    if (var.placement.num_ranks() < 2 || var.output_sbp_hints.empty()) return false;
    for (const Sbp& s : var.output_sbp_hints[0]) {
      if (!s.is_broadcast()) return false;
    }
    return !var.output_sbp_hints[0].empty();
  };
  // Under accumulation a bucket is made in the backward's scope: of gradients the backward made.
  auto bucketable = [&](const Update& u) {
    return !accumulating || graph.op(graph.tensor(u.grad).producer).role == OpRole::kBackward;
  };
  std::vector<size_t> order;
  for (size_t i = updates.size(); i-- > 0;) {
    // ZeRO-2 reduce-scatters each gradient to its shard instead (Note [ZeRO stages 1 and 2]).
    const bool scattered =
        graph.train.zero_stage == 2 && graph.zero_shards.count(updates[i].var_op) > 0;
    if (replicated(graph.op(updates[i].var_op)) && !scattered && bucketable(updates[i])) {
      order.push_back(i);
    }
  }
  size_t start = 0;
  int bucket_index = 0;
  while (start < order.size()) {
    // Copies: appending ops below moves the graph's ops.
    const LogicalOp& first_var = graph.op(updates[order[start]].var_op);
    const Placement placement = first_var.placement;
    const NdSbp layout = first_var.output_sbp_hints[0];
    const Site site = Site::of(first_var);
    const DataType dtype = graph.tensor(updates[order[start]].grad).meta.dtype;
    std::vector<size_t> members;
    int64_t bytes = 0;
    size_t i = start;
    for (; i < order.size(); ++i) {
      const Update& u = updates[order[i]];
      const LogicalOp& var = graph.op(u.var_op);
      const TensorMeta& meta = graph.tensor(u.grad).meta;
      if (var.placement != placement || var.output_sbp_hints[0] != layout || meta.dtype != dtype ||
          (!members.empty() && bytes >= bucket_bytes)) {
        break;
      }
      members.push_back(order[i]);
      bytes += meta.shape.numel() * static_cast<int64_t>(dtype_size(dtype));
    }
    start = i;
    if (members.size() < 2) continue;
    const std::string base = str_cat("grad_bucket", bucket_index++);
    auto in_backward = [&](int t) {  // under accumulation: acts every micro-batch
      if (accumulating) graph.op(graph.tensor(t).producer).role = OpRole::kBackward;
      return t;
    };
    std::vector<int> flats;
    std::vector<int64_t> sizes;
    for (size_t m : members) {
      const Shape& shape = graph.tensor(updates[m].grad).meta.shape;
      sizes.push_back(shape.numel());
      flats.push_back(
          in_backward(append_op1(graph, site, base + "/flat", "reshape",
                                 ReshapeParams{Shape{shape.numel()}}, {updates[m].grad})));
    }
    const int cat = append_op1(graph, site, base + "/concat", "concat", ConcatParams{0}, flats);
    const int reduced =
        laid_out(graph, site, base + "/reduced", lowered(graph, site, base, cat, reduce), layout);
    int64_t offset = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      Update& u = updates[members[k]];
      const int part = append_op1(graph, site, base + "/slice", "slice",
                                  SliceParams{{offset}, {offset + sizes[k]}, {1}}, {reduced});
      offset += sizes[k];
      u.grad = append_op1(graph, site, base + "/unflat", "reshape",
                          ReshapeParams{graph.tensor(u.grad).meta.shape}, {part});
    }
  }
}

// Note [Gradient reduction dtype]: with TrainConfig::grad_reduce_dtype bfloat16 each float32
// gradient is cast down while still a partial sum (cast is linear: P -> P), reduced in
// bfloat16, bucketed or alone, by the boxing its variable's layout asks for, and cast back to
// float32 for clipping and the update: half the bytes on the wire, each rank's partial rounded
// once to bfloat16 and the sum kept in bfloat16 (as FSDP's reduce_dtype and DeepSpeed's
// communication_data_type do).
void lower_gradients(Graph& graph, std::vector<Update>& updates, DataType reduce,
                     const std::set<int>& reduced) {
  for (Update& u : updates) {
    if (reduced.count(u.var_op) > 0) continue;  // Note [Sharded gradients under accumulation]
    const LogicalOp& var = graph.op(u.var_op);
    u.grad = lowered(graph, Site::of(var), var.name, u.grad, reduce);
  }
}

// The other half: each lowered gradient laid out as its variable (the reduction happens there,
// in bfloat16) and cast back to its variable's dtype.
void restore_gradients(Graph& graph, std::vector<Update>& updates) {
  for (Update& u : updates) {
    // Copies: appending ops moves the graph's ops.
    const std::string name = graph.op(u.var_op).name;
    const DataType want = graph.tensor(graph.op(u.var_op).outputs.at(0)).meta.dtype;
    if (graph.tensor(u.grad).meta.dtype == want) continue;
    const Site site = Site::of(graph.op(u.var_op));
    u.grad = in_variable_layout(graph, site, name + ".grad", u);
    u.grad = cast_to(graph, site, name + ".grad/" + dtype_name(want), u.grad, want);
  }
}

// Note [Dynamic loss scaling in a graph]: the inf and nan elements of every gradient, counted
// where it lives in its variable's layout, summed on the loss scale's placement.
int count_nonfinite(Graph& graph, std::vector<Update>& updates) {
  const Site scale_site = Site::of(graph.op(graph.tensor(graph.loss_scale_tensor).producer));
  int total = -1;
  for (Update& u : updates) {
    const Site site = Site::of(graph.op(u.var_op));
    const std::string base = graph.op(u.var_op).name + ".grad";
    u.grad = in_variable_layout(graph, site, base, u);
    const int count =
        append_op1(graph, site, base + "/nonfinite", "count_nonfinite", NoParams{}, {u.grad});
    total = total < 0 ? count
                      : append_op1(graph, scale_site, "loss_scale/nonfinite", "add", NoParams{},
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

// torch.nn.utils.clip_grad_norm_ over all gradients:
//   total = sqrt(sum_g sum(g * g)),  g *= where(total > max_norm, max_norm / (total + 1e-6), 1).
// Each sum(g * g) runs where g lives (a scalar crosses placements, not the gradient); the total
// and the coefficient run on the first variable's placement.
void clip_by_global_norm(Graph& graph, double max_norm, std::vector<Update>& updates) {
  const Site norm_site = Site::of(graph.op(updates[0].var_op));
  const DataType dtype = graph.tensor(updates[0].grad).meta.dtype;
  int total_sq = -1;
  for (Update& u : updates) {
    const Site site = Site::of(graph.op(u.var_op));
    const std::string base = graph.op(u.var_op).name + ".clip";
    u.grad = in_variable_layout(graph, site, base, u);
    const int sq = append_op1(graph, site, base + "/square", "mul", NoParams{}, {u.grad, u.grad});
    int sum_sq = append_op1(graph, site, base + "/sum_sq", "reduce_sum",
                            ReduceParams{/*axes=*/{}, /*keepdims=*/false}, {sq});  // ()
    sum_sq = cast_to(graph, site, base + "/cast", sum_sq, dtype);
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
  const int coefficient = append_op1(graph, norm_site, "clip_grad_norm/coefficient", "where",
                                     NoParams{}, {over, ratio, one});  // ()
  for (Update& u : updates) {
    const Site site = Site::of(graph.op(u.var_op));
    const std::string base = graph.op(u.var_op).name + ".clip";
    const int c =
        cast_to(graph, site, base + "/cast", coefficient, graph.tensor(u.grad).meta.dtype);
    u.grad = append_op1(graph, site, base + "/mul", "mul", NoParams{}, {u.grad, c});
  }
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
// the parameter `param`. The assign waits (a control input) for the update just appended, so it
// and the gather of the shard read the updated values; the parameter's other readers come first
// (Note [In-place updates wait for readers] in compile.cpp).
void write_back(Graph& graph, const Site& site, const std::string& var_name, int param, int shard) {
  const int update = graph.num_ops() - 1;
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
    // Graph::variable_grads keeps the unclipped gradients; only the updates read clipped ones.
    if (config.clip_grad_max_norm > 0) {
      clip_by_global_norm(graph, config.clip_grad_max_norm, updates);
    }
    const bool adam =
        config.kind == OptimizerConfig::Kind::kAdam || config.kind == OptimizerConfig::Kind::kAdamW;
    // Under dynamic loss scaling Adam counts the steps applied in the graph (applied_steps).
    HyperParameterInputs hyper(graph, /*with_step=*/adam && found < 0);
    for (Update& u : updates) {
      const int group = group_of(config, graph.op(u.var_op).name);
      const double weight_decay = config.group_weight_decay.empty()
                                      ? config.weight_decay
                                      : config.group_weight_decay[group];
      auto [lr, step] = hyper.for_variable(u.var_op, group);
      if (adam && found >= 0) {
        const Site site = Site::of(graph.op(u.var_op));
        const std::string base = graph.op(u.var_op).name + ".step";
        const int next =
            append_op1(graph, site, base, "scalar_add", ScalarParams{1.0}, {applied_steps(graph)});
        step = cast_to(graph, site, base, next,
                       graph.tensor(graph.op(u.var_op).outputs.at(0)).meta.dtype);
      }
      int param = graph.op(u.var_op).outputs.at(0);
      const Site site = Site::of(graph.op(u.var_op));
      const std::string var_name = graph.op(u.var_op).name;
      // Note [ZeRO stages 1 and 2] in zero.cpp: the update runs on this rank's shards of a
      // replicated parameter and its gradient, and writes the gathered result back.
      const auto shard = graph.zero_shards.find(u.var_op);
      const int whole_param = param;
      if (shard != graph.zero_shards.end()) {
        const NdSbp layout = shard->second;
        param = laid_out(graph, site, var_name + ".shard", param, layout);
        u.grad = laid_out(graph, site, var_name + ".grad/shard",
                          in_variable_layout(graph, site, var_name + ".grad", u), layout);
      }
      if (adam) {
        const int exp_avg = append_state(graph, u.var_op, ".exp_avg");
        const int exp_avg_sq = append_state(graph, u.var_op, ".exp_avg_sq");
        const AdamParams params{
            config.beta1, config.beta2, config.epsilon, weight_decay,
            /*decoupled_weight_decay=*/config.kind == OptimizerConfig::Kind::kAdamW};
        std::vector<int> inputs{param, u.grad, exp_avg, exp_avg_sq, lr, step};
        if (found >= 0) inputs.push_back(skip_input(graph, site, var_name, found, param));
        append_op(graph, site, var_name + ".adam_update",
                  found >= 0 ? "adam_update_skippable" : "adam_update", params, inputs);
        if (shard != graph.zero_shards.end()) write_back(graph, site, var_name, whole_param, param);
      } else {
        // See Note [Compiled SGD first step] for dampening != 0.
        const int momentum = append_state(graph, u.var_op, ".momentum");
        const SgdParams params{config.momentum, config.dampening, weight_decay, config.nesterov};
        std::vector<int> inputs{param, u.grad, momentum, lr};
        if (found >= 0) inputs.push_back(skip_input(graph, site, var_name, found, param));
        append_op(graph, site, var_name + ".sgd_update",
                  found >= 0 ? "sgd_update_skippable" : "sgd_update", params, inputs);
        if (shard != graph.zero_shards.end()) write_back(graph, site, var_name, whole_param, param);
      }
    }
    if (found >= 0) update_loss_scale(graph, found);
    pace_zero_reductions(graph, grad_producers);
  }
};

}  // namespace

std::unique_ptr<Pass> make_optimizer_pass() { return std::make_unique<OptimizerPass>(); }

}  // namespace ofl::compiler
