#include "oneflowlike/ops/index_ops.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_index_ops(py::module_& m) {
  m.def("gather", &functional::gather, py::arg("input"), py::arg("dim"), py::arg("index"),
        "torch.gather: out[p] = input[p with p[dim] replaced by index[p]], shaped like index. "
        "IndexError for an index outside [0, input.shape[dim]).");
  m.def("index_select", &functional::index_select, py::arg("input"), py::arg("dim"),
        py::arg("index"), "The slices of input along dim picked by a 1-d index.");
  m.def("gather_grad", &functional::gather_grad, py::arg("dy"), py::arg("index"), py::arg("dim"),
        py::arg("input_shape"),
        "gather's gradient: dy scatter-added along dim into zeros shaped input_shape.");
  m.def("index_select_grad", &functional::index_select_grad, py::arg("dy"), py::arg("index"),
        py::arg("dim"), py::arg("input_shape"),
        "index_select's gradient: dy's slices scatter-added into zeros shaped input_shape.");
}

}  // namespace ofl::python
