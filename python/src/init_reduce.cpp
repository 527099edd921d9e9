#include "oneflowlike/ops/reduce.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_reduce(py::module_& m) {
  m.def("reduce_sum", &functional::reduce_sum, py::arg("input"), py::arg("axes"),
        py::arg("keepdims") = false, "Sum over axes (all axes when empty).");
  m.def("reduce_mean", &functional::reduce_mean, py::arg("input"), py::arg("axes"),
        py::arg("keepdims") = false, "Mean over axes (all axes when empty).");
  m.def("reduce_max", &functional::reduce_max, py::arg("input"), py::arg("axes"),
        py::arg("keepdims") = false, "Maximum over axes (all axes when empty).");
  m.def("reduce_min", &functional::reduce_min, py::arg("input"), py::arg("axes"),
        py::arg("keepdims") = false, "Minimum over axes (all axes when empty).");
}

}  // namespace ofl::python
