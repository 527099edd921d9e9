#include "oneflowlike/ops/embedding.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_embedding(py::module_& m) {
  m.def("embedding", &functional::embedding, py::arg("weight"), py::arg("indices"),
        py::arg("padding_idx") = -1,
        "Rows of weight (V, D) picked by integer indices (...): (..., D). IndexError for an "
        "index outside [0, V); row padding_idx gets no gradient.");
  m.def("embedding_grad", &functional::embedding_grad, py::arg("dy"), py::arg("indices"),
        py::arg("num_embeddings"), py::arg("padding_idx") = -1,
        "The gradient of embedding's weight: dy (..., D) scatter-added into a (V, D) table.");
}

}  // namespace ofl::python
