#pragma once
// Allocators hand out device memory and count it, so tests and benchmarks can report live
// and peak bytes per device.

#include <atomic>
#include <cstddef>

#include "oneflowlike/device.h"

namespace ofl {

class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Raises RuntimeError naming the size and device when memory cannot be had.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;

  size_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  /// Peak := live, so a caller can measure the peak of one region of code.
  void reset_peak() { peak_.store(live_bytes(), std::memory_order_relaxed); }

 protected:
  void count_allocation(size_t bytes);
  void count_deallocation(size_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<size_t> live_{0};
  std::atomic<size_t> peak_{0};
};

/// 64-byte aligned host memory (one cache line, and what AVX-512 loads like).
Allocator* cpu_allocator();
/// The allocator of a device; raises for a CUDA device in a build or machine without CUDA.
Allocator* allocator_for(Device device);

}  // namespace ofl
