// Note [CUDA caching allocator]: cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks are kept for reuse. A request rounds up to 512 bytes and takes
// the smallest cached block of at least that size and at most twice it (best fit, bounded
// waste), else a new cudaMalloc; when that runs out of memory, the cache goes back to CUDA and
// the request is tried once more. Live bytes count the blocks handed out (rounded sizes), as
// the CPU allocator counts its own; cached_bytes() the kept ones. No managed memory. A block is
// reused as soon as it is freed, so whoever frees it must know that the work using it on other
// streams has finished (a runtime's registers live as long as the runtime).
// The same cache holds page-locked host memory (cudaHostAlloc, portable to every device) for
// Tensor.pin_memory(): host tensors whose copies to and from GPUs are DMA transfers.

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "oneflowlike/cuda/check.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::cuda {

namespace {

constexpr size_t kRound = 512;

class CachingAllocator final : public Allocator {
 public:
  // `pinned_host`: page-locked host memory (made in device `device`'s context) instead.
  CachingAllocator(int device, bool pinned_host) : device_(device), pinned_host_(pinned_host) {}

  void* allocate(size_t bytes) override {
    const size_t size = (std::max<size_t>(bytes, 1) + kRound - 1) / kRound * kRound;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= 2 * size) {
        void* p = it->second;
        hand_out(p, it->first);
        cached_ -= it->first;
        free_.erase(it);
        return p;
      }
    }
    // Outside the lock: cudaMalloc and cudaFree may wait for the device, which may be running an
    // NCCL collective that waits for a peer, which may wait for this process's collective
    // engine, which allocates its scratch here.
    DeviceGuard guard(device_);
    void* p = nullptr;
    auto get = [&] {
      return pinned_host_ ? cudaHostAlloc(&p, size, cudaHostAllocPortable) : cudaMalloc(&p, size);
    };
    cudaError_t status = get();
    size_t released = 0;
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      released = release_cached();
      status = get();
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::lock_guard<std::mutex> lock(mu_);
      throw_error(ErrorCode::kUnavailable,
                  str_cat("[cuda allocator] out of ", pinned_host_ ? "page-locked host" : "",
                          " memory on cuda:", device_, ": could not allocate ", bytes, " bytes (",
                          live_bytes(), " bytes live; ", released,
                          " cached bytes were freed and the allocation tried again)."));
    }
    check(status, pinned_host_ ? "cudaHostAlloc" : "cudaMalloc", device_);
    std::lock_guard<std::mutex> lock(mu_);
    hand_out(p, size);
    return p;
  }

  void deallocate(void* ptr, size_t /*bytes: the block's own size is known*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_use_.find(ptr);
    OFL_ASSERT(it != in_use_.end()) << "[cuda allocator] freeing a block it did not hand out";
    free_.emplace(it->second, ptr);
    cached_ += it->second;
    count_deallocation(it->second);
    in_use_.erase(it);
  }

  Device device() const override {
    return pinned_host_ ? Device::cpu() : Device{DeviceType::kCUDA, device_};
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

  // Every cached block back to CUDA; returns how many bytes. Takes mu_ only to empty the
  // cache: the frees run outside it (see allocate).
  size_t release_cached() {
    std::multimap<size_t, void*> blocks;
    size_t released = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      released = cached_;
      cached_ = 0;
    }
    DeviceGuard guard(device_);
    for (const auto& [size, p] : blocks) pinned_host_ ? cudaFreeHost(p) : cudaFree(p);
    return released;
  }

  void empty() { release_cached(); }

 private:
  void hand_out(void* p, size_t size) {
    in_use_[p] = size;
    count_allocation(size);
  }

  const int device_;
  const bool pinned_host_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;         // size -> cached block; GUARDED_BY(mu_)
  std::unordered_map<void*, size_t> in_use_;  // block -> size; GUARDED_BY(mu_)
  size_t cached_ = 0;                         // GUARDED_BY(mu_)
};

std::mutex allocators_mu;
// Never destroyed: they outlive every tensor.
std::vector<CachingAllocator*>& allocators() {
  static auto* all = new std::vector<CachingAllocator*>();
  return *all;
}

CachingAllocator* caching_allocator(int index) {
  check_device(index);
  std::lock_guard<std::mutex> lock(allocators_mu);
  auto& all = allocators();
  if (all.size() <= static_cast<size_t>(index)) all.resize(index + 1, nullptr);
  if (all[index] == nullptr) all[index] = new CachingAllocator(index, /*pinned_host=*/false);
  return all[index];
}

CachingAllocator*& pinned_slot() {
  static CachingAllocator* pinned = nullptr;  // never freed: its blocks outlive every tensor
  return pinned;
}

CachingAllocator* pinned_allocator() {
  const int device = current_cuda_device();
  check_device(device);
  std::lock_guard<std::mutex> lock(allocators_mu);
  CachingAllocator*& pinned = pinned_slot();
  if (pinned == nullptr) pinned = new CachingAllocator(device, /*pinned_host=*/true);
  return pinned;
}

}  // namespace

Allocator* allocator(int index) { return caching_allocator(index); }

Allocator* pinned_host_allocator() { return pinned_allocator(); }

bool is_pinned_host_allocator(const Allocator* allocator) {
  std::lock_guard<std::mutex> lock(allocators_mu);
  return allocator != nullptr && allocator == pinned_slot();
}

size_t cached_bytes(int index) {
  return device_count() > index ? caching_allocator(index)->cached() : 0;
}

void empty_cache() {
  // Only the allocators made: a device guard on another device would make its context.
  std::vector<CachingAllocator*> made;
  {
    std::lock_guard<std::mutex> lock(allocators_mu);
    for (CachingAllocator* a : allocators()) {
      if (a != nullptr) made.push_back(a);
    }
    if (pinned_slot() != nullptr) made.push_back(pinned_slot());
  }
  for (CachingAllocator* a : made) a->empty();
}

}  // namespace ofl::cuda
