#include "oneflowlike/lazy.h"

namespace ofl {

namespace {
thread_local OpTracer* g_tracer = nullptr;
}  // namespace

OpTracer* current_op_tracer() { return g_tracer; }

TracingScope::TracingScope(OpTracer* tracer) : previous_(g_tracer) { g_tracer = tracer; }

TracingScope::~TracingScope() { g_tracer = previous_; }

Tensor make_lazy_tensor(const TensorMeta& meta) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = meta.shape;
  impl->dtype = meta.dtype;
  impl->lazy = true;
  return Tensor(std::move(impl));
}

}  // namespace ofl
