#pragma once
// Eager local autograd. Each op applied to a tensor that requires grad records a node holding
// the op, its params and its (detached) inputs and outputs; backward() walks the nodes in
// reverse topological order and asks each op's FGradient to emit the backward ops.
//
// Note [One gradient]: FGradient is written against GradBuilder, which this engine implements
// over eager tensors and the compiler implements over graph values, so every gradient has one
// definition.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct AutogradNode;

// Note [Gradient hooks]: a hook sees a tensor's gradient once backward has summed every
// contribution to it and may replace it (an undefined result keeps it), as torch's
// Tensor.register_hook. A leaf's hooks live on the tensor's meta and run on the sum of one
// backward's contributions before it is added to .grad; a computed tensor's hooks live on the
// node that made it (like torch's, they outlive the tensor) and run before the node's gradient
// reads its output gradients. retain_grad keeps a computed tensor's gradient in its .grad.
using GradHook = std::function<Tensor(const Tensor&)>;
using GradHooks = std::vector<std::pair<int64_t, GradHook>>;  // by id, in registration order

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                            // accumulated gradient of a leaf (or a retained one)
  std::shared_ptr<AutogradNode> grad_fn;  // producer; null for a leaf
  int output_index = 0;                   // which output of grad_fn this tensor is
  GradHooks hooks;                        // a leaf's (Note [Gradient hooks])
};

/// Where the gradient of one input of a node goes: into another node's output, or a leaf.
struct AutogradEdge {
  std::shared_ptr<AutogradNode> node;
  int output_index = 0;
  std::shared_ptr<AutogradMeta> leaf;
  bool connected() const { return node != nullptr || leaf != nullptr; }
};

// Note [Custom backward]: a node made by record_function (flow.autograd.Function) has no op;
// its gradient is a function from the outputs' gradients (undefined where none reached them)
// to the inputs' (undefined for none), which the engine calls where it would apply FGradient.
using CustomBackward = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct AutogradNode {
  const OpSchema* op = nullptr;  // null for a custom node
  CustomBackward custom;
  std::string custom_name;
  AnyParams params;
  std::vector<Tensor> inputs;      // detached
  std::vector<Tensor> outputs;     // detached
  std::vector<int64_t> versions;   // of inputs then outputs when saved (Note [Versions])
  std::vector<AutogradEdge> next;  // one per input
  size_t num_outputs = 0;
  bool released = false;  // saved tensors freed by a backward without retain_graph
  // Note [Gradient hooks]: per output, its hooks, and the meta of a tensor that retains its
  // gradient (empty when none does; weak: the tensor may go).
  std::vector<GradHooks> output_hooks;
  std::vector<std::weak_ptr<AutogradMeta>> retained;

  // Note [Long chains]: releases the nodes only this one keeps one after another, not by
  // recursion (200,000 ops in a row overflowed the stack when their graph went).
  ~AutogradNode();
};

/// Whether ops record autograd nodes on this thread.
class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

/// Disables recording for its lifetime (flow.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }

 private:
  bool previous_;
};

/// Records `op` for autograd when grad mode is on and some input requires grad. Marks the
/// outputs as requiring grad.
void record_autograd(const OpSchema& op, const AnyParams& params, const std::vector<Tensor>& inputs,
                     std::vector<Tensor>& outputs);

/// Writes `src`'s values into `dst`'s storage (same shape and dtype; any two devices, as torch's
/// copy_) and bumps its version
/// (Note [Versions]). Refused, naming `op`, for a lazy `dst` and, while grad mode is on, when
/// either requires grad: an in-place write autograd cannot follow would give wrong gradients.
void assign_(const Tensor& dst, const Tensor& src, const char* op);

/// Note [Custom backward]: records a node of `name` from `inputs` to `outputs` whose gradient
/// is `backward`, when grad mode is on and some input requires grad (outputs that are floating
/// then require grad). Returns whether it recorded one.
bool record_function(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                     CustomBackward backward, std::string name);
/// The name of the op (or custom function) that made a computed tensor; empty for a leaf.
std::string grad_fn_name(const Tensor& t);

/// Adds `hook` to the tensor's gradient hooks (Note [Gradient hooks]); returns its id. Refused
/// for a tensor that does not require grad.
int64_t register_grad_hook(const Tensor& t, GradHook hook);
/// What removes hook `id` of the tensor, even once the tensor has gone (a computed tensor's
/// hooks live on its node); nothing when the hook or its node has gone already.
std::function<void()> grad_hook_remover(const Tensor& t, int64_t id);
/// Whether an autograd.grad call is under way on this thread (a checkpoint's recomputation,
/// which accumulates into .grad, refuses to run inside one).
bool computing_gradients_of_inputs();
/// A computed tensor keeps its gradient in .grad from the next backward on (a leaf always does).
void retain_grad(const Tensor& t);
/// Whether retain_grad was called on the (computed) tensor.
bool retains_grad(const Tensor& t);

/// Note [Gradients of inputs]: d(roots)/d(input) * grads for each of `inputs` (leaves or
/// computed tensors; undefined where none reaches it), leaving every .grad as it is
/// (torch.autograd.grad without create_graph). As torch's, a leaf's comes after its hooks, a
/// computed tensor's before them (they still change what flows on).
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

/// Accumulates d(roots)/d(leaf) * grads into every leaf's .grad. A missing grad for a
/// one-element root means 1. Raises when a root does not require grad or the graph was freed.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

}  // namespace ofl
