#include "oneflowlike/ops/reshape.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_reshape(py::module_& m) {
  m.def("reshape", &functional::reshape, py::arg("input"), py::arg("shape"),
        "A view with a new shape; one extent may be -1.");
  m.def("expand", &functional::expand, py::arg("input"), py::arg("shape"),
        "Broadcast to a shape (-1 keeps an extent).");
}

}  // namespace ofl::python
