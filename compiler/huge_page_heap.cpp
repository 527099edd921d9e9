// Note [Huge-page heap] in huge_page_heap.h.

#include "compiler/huge_page_heap.h"

#include <gperftools/malloc_extension.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

namespace ofl::compiler {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunk = size_t{64} << 20;  // reserved from the kernel at a time

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// tcmalloc's source of memory: bump allocation from 2 MiB-aligned chunks advised for huge
// pages. tcmalloc serialises its calls (TCMalloc_SystemAlloc's lock), so no locking of its own.
// What it cannot serve (mmap failed, a size that would overflow) goes to tcmalloc's own
// allocator; the tail of a chunk too short for a request is left untouched (address space, not
// memory).
class HugePageAllocator : public SysAllocator {
 public:
  explicit HugePageAllocator(SysAllocator* fallback) : fallback_(fallback) {}

  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    const size_t align = alignment > kHugePage ? alignment : kHugePage;
    // What rounding up would overflow (a malloc near SIZE_MAX) is the fallback's to refuse.
    if (size > std::numeric_limits<size_t>::max() / 2 - align - kChunk) {
      return fallback_->Alloc(size, actual_size, alignment);
    }
    const size_t bytes = round_up(size, kHugePage);
    uintptr_t at = round_up(next_, align);
    if (next_ == 0 || at + bytes > end_) {
      if (!reserve(round_up(bytes, kChunk) + align)) {
        return fallback_->Alloc(size, actual_size, alignment);
      }
      at = round_up(next_, align);
    }
    next_ = at + bytes;
    if (actual_size != nullptr) *actual_size = bytes;
    return reinterpret_cast<void*>(at);
  }

 private:
  bool reserve(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    // Advice only: where the kernel has THP off, the pages are ordinary ones.
    madvise(p, bytes, MADV_HUGEPAGE);
    next_ = round_up(reinterpret_cast<uintptr_t>(p), kHugePage);
    end_ = reinterpret_cast<uintptr_t>(p) + bytes;
    return true;
  }

  SysAllocator* fallback_;
  uintptr_t next_ = 0, end_ = 0;
};

}  // namespace

bool use_huge_page_heap() {
  const char* flag = std::getenv("OFL_HUGE_PAGE_HEAP");
  if (flag != nullptr && std::string(flag) == "0") return false;
  MallocExtension* extension = MallocExtension::instance();
  SysAllocator* current = extension->GetSystemAllocator();
  if (current == nullptr) return false;
  static HugePageAllocator allocator(current);
  extension->SetSystemAllocator(&allocator);
  return true;
}

}  // namespace ofl::compiler
