// Tensor-scalar arithmetic: the number operands of +, *, ** and pow.

#include "oneflowlike/ops/scalar.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_scalar(py::module_& m) {
  m.def("scalar_add", &functional::scalar_add, py::arg("input"), py::arg("other"),
        "input + other for a number other (integer input meets a fractional number as "
        "float32).");
  m.def("scalar_mul", &functional::scalar_mul, py::arg("input"), py::arg("other"),
        "input * other for a number other (integer input meets a fractional number as "
        "float32).");
  m.def("scalar_pow", &functional::scalar_pow, py::arg("input"), py::arg("exponent"),
        "input ** exponent for a number exponent (integer input is cast to float32).");
  m.def("scalar_rpow", &functional::scalar_rpow, py::arg("input"), py::arg("base"),
        "base ** input for a number base (integer input is cast to float32).");
}

}  // namespace ofl::python
