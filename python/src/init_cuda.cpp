// flow.cuda: whether this process has CUDA devices, and why not (Note [No CUDA device]).

#include "oneflowlike/cuda/device.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_cuda(py::module_& m) {
  m.def("cuda_built", &cuda::built_with_cuda, "Whether this build has the CUDA backend.");
  m.def("cuda_device_count", &cuda::device_count,
        "How many CUDA devices this process sees (0 without a driver or a GPU).");
  m.def("cuda_why_no_device", &cuda::why_no_device,
        "Why there is no CUDA device ('' when there is one).");
  m.def("cuda_synchronize", &cuda::synchronize, py::arg("device"),
        py::call_guard<py::gil_scoped_release>(),
        "Waits until every stream of the device has finished its work.");
}

}  // namespace ofl::python
