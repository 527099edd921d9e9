// CUDA devices: how many, what they are, and Note [No CUDA device].

#include "oneflowlike/cuda/device.h"

#include <cuda_runtime_api.h>

#include "oneflowlike/cuda/check.h"

namespace ofl::cuda {

namespace {

struct Census {
  int count = 0;
  std::string why;  // why count is 0
};

// Asked once: the answer does not change while the process runs.
const Census& census() {
  static const Census result = [] {
    Census c;
    const cudaError_t status = cudaGetDeviceCount(&c.count);
    if (status != cudaSuccess) {
      c.count = 0;
      c.why = str_cat(cudaGetErrorString(status), " (", cudaGetErrorName(status), ")");
      cudaGetLastError();  // clear it: later calls must not see it
    } else if (c.count == 0) {
      c.why = "the driver sees no GPU";
    }
    return c;
  }();
  return result;
}

}  // namespace

bool built_with_cuda() { return true; }
int device_count() { return census().count; }
std::string why_no_device() { return census().why; }

void check_device(int index) {
  const Census& c = census();
  OFL_CHECK_CODE(c.count > 0, ErrorCode::kUnavailable, "[cuda] no CUDA device ", index, ": ", c.why,
                 ".");
  OFL_CHECK_CODE(index >= 0 && index < c.count, ErrorCode::kUnavailable, "[cuda] no CUDA device ",
                 index, ": this process sees ", c.count, " (cuda:0 to cuda:", c.count - 1,
                 "; CUDA_VISIBLE_DEVICES chooses which).");
}

namespace {
thread_local bool chose_device = false;  // Note [Current devices]
}  // namespace

void set_device(int index) {
  check_device(index);
  check(cudaSetDevice(index), "cudaSetDevice", index);
  chose_device = true;
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice", device);
  if (current != device) {
    check(cudaSetDevice(device), "cudaSetDevice", device);
    if (chose_device) previous_ = current;  // else adopted: Note [Current devices]
  }
  chose_device = true;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // the device was current: nothing to report
}

DeviceProperties properties(int index) {
  check_device(index);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties", index);
  DeviceProperties out;
  out.name = p.name;
  out.major = p.major;
  out.minor = p.minor;
  out.total_memory = static_cast<int64_t>(p.totalGlobalMem);
  out.multiprocessors = p.multiProcessorCount;
  return out;
}

}  // namespace ofl::cuda
