#pragma once
// CUDA devices, their streams and events, and their caching allocators. This header names no
// CUDA type, so every target can include it: a build with CUDA compiles device.cpp, stream.cpp
// and allocator.cpp against the CUDA runtime; a build without it compiles no_cuda.cpp, where
// there are no devices and every use says so.
//
// Note [No CUDA device]: without a driver or a GPU (this repository's CI), device_count() is 0
// and why_no_device() has the driver's words; anything that needs a device raises
// ofl::Error(kUnavailable) "[cuda] no CUDA device <i>: <why>", never crashes.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "oneflowlike/allocator.h"

namespace ofl::cuda {

/// Whether this build has the CUDA backend (CMake's OFL_BUILD_CUDA).
bool built_with_cuda();
/// How many CUDA devices this process sees: 0 without a driver or a GPU, or without CUDA.
int device_count();
/// Why device_count() is 0 ("" when it is not): the driver's words, or "this build has no CUDA".
std::string why_no_device();
/// Raises ofl::Error (kUnavailable) naming `index` and why, unless device `index` exists.
void check_device(int index);
/// Makes `index` the calling thread's current device (cudaSetDevice): where its contexts and
/// untargeted calls go (torch.cuda.set_device). The thread has then chosen a device (Note
/// [Current devices]).
void set_device(int index);

// Note [Current devices]
// ~~~~~~~~~~~~~~~~~~~~~~
// A kernel launch, an event record and a cuBLAS call act on the calling thread's current
// device, and a stream of another device is an error there (invalid resource handle). The
// launcher gives rank r of a host GPU r (Note [The GPU of a rank] in actor/runtime_loading.cpp)
// without hiding the others, so every thread that works for a GPU makes it current first:
// kernels run inside a DeviceGuard for their tensors' device (run_kernel in actor/pieces.cpp,
// eager dispatch), stream and event creation, copies and NCCL calls inside one for theirs (an
// event record or a copy on another device's stream is allowed without), a rank's compute
// thread chooses its GPU at its first act (CudaActStream), and each device's event poller
// chooses its device when it starts.
// A thread that never chose a device reports device 0 without having touched it. Since CUDA 12
// cudaSetDevice creates the device's primary context (hundreds of MiB), so switching such a
// thread back to "its" device 0 would put a context on GPU 0 in every process of a node. A
// DeviceGuard on a thread that has not chosen a device therefore adopts its device and leaves
// it current (as PyTorch's MaybeSetDevice avoids contexts on devices a process does not use);
// on a thread that has (set_device, or an earlier guard), it restores the one that was.
class DeviceGuard {
 public:
  /// Makes `device` current (raising kUnavailable where it does not exist).
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the device to restore; -1: none
};

struct DeviceProperties {
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int64_t total_memory = 0;  // bytes
  int multiprocessors = 0;
};
DeviceProperties properties(int index);

/// The streams of a device: compute kernels, the two copy directions, and collectives, so
/// copies and communication overlap computation.
enum class StreamKind { kCompute = 0, kHostToDevice = 1, kDeviceToHost = 2, kCollective = 3 };
constexpr int kNumStreamKinds = 4;
constexpr const char* stream_kind_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::kCompute:
      return "compute";
    case StreamKind::kHostToDevice:
      return "host-to-device";
    case StreamKind::kDeviceToHost:
      return "device-to-host";
    case StreamKind::kCollective:
      return "collective";
  }
  return "unknown";
}

/// A CUDA stream of one device, non-blocking with respect to the legacy default stream.
class Stream {
 public:
  Stream(int device, StreamKind kind);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  StreamKind kind() const { return kind_; }
  /// The cudaStream_t.
  void* native() const { return native_; }
  /// Waits until every piece of work queued so far has finished.
  void synchronize() const;
  /// Whether every piece of work queued so far has finished (cudaStreamQuery; an error the
  /// stream reports counts as finished: synchronize() raises it). Never throws.
  bool idle() const;

 private:
  int device_;
  StreamKind kind_;
  void* native_ = nullptr;
};

/// Device `device`'s stream of `kind`, made on first use: one per kind and device.
Stream& stream(int device, StreamKind kind);
/// Waits on the host until every stream of device `device` has finished its work
/// (torch.cuda.synchronize; what a benchmark does before reading the clock).
void synchronize(int device);

/// A marker recorded on a stream after the work to wait for (no timing).
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Marks the point after the work queued on `stream` so far.
  void record(const Stream& stream);
  /// Whether that work has finished (never blocks; true for an event never recorded).
  bool done() const;
  /// Waits on the host until it has.
  void synchronize() const;
  /// Makes `stream`'s later work wait for it, without blocking the host.
  void block(const Stream& stream) const;

 private:
  int device_;
  void* native_ = nullptr;
};

/// Records an event on `stream` after the work queued on it so far, and calls `callback` from
/// the device's poller thread once that work has finished (with the error if polling failed).
/// One poller per device, which polls its events in the order they were recorded, so the
/// callbacks of one stream come in launch order (Note [Event-gated acts] in
/// actor/act_stream.h). Never blocks the caller.
void call_when_done(const Stream& stream, std::function<void(std::exception_ptr)> callback);

/// Copies `bytes` between host memory and device memory, or within a device, on the compute
/// stream of the device involved (so it follows the kernels launched there). A copy to or from
/// the host, or between two devices, returns once done; one within a device returns at once,
/// ordered before the later work of that stream. `dst_device` / `src_device` are -1 for host
/// memory.
void copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes);
/// As copy, but a copy to or from the host only queues on the device's compute stream and
/// returns: for an act gated by an event recorded after it on that stream (Note [Event-gated
/// acts] in actor/act_stream.h), whose readers and writers of both buffers wait for the event.
/// From page-locked host memory (PinnedRange) the copy then overlaps the host's work.
void copy_queued(void* dst, int dst_device, const void* src, int src_device, size_t bytes);

/// Note [Pinned host blocks]: page-locks a range of host memory for its lifetime
/// (cudaHostRegister), so copies between it and a GPU are DMA transfers that run asynchronously
/// and at full speed (from pageable memory the driver stages them, and a device-to-host copy
/// returns only once done). A range that cannot be locked (a limit on locked memory) stays
/// pageable: pinned() says so and why_not() why; copies from it remain correct.
class PinnedRange {
 public:
  /// Locked for every device's context (portable), registered with `device` current (the GPU
  /// that copies from and to it).
  PinnedRange(void* ptr, size_t bytes, int device);
  ~PinnedRange();
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;
  bool pinned() const { return pinned_; }
  const std::string& why_not() const { return why_not_; }

 private:
  void* ptr_ = nullptr;
  bool pinned_ = false;
  std::string why_not_;
};
/// Sets `bytes` of device memory to zero on `device`'s compute stream (asynchronous).
void zero(void* dst, int device, size_t bytes);

/// Device `index`'s caching allocator (Note [CUDA caching allocator] in allocator.cpp); raises
/// as check_device does when the device does not exist.
Allocator* allocator(int index);
/// Page-locked host memory (Tensor.pin_memory), cached as device memory is and portable to every
/// device (made in the current device's context at first use); its tensors are CPU tensors.
/// Raises as check_device does without a device.
Allocator* pinned_host_allocator();
/// Whether `allocator` is pinned_host_allocator() (without making it).
bool is_pinned_host_allocator(const Allocator* allocator);
/// Bytes the allocator of device `index` keeps for reuse (not live).
size_t cached_bytes(int index);
/// Returns every cached block of every device to CUDA (cudaFree).
void empty_cache();

}  // namespace ofl::cuda
