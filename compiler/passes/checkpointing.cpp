// Activation checkpointing: the forward activations of a checkpoint group are recomputed for the
// group's backward instead of being kept from the forward pass.
//
// Note [Activation checkpointing]
// -------------------------------
// A group is the set of forward compute ops with one LogicalOp::checkpoint_group; autograd gives
// each backward op its forward op's group (the seed and the variables' gradient sums get none).
// For each group, after autograd:
//   1. the tensors produced by the group's forward ops and read by the group's backward ops are
//      the activations a backward would keep;
//   2. the group's forward ops they depend on are copied (LogicalOp::recompute), reading the
//      group's inputs (tensors made outside the group: the checkpoints, variables, inputs) and
//      each other's copies;
//   3. the group's backward ops read the copies instead of the originals, so the originals die
//      in the forward pass (their forward consumers are their last readers);
//   4. the copies that read no other copy get control inputs from the ops that produce the
//      gradients flowing into the group's backward from outside (the gradients of the group's
//      outputs), so the recomputation runs when the backward reaches the group and not during
//      the forward: the topological order (and so the plan's chain order, on which memory
//      planning bases lifetimes) puts it there.
// Backward ops of ops outside the group keep reading the originals (a group's output is the
// next op's input; torch.utils.checkpoint keeps it too).
//
// Random ops (dropout, random_normal) take their seed and offset as params, so a copy draws the
// same values as the original: the recomputation is exact. Common-subexpression elimination
// skips the copies (they equal the originals on purpose). A gradient that comes from another
// placement (a group output crossing a pipeline stage) is first copied onto the group's
// placement by a same-shape reshape (a COPY task after boxing), because a control input needs
// both ops on one placement.
//
// A group must be convex: no path may leave it and come back (the recomputation would then wait
// for a gradient that needs its own results).

#include <algorithm>
#include <map>
#include <set>

#include "compiler/passes/passes.h"
#include "oneflowlike/ops/reshape.h"

namespace ofl::compiler {

namespace {

bool is_group_forward(const LogicalOp& op, const std::string& group) {
  return op.kind == OpKind::kCompute && op.role == OpRole::kForward && !op.recompute &&
         op.checkpoint_group == group;
}

bool is_group_backward(const LogicalOp& op, const std::string& group) {
  return op.kind == OpKind::kCompute && op.role == OpRole::kBackward &&
         op.checkpoint_group == group;
}

class Checkpointer {
 public:
  Checkpointer(Graph& graph, std::string group)
      : graph_(graph), group_(std::move(group)), order_(graph.topological_order()) {}

  void run() {
    const int num_ops = graph_.num_ops();
    for (int i = 0; i < num_ops; ++i) {
      if (is_group_forward(graph_.op(i), group_)) forward_.insert(i);
      if (is_group_backward(graph_.op(i), group_)) backward_.push_back(i);
    }
    if (forward_.empty()) return;
    check_convex();

    // 1. The activations the group's backward reads.
    std::set<int> kept;
    for (int b : backward_) {
      for (int t : graph_.op(b).inputs) {
        if (forward_.count(graph_.tensor(t).producer)) kept.insert(t);
      }
    }
    if (kept.empty()) return;

    // 2. The forward ops those depend on inside the group, copied in topological order.
    std::set<int> needed;
    std::vector<int> stack;
    for (int t : kept) stack.push_back(graph_.tensor(t).producer);
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      if (!needed.insert(i).second) continue;
      for (int t : graph_.op(i).inputs) {
        if (forward_.count(graph_.tensor(t).producer)) stack.push_back(graph_.tensor(t).producer);
      }
    }
    std::vector<int> after = gradient_producers();
    const std::vector<int> later = later_backward_ops();
    after.insert(after.end(), later.begin(), later.end());
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    std::map<int, int> copy_of;  // original tensor -> recomputed tensor
    for (int i : order_) {
      if (!needed.count(i)) continue;
      LogicalOp op = graph_.op(i);  // a copy: adding ops moves the graph's ops
      OFL_ASSERT(!writes_inputs(*op.schema)) << op.describe();
      const std::vector<int> originals = op.outputs;
      op.name = graph_.unique_name(op.name + ".recompute");
      op.recompute = true;
      op.signature = {};
      op.control_inputs.clear();
      bool root = true;
      for (int& t : op.inputs) {
        auto it = copy_of.find(t);
        if (it == copy_of.end()) continue;
        t = it->second;
        root = false;
      }
      if (root) {
        for (int a : after) {
          if (graph_.op(a).placement == op.placement) op.control_inputs.push_back(a);
        }
      }
      const std::vector<int> outputs = graph_.add_compute_op(
          std::move(op), str_cat(" (recomputed for checkpoint group '", group_, "')"));
      for (size_t k = 0; k < outputs.size(); ++k) copy_of[originals[k]] = outputs[k];
    }

    // 3. The group's backward reads the copies.
    for (int b : backward_) {
      for (int& t : graph_.op(b).inputs) {
        if (kept.count(t)) t = copy_of.at(t);
      }
    }
  }

 private:
  // Raises when some forward op outside the group lies on a path between two of its ops.
  void check_convex() {
    const auto consumers = graph_.consumers();
    std::set<int> below;  // forward ops outside the group reachable from it
    std::vector<int> stack(forward_.begin(), forward_.end());
    std::set<int> visited;
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      for (int t : graph_.op(i).outputs) {
        for (int c : consumers[t]) {
          const LogicalOp& op = graph_.op(c);
          if (op.role != OpRole::kForward || op.recompute || !visited.insert(c).second) continue;
          if (!forward_.count(c)) below.insert(c);
          stack.push_back(c);
        }
      }
    }
    for (int i : forward_) {
      for (int t : graph_.op(i).inputs) {
        const int p = graph_.tensor(t).producer;
        OFL_CHECK(!below.count(p), "[checkpointing] the ops of checkpoint group '", group_,
                  "' must form one segment of the forward graph: no path may leave the group and "
                  "come back. However, got ",
                  graph_.op(i).describe(), " reading '", graph_.tensor(t).name, "' from ",
                  graph_.op(p).describe(), ", which is outside the group and depends on it.");
      }
    }
  }

  // The last backward ops (those whose outputs no other backward op of their group reads: weight
  // gradients, the gradient leaving the group) of the checkpoint groups that come right after
  // this one in the forward graph (reached without passing another group). Without them the
  // topological order leaves weight gradients for last, and they would keep this group's
  // recomputed activations alive until the end of the backward (Note [Activation
  // checkpointing]).
  std::vector<int> later_backward_ops() {
    const auto consumers = graph_.consumers();
    std::set<std::string> next_groups;
    std::set<int> visited;
    std::vector<int> stack(forward_.begin(), forward_.end());
    while (!stack.empty()) {
      const int i = stack.back();
      stack.pop_back();
      for (int t : graph_.op(i).outputs) {
        for (int c : consumers[t]) {
          const LogicalOp& op = graph_.op(c);
          if (op.kind != OpKind::kCompute || op.role != OpRole::kForward || op.recompute ||
              forward_.count(c) || !visited.insert(c).second) {
            continue;
          }
          if (op.checkpoint_group.empty()) {
            stack.push_back(c);
          } else {
            next_groups.insert(op.checkpoint_group);
          }
        }
      }
    }
    std::vector<int> last;
    for (const std::string& group : next_groups) {
      for (int b = 0; b < graph_.num_ops(); ++b) {
        if (!is_group_backward(graph_.op(b), group)) continue;
        bool read_inside = false;
        for (int t : graph_.op(b).outputs) {
          for (int c : consumers[t])
            read_inside = read_inside || is_group_backward(graph_.op(c), group);
        }
        if (!read_inside) last.push_back(b);
      }
    }
    return last;
  }

  // The ops that produce the gradients flowing into the group's backward from outside it (the
  // gradients of the group's outputs, or the loss seed). A gradient made on another placement is
  // first copied onto the reader's placement (Note [Activation checkpointing]).
  std::vector<int> gradient_producers() {
    std::set<int> producers;
    std::map<std::pair<int, std::string>, int> relays;  // (tensor, placement) -> relay tensor
    for (int b : backward_) {
      for (size_t k = 0; k < graph_.op(b).inputs.size(); ++k) {
        const int t = graph_.op(b).inputs[k];
        const int p = graph_.tensor(t).producer;
        const LogicalOp& producer = graph_.op(p);
        if (producer.kind != OpKind::kCompute || producer.role != OpRole::kBackward ||
            producer.checkpoint_group == group_) {
          continue;
        }
        const Placement placement = graph_.op(b).placement;
        if (producer.placement == placement) {
          producers.insert(p);
          continue;
        }
        auto [it, fresh] = relays.try_emplace({t, placement.to_string()}, -1);
        if (fresh) it->second = relay(t, graph_.op(b));
        graph_.op(b).inputs[k] = it->second;
        producers.insert(graph_.tensor(it->second).producer);
      }
    }
    return std::vector<int>(producers.begin(), producers.end());
  }

  // A same-shape reshape of gradient `t` on `reader`'s placement: after boxing it acts once the
  // gradient has arrived, so it can order the recomputation there.
  int relay(int t, const LogicalOp& reader) {
    const LogicalTensor tensor = graph_.tensor(t);
    LogicalOp op;
    op.schema = &OpRegistry::global().find("reshape");
    op.name = graph_.unique_name(tensor.name + ".to_group");
    op.params = ReshapeParams{tensor.meta.shape};
    op.inputs = {t};
    op.placement = reader.placement;
    op.stage = reader.stage;
    op.location = reader.location;
    op.role = OpRole::kBackward;
    op.checkpoint_group = group_;
    return graph_.add_compute_op(std::move(op)).at(0);
  }

  Graph& graph_;
  std::string group_;
  std::vector<int> order_;  // of the graph as autograd left it
  std::set<int> forward_;
  std::vector<int> backward_;
};

class CheckpointingPass final : public Pass {
 public:
  std::string name() const override { return "checkpointing"; }
  std::vector<std::string> needs() const override { return {"gradients"}; }

  void run(Graph& graph, const CompileOptions&) override {
    std::set<std::string> groups;
    for (int i = 0; i < graph.num_ops(); ++i) {
      const LogicalOp& op = graph.op(i);
      if (!op.checkpoint_group.empty() && op.kind == OpKind::kCompute) {
        groups.insert(op.checkpoint_group);
      }
    }
    if (graph.train.loss < 0) return;  // inference keeps no activations for a backward
    for (const std::string& group : groups) Checkpointer(graph, group).run();
  }
};

}  // namespace

std::unique_ptr<Pass> make_checkpointing_pass() { return std::make_unique<CheckpointingPass>(); }

}  // namespace ofl::compiler
