// rms_norm and its backward ops.

#include "oneflowlike/ops/rms_norm.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_rms_norm(py::module_& m) {
  m.def("rms_norm", &functional::rms_norm, py::arg("input"), py::arg("weight"),
        py::arg("begin_norm_axis") = -1, py::arg("eps") = 1e-6,
        "x / sqrt(mean(x^2) + eps) * weight over axes [begin_norm_axis, ndim); returns "
        "(y, inv_rms).");
  m.def("rms_norm_grad", &functional::rms_norm_grad, py::arg("dy"), py::arg("x"),
        py::arg("inv_rms"), py::arg("weight"), py::arg("begin_norm_axis") = -1,
        py::arg("eps") = 1e-6, "dx of rms_norm.");
  m.def("rms_norm_param_grad", &functional::rms_norm_param_grad, py::arg("dy"), py::arg("x"),
        py::arg("inv_rms"), py::arg("begin_norm_axis") = -1, py::arg("eps") = 1e-6,
        "dweight of rms_norm.");
}

}  // namespace ofl::python
