#pragma once
// Lazy tensors and op tracing: how nn.Graph turns the user's build() into a logical graph.
//
// Note [Lazy tensors]: while an OpTracer is current on a thread (TracingScope), apply_op does
// not run kernels: it hands every op to the tracer, which records it in a graph and returns
// lazy tensors for the outputs — tensors with a shape and dtype but no storage, standing for a
// value the compiled plan will compute. So every op, and every composite function built from
// ops (linear, cross_entropy, a whole nn.Module), traces without a second implementation.
// Reading a lazy tensor's data raises: its value exists only when the graph runs.

#include <vector>

#include "oneflowlike/op.h"
#include "oneflowlike/tensor.h"

namespace ofl {

class OpTracer {
 public:
  virtual ~OpTracer() = default;
  /// Records `op` applied to `inputs` (lazy tensors of this tracer, or ordinary tensors used as
  /// constants) and returns lazy tensors for its outputs. Raises on user error, naming the op.
  virtual std::vector<Tensor> trace(const OpSchema& op, const AnyParams& params,
                                    const std::vector<Tensor>& inputs) = 0;
};

/// The tracer of this thread, or null (eager execution).
OpTracer* current_op_tracer();

/// Makes `tracer` current on this thread for the scope's lifetime (scopes nest).
class TracingScope {
 public:
  explicit TracingScope(OpTracer* tracer);
  ~TracingScope();
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;

 private:
  OpTracer* previous_;
};

/// A tensor with `meta` and no storage (Note [Lazy tensors]).
Tensor make_lazy_tensor(const TensorMeta& meta);

}  // namespace ofl
