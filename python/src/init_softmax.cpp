// softmax, log_softmax and their backward ops.

#include "oneflowlike/ops/softmax.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_softmax(py::module_& m) {
  m.def("softmax", &functional::softmax, py::arg("input"), py::arg("dim") = -1,
        "exp(x) / sum(exp(x)) along dim, computed stably.");
  m.def("log_softmax", &functional::log_softmax, py::arg("input"), py::arg("dim") = -1,
        "x - log(sum(exp(x))) along dim, computed stably.");
  m.def("softmax_grad", &functional::softmax_grad, py::arg("y"), py::arg("dy"), py::arg("dim") = -1,
        "Backward of softmax from its output y: y * (dy - sum(dy * y)).");
  m.def("log_softmax_grad", &functional::log_softmax_grad, py::arg("y"), py::arg("dy"),
        py::arg("dim") = -1, "Backward of log_softmax from its output y: dy - exp(y) * sum(dy).");
}

}  // namespace ofl::python
