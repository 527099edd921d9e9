#include "oneflowlike/ops/elementwise.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_elementwise(py::module_& m) {
  m.def("add", &functional::add, py::arg("input"), py::arg("other"),
        "input + other (broadcasting)");
  m.def("sub", &functional::sub, py::arg("input"), py::arg("other"),
        "input - other (broadcasting)");
  m.def("mul", &functional::mul, py::arg("input"), py::arg("other"),
        "input * other (broadcasting)");
  m.def("div", &functional::div, py::arg("input"), py::arg("other"),
        "input / other (broadcasting)");
  m.def("eq", &functional::equal, py::arg("input"), py::arg("other"), "input == other, as bool");
  m.def("gt", &functional::greater, py::arg("input"), py::arg("other"), "input > other, as bool");
  m.def("lt", &functional::less, py::arg("input"), py::arg("other"), "input < other, as bool");
}

}  // namespace ofl::python
