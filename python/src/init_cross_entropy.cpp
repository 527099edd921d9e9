#include "oneflowlike/ops/cross_entropy.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_cross_entropy(py::module_& m) {
  m.def("sparse_softmax_cross_entropy", &functional::sparse_softmax_cross_entropy,
        py::arg("logits"), py::arg("labels"),
        "Per-sample loss logsumexp(logits) - logits[label] over the last axis: logits (..., C), "
        "labels (...) int32/int64 -> (...).");
  m.def("sparse_softmax_cross_entropy_grad", &functional::sparse_softmax_cross_entropy_grad,
        py::arg("logits"), py::arg("labels"), py::arg("dloss"),
        "(softmax(logits) - onehot(labels)) * dloss[..., None].");
}

}  // namespace ofl::python
