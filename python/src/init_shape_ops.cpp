// Shape ops: transpose, slice, concat, split (the Python layer adds torch-style wrappers).

#include "oneflowlike/ops/shape_ops.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_shape_ops(py::module_& m) {
  m.def("transpose", &functional::transpose, py::arg("input"), py::arg("dims"),
        "Permutes the axes: output axis j is input axis dims[j].");
  m.def("slice", &functional::slice, py::arg("input"), py::arg("start"), py::arg("stop"),
        py::arg("step"),
        "input[start[0]:stop[0]:step[0], ...] with one normalised entry per axis "
        "(0 <= start <= stop <= extent, step >= 1).");
  m.def("slice_grad", &functional::slice_grad, py::arg("dy"), py::arg("like_shape"),
        py::arg("start"), py::arg("stop"), py::arg("step"),
        "Zeros of like_shape with dy written where slice(start, stop, step) reads.");
  m.def("concat", &functional::concat, py::arg("tensors"), py::arg("dim") = 0,
        "Concatenates tensors along dim (mixed dtypes are promoted).");
  m.def("split", &functional::split, py::arg("input"), py::arg("dim"), py::arg("sizes"),
        "Cuts input along dim into pieces of the given sizes (they sum to the extent).");
}

}  // namespace ofl::python
