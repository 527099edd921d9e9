#include "compiler/passes/gradient_reduction.h"

#include <algorithm>
#include <array>
#include <string>

#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/shape_ops.h"

namespace ofl::compiler::optimizer_ops {

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

}  // namespace ofl::compiler::optimizer_ops
