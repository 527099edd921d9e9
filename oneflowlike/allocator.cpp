#include "oneflowlike/allocator.h"

#include <sys/mman.h>

#include <cstdlib>

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

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    // Large blocks are 2 MiB aligned and asked to be backed by huge pages: first touches then
    // fault 512x less often, which is most of the cost of a fresh large tensor.
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded);
    if (p != nullptr && align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
    OFL_CHECK_CODE(p != nullptr, ErrorCode::kUnavailable,
                   "[cpu allocator] out of memory: could not allocate ", bytes, " bytes (",
                   live_bytes(), " bytes live).");
    count_allocation(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    std::free(ptr);
    count_deallocation(bytes);
  }
  Device device() const override { return Device::cpu(); }
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator();  // never destroyed: outlives all tensors
  return allocator;
}

Allocator* allocator_for(Device device) {
  if (device.type == DeviceType::kCUDA) return cuda::allocator(device.index);  // or raises
  return cpu_allocator();
}

}  // namespace ofl
