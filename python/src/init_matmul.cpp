// matmul, broadcast_matmul_grad_b, batch_matmul and linear.

#include <optional>

#include "oneflowlike/ops/matmul.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_matmul(py::module_& m) {
  m.def("matmul", &functional::matmul, py::arg("input"), py::arg("other"),
        py::arg("transpose_a") = false, py::arg("transpose_b") = false, py::arg("alpha") = 1.0,
        "alpha * op(input) @ op(other): input (M, K) or (..., M, K), other (K, N) -> (..., M, N).");
  m.def("batch_matmul", &functional::batch_matmul, py::arg("input"), py::arg("other"),
        py::arg("transpose_a") = false, py::arg("transpose_b") = false, py::arg("alpha") = 1.0,
        "alpha * op(input) @ op(other) per batch: (..., M, K) x (..., K, N) -> (..., M, N).");
  m.def("broadcast_matmul_grad_b", &functional::broadcast_matmul_grad_b, py::arg("input"),
        py::arg("other"), py::arg("alpha") = 1.0,
        "alpha * input^T @ other over all rows: (..., K) x (..., N) -> (K, N) (a matmul's weight "
        "gradient).");
  m.def(
      "linear",
      [](const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
        return functional::linear(input, weight, bias.value_or(Tensor()));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(),
      "input (..., in) @ weight (out, in)^T + bias (out,).");
}

}  // namespace ofl::python
