// CUDA streams and events (device.h).

#include <cuda_runtime_api.h>
#include <glog/logging.h>

#include <array>
#include <map>
#include <mutex>

#include "oneflowlike/cuda/check.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::cuda {

Stream::Stream(int device, StreamKind kind) : device_(device), kind_(kind) {
  check_device(device);
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device);
  native_ = s;
}

Stream::~Stream() {
  if (native_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(native_));
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(native_)), "cudaStreamSynchronize",
        device_);
}

bool Stream::idle() const {
  const cudaError_t status = cudaStreamQuery(static_cast<cudaStream_t>(native_));
  if (status == cudaErrorNotReady) return false;
  if (status != cudaSuccess) cudaGetLastError();  // not left for an unrelated check to report
  return true;
}

Stream& stream(int device, StreamKind kind) {
  check_device(device);
  static std::mutex mu;
  // Never destroyed: streams outlive every runtime and tensor, and CUDA tears them down at exit.
  static auto* streams = new std::map<int, std::array<Stream*, kNumStreamKinds>>();
  std::lock_guard<std::mutex> lock(mu);
  Stream*& slot = (*streams)[device][static_cast<int>(kind)];
  if (slot == nullptr) slot = new Stream(device, kind);
  return *slot;
}

void synchronize(int device) {
  check_device(device);
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
}

Event::Event(int device) : device_(device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags", device);
  native_ = e;
}

Event::~Event() {
  if (native_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(native_));
}

void Event::record(const Stream& stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(native_),
                        static_cast<cudaStream_t>(stream.native())),
        "cudaEventRecord", device_);
}

bool Event::done() const {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(native_));
  if (status == cudaErrorNotReady) return false;
  check(status, "cudaEventQuery", device_);
  return true;
}

void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(native_)), "cudaEventSynchronize", device_);
}

void Event::block(const Stream& stream) const {
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native()),
                            static_cast<cudaEvent_t>(native_), 0),
        "cudaStreamWaitEvent", device_);
}

namespace {

// Queues the copy on the compute stream of the device involved (the destination's between two
// devices, after the source's work); with `wait_for_host`, a copy to or from the host (or
// between two devices) returns once done.
void copy_on_stream(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                    bool wait_for_host) {
  OFL_ASSERT(dst_device >= 0 || src_device >= 0) << "a host-to-host copy is no CUDA copy";
  // A copy between two devices runs on the destination's stream after the source's work.
  const int device = dst_device >= 0 ? dst_device : src_device;
  if (dst_device >= 0 && src_device >= 0 && dst_device != src_device) {
    stream(src_device, StreamKind::kCompute).synchronize();
  }
  DeviceGuard guard(device);
  const Stream& s = stream(device, StreamKind::kCompute);
  const cudaMemcpyKind kind = dst_device < 0   ? cudaMemcpyDeviceToHost
                              : src_device < 0 ? cudaMemcpyHostToDevice
                                               : cudaMemcpyDeviceToDevice;
  check(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(s.native())),
        "cudaMemcpyAsync", device);
  // Within one device the copy is ordered like a kernel on the compute stream, which every
  // reader of either buffer uses: nothing to wait for on the host (an actor's act is then gated
  // by its event as a kernel's is; waiting here cost a GPU COPY act 15.7 us on an H100).
  const bool between_gpus = dst_device >= 0 && src_device >= 0 && dst_device != src_device;
  if (between_gpus || (wait_for_host && dst_device != src_device)) s.synchronize();
}

}  // namespace

void copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  copy_on_stream(dst, dst_device, src, src_device, bytes, /*wait_for_host=*/true);
}

void copy_queued(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  copy_on_stream(dst, dst_device, src, src_device, bytes, /*wait_for_host=*/false);
}

PinnedRange::PinnedRange(void* ptr, size_t bytes, int device) {
  if (ptr == nullptr || bytes == 0) {
    why_not_ = "nothing to lock";
    return;
  }
  DeviceGuard guard(device);
  // Portable: locked for every context, so unlocking it does not depend on which device is
  // current on the thread that drops it.
  const cudaError_t status = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
  if (status == cudaSuccess) {
    ptr_ = ptr;
    pinned_ = true;
  } else {
    cudaGetLastError();  // clear the error, so that no later call reports it
    why_not_ = str_cat("cudaHostRegister of ", bytes, " bytes: ", cudaGetErrorString(status));
  }
}

PinnedRange::~PinnedRange() {
  if (!pinned_) return;
  const cudaError_t status = cudaHostUnregister(ptr_);
  if (status != cudaSuccess) {
    cudaGetLastError();  // a later call must not report it
    LOG(WARNING) << "[cuda] unlocking a pinned host block failed: " << cudaGetErrorString(status)
                 << "; its pages may stay locked.";
  }
}

void zero(void* dst, int device, size_t bytes) {
  DeviceGuard guard(device);
  const Stream& s = stream(device, StreamKind::kCompute);
  check(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(s.native())), "cudaMemsetAsync",
        device);
}

}  // namespace ofl::cuda
