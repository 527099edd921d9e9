#include "oneflowlike/ops/creation.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_creation(py::module_& m) {
  m.def("fill", &functional::fill, py::arg("shape"), py::arg("dtype"), py::arg("value"),
        py::arg("device") = Device::cpu(), "A new tensor of `shape` filled with `value`.");
  m.def("cast", &functional::cast, py::arg("input"), py::arg("dtype"),
        "The tensor converted to dtype (itself when it already has it).");
  m.def(
      "to_device",
      [](const Tensor& x, const std::string& device) {
        return functional::to_device(x, Device::parse(device));
      },
      py::arg("input"), py::arg("device"),
      "input on `device` (itself when it is there); autograd follows it (Note [Device copies]).");
  m.def("arange", &functional::arange, py::arg("start"), py::arg("end"), py::arg("step"),
        py::arg("dtype"), py::arg("device") = Device::cpu(),
        "Values start, start+step, ... below end.");
}

}  // namespace ofl::python
