#include "oneflowlike/autograd.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "oneflowlike/eager.h"

namespace ofl {

namespace {
thread_local bool grad_mode_enabled = true;

std::shared_ptr<AutogradMeta>& meta_of(const Tensor& t) { return t.impl()->autograd; }

}  // namespace

AutogradNode::~AutogradNode() {
  std::vector<std::shared_ptr<AutogradNode>> doomed;
  for (AutogradEdge& e : next) {
    if (e.node) doomed.push_back(std::move(e.node));
  }
  while (!doomed.empty()) {
    std::shared_ptr<AutogradNode> node = std::move(doomed.back());
    doomed.pop_back();
    if (node.use_count() == 1) {  // the last keeper: its own edges go on the list first
      for (AutogradEdge& e : node->next) {
        if (e.node) doomed.push_back(std::move(e.node));
      }
    }
  }  // each node is freed here with no node edges left, so no destructor recurses
}

bool GradMode::enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

bool Tensor::requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }

void Tensor::set_requires_grad(bool requires_grad) {
  OFL_CHECK(is_leaf() || requires_grad,
            "[requires_grad] only a leaf tensor can stop requiring "
            "grad; use detach() for a tensor computed from others. However, got ",
            describe(), ".");
  OFL_CHECK_TYPE(!requires_grad || is_floating(dtype()),
                 "[requires_grad] only floating-point tensors can require gradients. However, got ",
                 describe(), ".");
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->requires_grad = requires_grad;
}

bool Tensor::is_leaf() const { return !impl_->autograd || impl_->autograd->grad_fn == nullptr; }

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->grad = grad;
}

namespace {

// The node's edges to its inputs and the outputs' autograd metas (record_autograd and
// record_function).
void connect(const std::shared_ptr<AutogradNode>& node, const std::vector<Tensor>& inputs,
             std::vector<Tensor>& outputs) {
  node->inputs.reserve(inputs.size());
  node->next.resize(inputs.size());
  node->num_outputs = outputs.size();
  node->versions.reserve(inputs.size() + outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->versions.push_back(inputs[i].version());
    node->inputs.push_back(inputs[i].detach());
    const auto& meta = meta_of(inputs[i]);
    if (!meta || !meta->requires_grad) continue;
    if (meta->grad_fn) {
      node->next[i].node = meta->grad_fn;
      node->next[i].output_index = meta->output_index;
    } else {
      node->next[i].leaf = meta;
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    node->versions.push_back(outputs[i].version());
    node->outputs.push_back(outputs[i].detach());
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = is_floating(outputs[i].dtype());
    meta->grad_fn = node;
    meta->output_index = static_cast<int>(i);
    outputs[i].impl()->autograd = std::move(meta);
  }
}

const std::string& node_name(const AutogradNode& node) {
  return node.op != nullptr ? node.op->name() : node.custom_name;
}

}  // namespace

void record_autograd(const OpSchema& op, const AnyParams& params, const std::vector<Tensor>& inputs,
                     std::vector<Tensor>& outputs) {
  if (!GradMode::enabled()) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  if (!any || !op.has<FGradient>()) return;
  auto node = std::make_shared<AutogradNode>();
  node->op = &op;
  node->params = params;
  connect(node, inputs, outputs);
}

bool record_function(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                     CustomBackward backward, std::string name) {
  if (!GradMode::enabled()) return false;
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  if (!any) return false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      OFL_CHECK(outputs[i].impl() != outputs[j].impl(), "[autograd.Function] ", name,
                " returns one tensor twice (outputs ", j, " and ", i, "): return a clone.");
    }
    for (const Tensor& t : inputs) {
      OFL_CHECK(outputs[i].impl() != t.impl(), "[autograd.Function] ", name,
                " returns its input as output ", i, ": return a clone (x.clone()) instead.");
    }
  }
  auto node = std::make_shared<AutogradNode>();
  node->custom = std::move(backward);
  node->custom_name = std::move(name);
  connect(node, inputs, outputs);
  return true;
}

std::string grad_fn_name(const Tensor& t) {
  const auto& meta = t.impl()->autograd;
  return meta && meta->grad_fn ? node_name(*meta->grad_fn) : std::string();
}

namespace {

Tensor accumulate(const Tensor& sum, const Tensor& g) {
  if (!sum.defined()) return g;
  return apply_op1(OpRegistry::global().find("add"), NoParams{}, {sum, g});
}

// GradBuilder over eager tensors: values are indices into `values_`.
class EagerGradBuilder final : public GradBuilder {
 public:
  EagerGradBuilder(AutogradNode& node, const std::vector<Tensor>& output_grads)
      : node_(node), output_grads_(output_grads), input_grads_(node.inputs.size()) {}

  const AnyParams& any_params() const override { return node_.params; }
  int num_inputs() const override { return static_cast<int>(node_.inputs.size()); }
  int num_outputs() const override { return static_cast<int>(node_.outputs.size()); }
  // Note [Versions]: a saved tensor whose values the gradient reads (as an op's input or as a
  // gradient itself, not only its shape) must be as it was when saved.
  Value input(int i) override { return add(node_.inputs.at(i), i); }
  Value output(int i) override {
    return add(node_.outputs.at(i), static_cast<int>(node_.inputs.size()) + i);
  }
  Value output_grad(int i) override {
    return output_grads_.at(i).defined() ? add(output_grads_[i]) : kNone;
  }
  bool needs_input_grad(int i) const override { return node_.next.at(i).connected(); }
  void set_input_grad(int i, Value grad) override {
    if (grad == kNone || !needs_input_grad(i)) return;
    const Tensor& g = read(grad);
    OFL_ASSERT(g.shape() == node_.inputs[i].shape())
        << "[" << node_.op->name() << "] gradient of input " << i << " has shape "
        << g.shape().to_string() << ", expected " << node_.inputs[i].shape().to_string();
    input_grads_[i] = accumulate(input_grads_[i], g);
  }
  TensorMeta meta(Value v) const override {
    const Tensor& t = values_.at(v);
    return TensorMeta{t.shape(), t.dtype()};
  }
  std::vector<Value> apply(std::string_view op, AnyParams params,
                           std::vector<Value> inputs) override {
    std::vector<Tensor> args;
    args.reserve(inputs.size());
    for (Value v : inputs) args.push_back(read(v));
    std::vector<Value> out;
    for (Tensor& t : apply_op(OpRegistry::global().find(op), params, args)) out.push_back(add(t));
    return out;
  }
  std::vector<Tensor>& input_grads() { return input_grads_; }

 private:
  // `slot`: which saved tensor (inputs, then outputs) `t` is; -1 for a value made here.
  Value add(const Tensor& t, int slot = -1) {
    values_.push_back(t);
    slots_.push_back(slot);
    return static_cast<Value>(values_.size() - 1);
  }
  const Tensor& read(Value v) const {
    const Tensor& t = values_.at(v);
    const int slot = slots_.at(v);
    if (slot < 0) return t;
    const int64_t when = node_.versions.at(slot);
    const int n = static_cast<int>(node_.inputs.size());
    OFL_CHECK_CODE(t.version() == when, ErrorCode::kFailedPrecondition, "[backward] ",
                   slot < n ? "input " : "output ", slot < n ? slot : slot - n, " of op '",
                   node_.op->name(),
                   "', which its gradient reads, was modified by an in-place operation "
                   "(version ",
                   t.version(), ", saved at version ", when, "): ", t.describe(),
                   ". Change it out of place (x = x + 1), or clone() it before writing.");
    return t;
  }

  AutogradNode& node_;
  const std::vector<Tensor>& output_grads_;
  std::vector<Tensor> values_;
  std::vector<int> slots_;  // per value: its saved-tensor slot, or -1
  std::vector<Tensor> input_grads_;
};

// A gradient kept in .grad has storage of its own: the engine hands one tensor to several
// places (add's gradient is its output's for both inputs; a root's seed is the caller's), and
// an in-place change of one .grad (p.grad.div_(2)) must not reach the others, as torch's
// AccumulateGrad copies.
Tensor owned(const Tensor& g) { return g.clone(); }

void accumulate_leaf(AutogradMeta& leaf, const Tensor& g) {
  leaf.grad = leaf.grad.defined() ? accumulate(leaf.grad, g) : owned(g);
}

thread_local int gradients_of_inputs = 0;  // autograd.grad calls under way on this thread

// Note [Gradient hooks]: `g` through `hooks` in order; a hook's replacement must look like it.
Tensor run_hooks(const GradHooks& hooks, Tensor g, const Tensor& like) {
  const GradHooks copy = hooks;  // a hook may remove hooks
  for (const auto& [id, hook] : copy) {
    Tensor r = hook(g);
    if (!r.defined()) continue;
    OFL_CHECK(r.shape() == like.shape() && r.dtype() == like.dtype() && r.device() == like.device(),
              "[register_hook] a hook must return None or a gradient of the tensor's shape, "
              "dtype and device (",
              like.describe(), "). However, hook ", id, " returned ", r.describe(), ".");
    g = r;
  }
  return g;
}

// Note [Custom backward]: the node's function, its results checked against the inputs.
std::vector<Tensor> custom_gradients(const AutogradNode& node,
                                     const std::vector<Tensor>& output_grads) {
  std::vector<Tensor> grads = node.custom(output_grads);
  OFL_CHECK(grads.size() == node.inputs.size(), "[autograd.Function] ", node.custom_name,
            ".backward must return one gradient per tensor input (", node.inputs.size(),
            "). However, it returned ", grads.size(), ".");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Tensor& x = node.inputs[i];
    OFL_CHECK(grads[i].shape() == x.shape() && grads[i].dtype() == x.dtype() &&
                  grads[i].device() == x.device(),
              "[autograd.Function] ", node.custom_name, ".backward returned ", grads[i].describe(),
              " as the gradient of input ", i, ", ", x.describe(),
              ": it must have the input's shape, dtype and device.");
  }
  return grads;
}

int64_t next_hook_id() {
  static std::atomic<int64_t> next{0};
  return next++;
}

}  // namespace

int64_t register_grad_hook(const Tensor& t, GradHook hook) {
  OFL_CHECK_CODE(t.requires_grad(), ErrorCode::kFailedPrecondition,
                 "[register_hook] cannot register a hook on a tensor that does not require grad "
                 "(",
                 t.describe(), ").");
  const auto& meta = meta_of(t);
  const int64_t id = next_hook_id();
  if (!meta->grad_fn) {
    meta->hooks.emplace_back(id, std::move(hook));
    return id;
  }
  AutogradNode& node = *meta->grad_fn;
  node.output_hooks.resize(node.num_outputs);
  node.output_hooks[meta->output_index].emplace_back(id, std::move(hook));
  return id;
}

void retain_grad(const Tensor& t) {
  OFL_CHECK_CODE(t.requires_grad(), ErrorCode::kFailedPrecondition,
                 "[retain_grad] cannot retain the gradient of a tensor that does not require "
                 "grad (",
                 t.describe(), ").");
  const auto& meta = meta_of(t);
  if (!meta->grad_fn) return;  // a leaf keeps its gradient anyway
  AutogradNode& node = *meta->grad_fn;
  node.retained.resize(node.num_outputs);
  node.retained[meta->output_index] = meta;
}

bool retains_grad(const Tensor& t) {
  const auto& meta = meta_of(t);
  if (!meta || !meta->grad_fn) return false;
  const auto& retained = meta->grad_fn->retained;
  return retained.size() > static_cast<size_t>(meta->output_index) &&
         retained[meta->output_index].lock() == meta;
}

void assign_(const Tensor& dst, const Tensor& src, const char* op) {
  OFL_CHECK(!dst.is_lazy(), "[", op,
            "] in-place ops cannot change a traced value (inside "
            "nn.Graph.build()). However, got ",
            dst.describe(),
            ": write x = x + y (or "
            "masked_fill, where) instead.");
  OFL_CHECK(!dst.impl()->storage->indexed_copy(), "[", op, "] cannot write ", dst.describe(),
            ": it is a copy that indexing or a view-like op made (t[...], transpose, permute, "
            "t(), narrow, split, chunk, unbind and expand copy here, where torch gives views), "
            "so the write would not reach the tensor it came from. Write into that tensor "
            "(item assignment t[index] = value, or compute out of place), or clone() it to "
            "write a copy.");
  OFL_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "[", op,
            "] needs a value of the target's shape and dtype. However, got ", src.describe(),
            " for ", dst.describe(), ".");
  if (GradMode::enabled()) {
    OFL_CHECK_CODE(!dst.requires_grad(), ErrorCode::kFailedPrecondition, "[", op,
                   "] cannot write in place into a tensor that requires grad (", dst.describe(),
                   "): autograd could not follow it. Write under "
                   "flow.no_grad() (as optimizers do), or compute out of place.");
    OFL_CHECK_CODE(!src.requires_grad(), ErrorCode::kFailedPrecondition, "[", op,
                   "] cannot write a value that requires grad in place: autograd would lose "
                   "its history. However, got ",
                   src.describe(),
                   ". Use an out-of-place op (y = x.clone()), or write under flow.no_grad().");
  }
  // Between any two devices (torch's copy_), on the GPU's compute stream where one is involved.
  if (dst.raw_data() != src.raw_data()) dst.copy_from(src);
  dst.impl()->storage->bump_version();
}

namespace {

// Note [Gradients of inputs]: backward's walk; with `wrt`, the gradients of those tensors go
// into `*out` (one each, undefined for none) and no leaf's .grad or retained gradient changes
// (autograd.grad), else every leaf accumulates its gradient into .grad.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, const std::vector<Tensor>* wrt, std::vector<Tensor>* out) {
  NoGradGuard no_grad;
  std::unordered_map<AutogradNode*, std::vector<Tensor>> pending;  // output grads per node
  std::unordered_map<AutogradNode*, int> dependencies;
  std::vector<std::shared_ptr<AutogradNode>> stack;
  // Which of `wrt` each leaf meta and each (node, output) is.
  std::unordered_map<const AutogradMeta*, size_t> wrt_leaves;
  std::unordered_map<const AutogradNode*, std::vector<std::pair<int, size_t>>> wrt_outputs;
  if (wrt != nullptr) {
    out->assign(wrt->size(), Tensor());
    for (size_t k = 0; k < wrt->size(); ++k) {
      const Tensor& t = (*wrt)[k];
      OFL_CHECK_CODE(t.requires_grad(), ErrorCode::kFailedPrecondition, "[autograd.grad] input ", k,
                     " does not require grad: ", t.describe(), ".");
      const auto& meta = meta_of(t);
      if (meta->grad_fn) {
        wrt_outputs[meta->grad_fn.get()].emplace_back(meta->output_index, k);
      } else {
        wrt_leaves[meta.get()] = k;
      }
    }
  }
  // Note [Gradient hooks]: leaves with hooks get the sum of this backward's contributions once
  // (and under autograd.grad every leaf does, into *out or nowhere), in the order of their
  // first contributions: the same on every rank running the same program (hooks may launch
  // collectives), not the order of their addresses.
  std::vector<std::pair<std::shared_ptr<AutogradMeta>, Tensor>> hooked;
  std::unordered_map<const AutogradMeta*, size_t> hooked_at;
  auto to_leaf = [&hooked, &hooked_at, wrt](const std::shared_ptr<AutogradMeta>& leaf,
                                            const Tensor& g) {
    if (wrt == nullptr && leaf->hooks.empty()) return accumulate_leaf(*leaf, g);
    auto [at, fresh] = hooked_at.emplace(leaf.get(), hooked.size());
    if (fresh) hooked.emplace_back(leaf, Tensor());
    Tensor& sum = hooked[at->second].second;
    sum = accumulate(sum, g);
  };
  if (wrt != nullptr) ++gradients_of_inputs;
  struct Leave {
    bool active;
    ~Leave() {
      if (active) --gradients_of_inputs;
    }
  } leave{wrt != nullptr};

  // Seed the roots.
  for (size_t r = 0; r < roots.size(); ++r) {
    const Tensor& root = roots[r];
    OFL_CHECK_CODE(root.requires_grad(), ErrorCode::kFailedPrecondition,
                   "[backward] the tensor does not require grad and has no grad_fn. However, got ",
                   root.describe(), ".");
    Tensor g = r < grads.size() ? grads[r] : Tensor();
    if (!g.defined()) {
      OFL_CHECK_CODE(root.numel() == 1, ErrorCode::kFailedPrecondition,
                     "[backward] grad can be implicitly created only for one-element outputs. "
                     "However, got ",
                     root.describe(), ".");
      g = Tensor::scalar(1.0, root.dtype(), root.device()).view(root.shape());
    }
    OFL_CHECK(g.device() == root.device(),
              "[backward] the gradient must be on the output's device. However, got gradient ",
              g.describe(), " for output ", root.describe(), ".");
    OFL_CHECK_TYPE(g.dtype() == root.dtype(),
                   "[backward] the gradient must have the output's dtype. However, got gradient ",
                   g.describe(), " for output ", root.describe(), ".");
    OFL_CHECK(g.shape() == root.shape(),
              "[backward] the gradient must have the output's shape. "
              "However, got gradient ",
              g.describe(), " for output ", root.describe(), ".");
    const auto& meta = meta_of(root);
    if (!meta->grad_fn) {
      to_leaf(meta, g);
      continue;
    }
    AutogradNode* node = meta->grad_fn.get();
    auto& slots = pending[node];
    slots.resize(node->num_outputs);
    slots[meta->output_index] = accumulate(slots[meta->output_index], g);
    stack.push_back(meta->grad_fn);
  }

  // Count, for every reachable node, how many edges lead into it.
  std::vector<AutogradNode*> reached;
  {
    std::unordered_map<AutogradNode*, bool> seen;
    std::vector<std::shared_ptr<AutogradNode>> walk = stack;
    for (auto& n : walk) {
      if (!seen[n.get()]) reached.push_back(n.get());
      seen[n.get()] = true;
    }
    while (!walk.empty()) {
      auto node = walk.back();
      walk.pop_back();
      for (const AutogradEdge& e : node->next) {
        if (!e.node) continue;
        ++dependencies[e.node.get()];
        if (!seen[e.node.get()]) {
          seen[e.node.get()] = true;
          reached.push_back(e.node.get());
          walk.push_back(e.node);
        }
      }
    }
  }
  // Note [Gradients of inputs]: under autograd.grad only the nodes on a path to one of `wrt`
  // run (as torch's): a checkpoint or a hook elsewhere in the graph is left alone.
  std::unordered_map<const AutogradNode*, bool> needed;
  auto is_wrt_output = [&wrt_outputs](const AutogradEdge& e) {
    auto it = wrt_outputs.find(e.node.get());
    if (it == wrt_outputs.end()) return false;
    for (const auto& [index, k] : it->second) {
      if (index == e.output_index) return true;
    }
    return false;
  };
  if (wrt != nullptr) {
    // Children before parents: a post-order walk from every reached node.
    std::vector<std::pair<AutogradNode*, size_t>> path;
    for (AutogradNode* start : reached) {
      if (needed.count(start)) continue;
      path.emplace_back(start, 0);
      needed[start] = false;
      while (!path.empty()) {
        auto& [node, next] = path.back();
        if (next < node->next.size()) {
          AutogradNode* child = node->next[next++].node.get();
          if (child != nullptr && !needed.count(child)) {
            needed[child] = false;
            path.emplace_back(child, 0);
          }
          continue;
        }
        // Made one of `wrt` is not enough: its gradient is taken where it arrives, and only a
        // path on to another of them makes the node's own backward run.
        bool is_needed = false;
        for (const AutogradEdge& e : node->next) {
          is_needed = is_needed || (e.leaf && wrt_leaves.count(e.leaf.get())) ||
                      (e.node && (needed[e.node.get()] || is_wrt_output(e)));
        }
        needed[node] = is_needed;
        path.pop_back();
      }
    }
  }

  // Roots that others also depend on wait for those contributions.
  std::vector<std::shared_ptr<AutogradNode>> ready;
  {
    std::unordered_map<AutogradNode*, bool> queued;
    for (auto& n : stack) {
      if (dependencies[n.get()] == 0 && !queued[n.get()]) {
        queued[n.get()] = true;
        ready.push_back(n);
      }
    }
  }

  while (!ready.empty()) {
    std::shared_ptr<AutogradNode> node = ready.back();
    ready.pop_back();
    if (wrt != nullptr) {  // a computed input's gradient before its hooks, as torch's
      if (auto it = wrt_outputs.find(node.get()); it != wrt_outputs.end()) {
        auto slots = pending.find(node.get());
        for (const auto& [index, k] : it->second) {
          if (slots != pending.end() && slots->second.size() > static_cast<size_t>(index)) {
            (*out)[k] = slots->second[index];
          }
        }
      }
    }
    if (wrt != nullptr && !needed[node.get()]) {  // on no path to `wrt`: only its edges count
      pending.erase(node.get());
      for (const AutogradEdge& e : node->next) {
        if (e.node && --dependencies[e.node.get()] == 0) ready.push_back(e.node);
      }
      continue;
    }
    OFL_CHECK_CODE(!node->released, ErrorCode::kFailedPrecondition,
                   "[backward] trying to backward "
                   "through the graph a second time (through op '",
                   node_name(*node),
                   "'); its saved tensors were freed. Pass retain_graph=True to the first "
                   "backward to keep them.");
    std::vector<Tensor> output_grads = std::move(pending[node.get()]);
    pending.erase(node.get());
    output_grads.resize(node->num_outputs);
    for (size_t i = 0; i < node->output_hooks.size(); ++i) {
      if (output_grads[i].defined() && !node->output_hooks[i].empty()) {
        output_grads[i] = run_hooks(node->output_hooks[i], output_grads[i], node->outputs[i]);
      }
    }
    for (size_t i = 0; wrt == nullptr && i < node->retained.size(); ++i) {
      if (auto meta = node->retained[i].lock(); meta && output_grads[i].defined()) {
        meta->grad =
            meta->grad.defined() ? accumulate(meta->grad, output_grads[i]) : owned(output_grads[i]);
      }
    }
    std::vector<Tensor> input_grads;
    if (node->custom) {
      input_grads = custom_gradients(*node, output_grads);
    } else {
      EagerGradBuilder builder(*node, output_grads);
      (*node->op->get<FGradient>())(builder);
      input_grads = std::move(builder.input_grads());
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const AutogradEdge& e = node->next[i];
      if (e.leaf) {
        if (input_grads[i].defined()) to_leaf(e.leaf, input_grads[i]);
      } else if (e.node) {
        auto& slots = pending[e.node.get()];
        slots.resize(e.node->num_outputs);
        if (input_grads[i].defined()) {
          slots[e.output_index] = accumulate(slots[e.output_index], input_grads[i]);
        }
        if (--dependencies[e.node.get()] == 0) ready.push_back(e.node);
      }
    }
    if (!retain_graph) {
      node->inputs.clear();
      node->outputs.clear();
      node->custom = nullptr;  // what a custom function saved goes with it
      node->released = true;
    }
  }
  for (auto& [leaf, sum] : hooked) {
    if (wrt == nullptr) {
      accumulate_leaf(*leaf, run_hooks(leaf->hooks, sum, sum));
    } else if (auto it = wrt_leaves.find(leaf.get()); it != wrt_leaves.end()) {
      (*out)[it->second] = run_hooks(leaf->hooks, sum, sum);
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  run_backward(roots, grads, retain_graph, nullptr, nullptr);
}

bool computing_gradients_of_inputs() { return gradients_of_inputs > 0; }

std::function<void()> grad_hook_remover(const Tensor& t, int64_t id) {
  const auto& meta = meta_of(t);
  if (!meta) return [] {};
  std::weak_ptr<AutogradMeta> leaf;
  std::weak_ptr<AutogradNode> node;
  if (meta->grad_fn) {
    node = meta->grad_fn;
  } else {
    leaf = meta;
  }
  const int index = meta->output_index;
  return [leaf, node, index, id] {
    GradHooks* hooks = nullptr;
    if (auto m = leaf.lock()) {
      hooks = &m->hooks;
    } else if (auto n = node.lock(); n && n->output_hooks.size() > static_cast<size_t>(index)) {
      hooks = &n->output_hooks[index];
    }
    if (hooks == nullptr) return;
    hooks->erase(std::remove_if(hooks->begin(), hooks->end(),
                                [id](const auto& entry) { return entry.first == id; }),
                 hooks->end());
  };
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  std::vector<Tensor> out;
  run_backward(roots, grads, retain_graph, &inputs, &out);
  return out;
}

}  // namespace ofl
