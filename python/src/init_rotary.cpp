// rotary_embedding.

#include "oneflowlike/ops/rotary.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_rotary(py::module_& m) {
  m.def("rotary_embedding", &functional::rotary_embedding, py::arg("input"), py::arg("cos"),
        py::arg("sin"), py::arg("seq_axis") = -2, py::arg("interleaved") = false,
        py::arg("inverse") = false,
        "input's head-axis pairs rotated by the angles of cos and sin (T, D/2) at each position "
        "of seq_axis.");
}

}  // namespace ofl::python
