#pragma once

#include <string>
#include <string_view>

namespace ofl {

enum class DeviceType : int8_t { kCPU = 0, kCUDA = 1 };
constexpr int kNumDeviceTypes = 2;

const char* device_type_name(DeviceType type);
/// "cpu" or "cuda"; raises ValueError otherwise.
DeviceType device_type_from_name(std::string_view name);

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return Device{}; }
  /// "cpu", "cpu:0", "cuda", "cuda:1"; "cuda" alone is the current CUDA device.
  static Device parse(std::string_view spec);
  std::string to_string() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// Note [Simulated CUDA devices]: OFL_SIMULATE_CUDA_DEVICES=N (read once, at first use) gives
// this process N CUDA devices backed by host memory. Their tensors are allocated and counted per
// device as on a GPU, copies between them and the host are memcpys, and their ops run the CPU
// kernels. What it checks without a GPU is everything above the kernels: that values land on
// the device asked for, that autograd, modules and optimizers follow them, and that mixing
// devices is refused as it is with a GPU (tests/python/cuda_eager_cases.py). The CUDA kernels
// themselves only run on a GPU (tests/python/test_cuda*.py), and so does nothing here.
// Plans on CUDA placements run simulated too (RuntimeOptions::simulate_cuda).

/// N from OFL_SIMULATE_CUDA_DEVICES, 0 when unset. Raises naming the variable when it is not a
/// count from 0 to 64.
int simulated_cuda_devices();
/// Whether `device` is a simulated CUDA device.
inline bool is_simulated(Device device) {
  return device.type == DeviceType::kCUDA && simulated_cuda_devices() > 0;
}
/// Whether `device`'s memory is host memory (the CPU, or a simulated CUDA device).
inline bool in_host_memory(Device device) {
  return device.type == DeviceType::kCPU || is_simulated(device);
}
/// The device type whose kernels run `device`'s ops: the CPU's for a simulated CUDA device.
inline DeviceType kernel_device_type(Device device) {
  return in_host_memory(device) ? DeviceType::kCPU : device.type;
}
/// The CUDA devices this process can use: the simulated ones, else the GPUs it sees.
int cuda_devices();
/// The GPU the launcher named for this process (Note [The GPU of a rank] in
/// actor/runtime_loading.cpp): OFL_CUDA_DEVICE if set, else LOCAL_RANK. `variable` is null when
/// neither is set; `index` is -1 when the value is not a GPU index (an integer from 0).
struct LauncherGpu {
  const char* variable = nullptr;
  std::string text;
  int index = -1;
};
LauncherGpu launcher_gpu();
/// The device "cuda" names (torch.cuda.current_device), for the whole process. Until set, the
/// GPU the launcher gave this process, as the runtime takes it for plans (Note [The GPU of a
/// rank] in actor/runtime_loading.cpp): OFL_CUDA_DEVICE, else LOCAL_RANK, where this process
/// sees that GPU; else 0. So eager tensors, pinned memory and plans of a launched rank meet on
/// one GPU, and no process of a node makes a context on GPU 0 unless it is its own.
int current_cuda_device();
/// Sets it (torch.cuda.set_device); raises naming `index` when there is no such device.
void set_current_cuda_device(int index);

}  // namespace ofl
