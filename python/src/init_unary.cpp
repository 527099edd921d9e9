// Unary elementwise functions and their fused backward ops.

#include "oneflowlike/ops/unary.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_unary(py::module_& m) {
  m.def("neg", &functional::neg, py::arg("input"), "-input.");
  m.def("abs", &functional::abs, py::arg("input"), "|input|.");
  m.def("exp", &functional::exp, py::arg("input"), "e ** input (floating dtypes).");
  m.def("log", &functional::log, py::arg("input"), "Natural logarithm (floating dtypes).");
  m.def("sqrt", &functional::sqrt, py::arg("input"), "Square root (floating dtypes).");
  m.def("rsqrt", &functional::rsqrt, py::arg("input"), "1 / sqrt(input) (floating dtypes).");
  m.def("tanh", &functional::tanh, py::arg("input"), "Hyperbolic tangent (floating dtypes).");
  m.def("relu", &functional::relu, py::arg("input"), "max(input, 0) (floating dtypes).");
  m.def("sigmoid", &functional::sigmoid, py::arg("input"),
        "1 / (1 + exp(-input)) (floating dtypes).");
  m.def("silu", &functional::silu, py::arg("input"),
        "input * sigmoid(input) (SiLU; floating dtypes).");
  m.def("gelu", &functional::gelu, py::arg("input"), py::arg("approximate") = "none",
        "input * Phi(input); approximate='tanh' uses the tanh approximation.");
  m.def("tanh_grad", &functional::tanh_grad, py::arg("y"), py::arg("dy"),
        "dy * (1 - y ** 2), the gradient of tanh from its output.");
  m.def("sigmoid_grad", &functional::sigmoid_grad, py::arg("y"), py::arg("dy"),
        "dy * y * (1 - y), the gradient of sigmoid from its output.");
  m.def("relu_grad", &functional::relu_grad, py::arg("y"), py::arg("dy"),
        "dy where y > 0 else 0, the gradient of relu from its output.");
  m.def("gelu_grad", &functional::gelu_grad, py::arg("x"), py::arg("dy"),
        py::arg("approximate") = "none", "dy * gelu'(x).");
  m.def("silu_grad", &functional::silu_grad, py::arg("x"), py::arg("dy"), "dy * silu'(x).");
  m.def("abs_grad", &functional::abs_grad, py::arg("x"), py::arg("dy"), "dy * sign(x).");
}

}  // namespace ofl::python
