#include "oneflowlike/ops/sort.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_sort(py::module_& m) {
  m.def("max_dim", &functional::max_dim, py::arg("input"), py::arg("dim"),
        py::arg("keepdim") = false,
        "[values, indices]: the maximum along dim and its first index (NaN wins).");
  m.def("min_dim", &functional::min_dim, py::arg("input"), py::arg("dim"),
        py::arg("keepdim") = false,
        "[values, indices]: the minimum along dim and its first index (NaN wins).");
  m.def("topk", &functional::topk, py::arg("input"), py::arg("k"), py::arg("dim") = -1,
        py::arg("largest") = true, py::arg("sorted") = true,
        "[values, indices] of the k largest (smallest) values along dim, in order; ties by "
        "index.");
  m.def("sort", &functional::sort, py::arg("input"), py::arg("dim") = -1,
        py::arg("descending") = false, py::arg("stable") = false,
        "[values, indices]: input sorted along dim, stably (equal values keep their order).");
}

}  // namespace ofl::python
