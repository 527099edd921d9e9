// layer_norm and its backward ops.

#include "oneflowlike/ops/layer_norm.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_layer_norm(py::module_& m) {
  m.def("layer_norm", &functional::layer_norm, py::arg("input"), py::arg("weight"), py::arg("bias"),
        py::arg("begin_norm_axis") = -1, py::arg("eps") = 1e-5,
        "Normalises over axes [begin_norm_axis, ndim); returns (y, mean, inv_std).");
  m.def("layer_norm_grad", &functional::layer_norm_grad, py::arg("dy"), py::arg("x"),
        py::arg("mean"), py::arg("inv_std"), py::arg("weight"), py::arg("begin_norm_axis") = -1,
        py::arg("eps") = 1e-5, "dx of layer_norm.");
  m.def("layer_norm_param_grad", &functional::layer_norm_param_grad, py::arg("dy"), py::arg("x"),
        py::arg("mean"), py::arg("inv_std"), py::arg("begin_norm_axis") = -1, py::arg("eps") = 1e-5,
        "(dweight, dbias) of layer_norm.");
}

}  // namespace ofl::python
