// cumsum.

#include "oneflowlike/ops/scan.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_scan(py::module_& m) {
  m.def("cumsum", &functional::cumsum, py::arg("input"), py::arg("dim"), py::arg("reverse") = false,
        "Running sums of input along dim (from the end with reverse), in input's dtype.");
}

}  // namespace ofl::python
