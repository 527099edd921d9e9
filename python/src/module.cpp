#include "oneflowlike/common/logging.h"
#include "python/src/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "oneflowlike core: tensors, ops and autograd";
  ofl::init_logging("oneflowlike");  // Note [Logging]
  using namespace ofl::python;
  init_errors(m);
  init_tensor(m);
  init_elementwise(m);
  init_reduce(m);
  init_reshape(m);
  init_unary(m);
  init_scalar(m);
  init_creation(m);
  init_where(m);
  init_matmul(m);
  init_softmax(m);
  init_layer_norm(m);
  init_rms_norm(m);
  init_rotary(m);
  init_embedding(m);
  init_cross_entropy(m);
  init_random(m);
  init_threads(m);
  init_optimizer(m);
  init_shape_ops(m);
  init_fused(m);
  init_attention(m);
  init_cached_attention(m);
  init_index_ops(m);
  init_sort(m);
  init_scan(m);
  init_autocast(m);
  init_graph(m);
  init_cuda(m);
  add_argument_errors(m);
}
