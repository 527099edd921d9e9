// flow.cuda: whether this process has CUDA devices, and why not (Note [No CUDA device]).

#include <unistd.h>

#include <string>

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
  m.def("cuda_current_device", &current_cuda_device, "The device 'cuda' names.");
  m.def("cuda_set_device", &set_current_cuda_device, py::arg("index"),
        "Makes 'cuda' name device `index`.");
  m.def(
      "cuda_memory_stats",
      [](int index) {
        Allocator* a = allocator_for(Device{DeviceType::kCUDA, index});  // raises when absent
        const size_t cached = simulated_cuda_devices() > 0 ? 0 : cuda::cached_bytes(index);
        return py::make_tuple(a->live_bytes(), a->peak_bytes(), a->live_bytes() + cached);
      },
      py::arg("index"), "(allocated, peak allocated, reserved) bytes of a CUDA device.");
  m.def(
      "cuda_reset_peak",
      [](int index) { allocator_for(Device{DeviceType::kCUDA, index})->reset_peak(); },
      py::arg("index"), "Peak := allocated, for a device.");
  m.def(
      "cuda_empty_cache",
      [] {
        if (simulated_cuda_devices() == 0) cuda::empty_cache();
      },
      "Returns the cached blocks of every device to CUDA.");
  m.def(
      "cuda_properties",
      [](int index) {
        py::dict d;
        if (simulated_cuda_devices() > 0) {
          allocator_for(Device{DeviceType::kCUDA, index});  // raises when absent
          d["name"] = "simulated CUDA device (host memory, CPU kernels)";
          d["major"] = 9;  // what the CUDA build targets (sm_90), so capability checks pass
          d["minor"] = 0;
          d["total_memory"] = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
          d["multi_processor_count"] = 0;
          return d;
        }
        const cuda::DeviceProperties p = cuda::properties(index);
        d["name"] = p.name;
        d["major"] = p.major;
        d["minor"] = p.minor;
        d["total_memory"] = p.total_memory;
        d["multi_processor_count"] = p.multiprocessors;
        return d;
      },
      py::arg("index"), "A CUDA device's name, compute capability, memory and SM count.");
}

}  // namespace ofl::python
