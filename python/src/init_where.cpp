// Selection by a bool mask: where and masked_fill.

#include "oneflowlike/ops/where.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_where(py::module_& m) {
  m.def("where", &functional::where, py::arg("condition"), py::arg("input"), py::arg("other"),
        "input where condition is true, else other; all three broadcast.");
  m.def("masked_fill", &functional::masked_fill, py::arg("input"), py::arg("mask"),
        py::arg("value"), "input with value wherever mask (bool, broadcast to input) is true.");
}

}  // namespace ofl::python
