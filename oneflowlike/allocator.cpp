#include "oneflowlike/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"

namespace ofl {

void Allocator::count_allocation(size_t bytes) {
  const size_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

namespace {

// Host memory: the CPU's, or a simulated CUDA device's (Note [Simulated CUDA devices]), counted
// per device.
class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(Device device) : device_(device) {}
  void* allocate(size_t bytes) override {
    // Large blocks are 2 MiB aligned and their whole 2 MiB pages asked to be backed by huge
    // pages: first touches then fault 512x less often, which is most of the cost of a fresh
    // large tensor. The tail past the last whole huge page stays on 4 KiB pages, so a block
    // costs its bytes (rounded to 4 KiB), not a multiple of 2 MiB: the process's memory then
    // follows the planned bytes (docs/benchmarks.md, "Planned memory per rank").
    constexpr size_t kHugePage = size_t{2} << 20;
    constexpr size_t kPage = size_t{4} << 10;
    const bool huge = bytes >= kHugePage;
    const size_t align = huge ? kHugePage : 64;
    const size_t granule = huge ? kPage : 64;
    const size_t rounded = std::max<size_t>((bytes + granule - 1) / granule * granule, granule);
    void* p = nullptr;
    if (posix_memalign(&p, align, rounded) != 0) p = nullptr;
    if (p != nullptr && huge) madvise(p, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);
    OFL_CHECK_CODE(p != nullptr, ErrorCode::kUnavailable, "[", device_.to_string(),
                   " allocator] out of memory: could not allocate ", bytes, " bytes (",
                   live_bytes(), " bytes live).");
    count_allocation(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    std::free(ptr);
    count_deallocation(bytes);
  }
  Device device() const override { return device_; }

 private:
  Device device_;
};

Allocator* simulated_cuda_allocator(int index) {
  static const std::vector<CpuAllocator*> allocators = [] {
    std::vector<CpuAllocator*> all;  // never destroyed, as the CPU's
    for (int i = 0; i < simulated_cuda_devices(); ++i) {
      all.push_back(new CpuAllocator(Device{DeviceType::kCUDA, i}));
    }
    return all;
  }();
  OFL_CHECK_CODE(index >= 0 && index < static_cast<int>(allocators.size()), ErrorCode::kUnavailable,
                 "[cuda] no CUDA device ", index, ": this process has ", allocators.size(),
                 " simulated CUDA devices (OFL_SIMULATE_CUDA_DEVICES).");
  return allocators[index];
}

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator* allocator =
      new CpuAllocator(Device::cpu());  // never destroyed: outlives all tensors
  return allocator;
}

Allocator* allocator_for(Device device) {
  if (is_simulated(device)) return simulated_cuda_allocator(device.index);
  if (device.type == DeviceType::kCUDA) return cuda::allocator(device.index);  // or raises
  return cpu_allocator();
}

}  // namespace ofl
