// flow.cuda: whether this process has CUDA devices, and why not (Note [No CUDA device]).

#include "oneflowlike/cuda/device.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_cuda(py::module_& m) {
  m.def("cuda_built", &cuda::built_with_cuda, "Whether this build has the CUDA backend.");
  m.def("cuda_device_count", &cuda_devices,
        "How many CUDA devices this process sees (0 without a driver or a GPU; the simulated "
        "ones under OFL_SIMULATE_CUDA_DEVICES).");
  m.def(
      "cuda_simulated", [] { return simulated_cuda_devices() > 0; },
      "Whether the CUDA devices are simulated in host memory (Note [Simulated CUDA devices]).");
  m.def(
      "cuda_why_no_device",
      [] { return simulated_cuda_devices() > 0 ? std::string() : cuda::why_no_device(); },
      "Why there is no CUDA device ('' when there is one).");
  m.def(
      "cuda_synchronize",
      [](int device) {
        if (simulated_cuda_devices() == 0) cuda::synchronize(device);  // else nothing queues
      },
      py::arg("device"), py::call_guard<py::gil_scoped_release>(),
      "Waits until every stream of the device has finished its work.");
}

}  // namespace ofl::python
