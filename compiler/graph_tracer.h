#pragma once
// GraphTracer: records ops applied to lazy tensors into a GraphBuilder (Note [Lazy tensors] in
// oneflowlike/lazy.h). nn.Graph makes one current while the user's build() runs: inputs and
// parameters become lazy tensors, and every op the model applies joins the logical graph.
//
// Placement follows the data: an op runs on the placement of its lazy inputs (they must agree;
// `to_global` moves a tensor to another placement or SBP), and an op without lazy inputs (an
// arange, a random tensor) on the placement of the op traced before it. Each distinct
// placement is a pipeline stage, numbered in the order the trace first reaches it.
// Ordinary tensors used by an op become constants: non-trainable variables whose values the
// caller writes once the plan is loaded (constants()). A graph over global tensors refuses them
// (set_constants_allowed): each rank would feed its own value as the one replicated value.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "oneflowlike/lazy.h"

namespace ofl::compiler {

class GraphTracer final : public OpTracer {
 public:
  explicit GraphTracer(std::string job_name, const Placement& placement);

  /// A tensor fed every iteration, as a lazy tensor; `donates`: GraphBuilder::input's.
  Tensor input(const std::string& name, const Shape& shape, DataType dtype,
               const Placement& placement, const NdSbp& sbp, bool donates = false);
  /// A persistent tensor (a parameter or a buffer); its first value is written by the caller.
  Tensor variable(const std::string& name, const Shape& shape, DataType dtype,
                  const Placement& placement, const NdSbp& sbp, bool trainable);
  /// `x` laid out as `sbp` on `placement`: the compiler inserts the boxing.
  Tensor to_global(const Tensor& x, const Placement& placement, const NdSbp& sbp);
  /// Hands `x` back every iteration; returns its name in the plan.
  std::string fetch(const Tensor& x);
  /// Marks input `x` differentiable: autograd fetches its gradient (Note [Input gradients] in
  /// passes/autograd.cpp).
  void differentiable(const Tensor& x);

  /// Note [Buffers written in build]: an in-place op on a module's buffer inside build()
  /// (BatchNorm's running statistics, buf.copy_(v), buf.mul_(m).add_(x)). `value` (of the
  /// buffer's shape and dtype) is what later reads of `variable` in the trace see, and the plan
  /// writes the last such value into the variable at the end of each iteration (one assign op
  /// per buffer, added by finish_writes()). Only variables the graph does not train (buffers,
  /// frozen parameters) may be written: a trained parameter changes through its optimizer, an
  /// activation is data flow; both are refused naming `op`. The Python side writes the value
  /// detached: no gradient flows through a buffer (as eagerly, where such writes are made under
  /// no_grad). Every module holding the buffer sees the write (nn/graph.py swaps each holder's
  /// entry); a view or alias taken before the write keeps the value it had (a graph has no
  /// storage to share): views of it (reshape, view, detach: the ops that are views eagerly)
  /// are traced again from its new value when read (Note [Views of buffers] in
  /// graph_tracer.cpp), and a write into such a view writes the buffer.
  void write_variable(const Tensor& variable, const Tensor& value, const std::string& op);
  /// Adds the assign ops of the buffers written (once, after build()).
  void finish_writes();
  /// The names of the buffers build() wrote, by write_variable or in place by an op that writes
  /// its input (Note [Buffers written in place in build] in graph_tracer.cpp).
  std::vector<std::string> written_variables() const;

  std::vector<Tensor> trace(const OpSchema& op, const AnyParams& params,
                            const std::vector<Tensor>& inputs) override;

  /// Graph tensor index of lazy tensor `x`; raises when `x` is not a value of this trace.
  int index_of(const Tensor& x) const;
  bool knows(const Tensor& x) const { return index_.count(x.impl()) > 0; }
  const Placement& placement_of(const Tensor& x) const;
  /// The SBP `x` was given by input/variable/to_global (empty: left to the compiler).
  NdSbp sbp_hint_of(const Tensor& x) const;

  /// Where ops come from, for error messages: called once per traced op.
  void set_location_provider(std::function<std::string()> provider) {
    location_ = std::move(provider);
  }
  void set_checkpoint_group(const std::string& group) { builder_.set_checkpoint_group(group); }
  /// Whether ops traced under no_grad are constants to autograd (Note [No grad in a trace] in
  /// graph_tracer.cpp): nn.Graph's traces, not the library's own.
  void set_follows_no_grad(bool follows) { follows_no_grad_ = follows; }
  /// Pins the pipeline stage of ops traced from now on (-1: by placement, the default).
  void set_stage(int stage) { fixed_stage_ = stage; }
  /// Whether ordinary (local) tensors may become constants; when not, using one raises a
  /// TypeError naming the op and the tensor.
  void set_constants_allowed(bool allowed) { constants_allowed_ = allowed; }

  /// Constants by variable name, with their values.
  const std::map<std::string, Tensor>& constants() const { return constants_; }
  GraphBuilder& builder() { return builder_; }

 private:
  Tensor lazy(int tensor);
  void enter(const Placement& placement);
  // Whether `x` is the output of a fill op without inputs (a number operand), or of its cast
  // (autocast's), and that fill (and cast) traced again on `placement` (Note [Fills follow their
  // users] in graph_tracer.cpp).
  bool is_fill(const Tensor& x) const;
  Tensor fill_on(const Tensor& x, const Placement& placement);
  // `value` as a constant variable; `user` names the op that reads it, for the refusal.
  int constant(const Tensor& value, const std::string& user);
  // Note [Views of buffers]: whether `x` is a buffer (a variable the graph does not train) or a
  // view of one; and `x`, when a view whose buffer was written since it was traced, traced
  // again from the buffer's value (its index_ entry moved).
  bool is_buffer_or_view(const Tensor& x) const;
  void refresh(const Tensor& x);
  // Note [Buffers written in place in build]: refuses reads of a buffer written in place earlier
  // (check_readable: `user` names the reader) and in-place writes of anything but a buffer
  // without views, and records the buffers op `op` writes.
  void check_readable(int tensor, const std::string& user) const;
  void check_in_place_writes(const OpSchema& op, const AnyParams& params,
                             const std::vector<Tensor>& inputs, const std::vector<int>& ids);

  GraphBuilder builder_;
  std::map<const TensorImpl*, int> index_;
  // Note [Buffers written in build]: the variable each written buffer tensor was, and the newest
  // value of each written variable (tensor indexes).
  std::map<const TensorImpl*, int> variable_of_;
  std::map<int, int> writes_;
  // Variables (tensor indexes) an op wrote in place, with the op's name; and the buffers (or
  // their views) moved by to_global to their own layout, which eagerly is the buffer itself.
  std::map<int, std::string> in_place_;
  std::set<int> aliased_;
  struct BufferView {
    Tensor parent;  // the buffer, or a view of it
    const OpSchema* op;
    AnyParams params;
    int from;  // the tensor index of the parent this view was traced from
  };
  std::map<const TensorImpl*, BufferView> views_;
  bool finished_writes_ = false;
  bool follows_no_grad_ = false;
  std::vector<Tensor> lazies_;  // keeps the impls (the keys of index_) alive
  std::vector<Placement> stages_;
  int fixed_stage_ = -1;
  bool constants_allowed_ = true;
  Placement current_;
  std::map<std::string, Tensor> constants_;
  std::function<std::string()> location_;
};

}  // namespace ofl::compiler
