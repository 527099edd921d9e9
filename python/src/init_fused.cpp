#include "oneflowlike/ops/fused.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_fused(py::module_& m) {
  m.def("fused_elementwise", &functional::fused_elementwise, py::arg("input"), py::arg("steps"),
        "A chain of unary ops in one pass, e.g. steps='scalar_mul(0.5),tanh'.");
}

}  // namespace ofl::python
