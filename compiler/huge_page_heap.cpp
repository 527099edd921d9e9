// Note [Huge-page heap] in huge_page_heap.h.

#include "compiler/huge_page_heap.h"

#include <gperftools/malloc_extension.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ofl::compiler {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunk = size_t{64} << 20;  // reserved from the kernel at a time

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

constexpr size_t kChunksAhead = 2;  // mapped and being populated beyond the one in use

// Note [Populating ahead]: the kernel clears every fresh page before the process sees it, and
// on this VM that clearing was a quarter of the 1,024-rank compile (perf: clear_page_erms, 8 s,
// nearly all of it while expansion, which runs on one thread, grows the heap). So the chunks
// after the one in use are mapped early and a thread of their own populates them
// (MADV_POPULATE_WRITE: the kernel's write faults, clearing included, without writing a byte),
// on the core expansion leaves idle; by the time the heap reaches them their pages are there.
// Where the kernel lacks it (before Linux 5.14) the advice fails and the pages fault as before.
// The thread is never destroyed: tcmalloc may call in until the process ends. Nothing here
// allocates once installed (tcmalloc calls the system allocator under its own lock, so a malloc
// from inside could wait for itself): the queue is a fixed ring, and a chunk that finds it full
// is left to fault as before.
class Populator {
 public:
  Populator() : thread_([this] { loop(); }) { thread_.detach(); }
  void add(void* at, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (size_ == kSlots) return;
      slots_[(head_ + size_) % kSlots] = {at, bytes};
      ++size_;
    }
    cv_.notify_one();
  }

 private:
  static constexpr size_t kSlots = 8;
  void loop() {
    for (;;) {
      std::pair<void*, size_t> range;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return size_ > 0; });
        range = slots_[head_];
        head_ = (head_ + 1) % kSlots;
        --size_;
      }
      // A huge page at a time, so the heap may reach a chunk while it is being populated.
      for (size_t at = 0; at < range.second; at += kHugePage) {
        char* page = static_cast<char*>(range.first) + at;
        if (madvise(page, std::min(kHugePage, range.second - at), MADV_POPULATE_WRITE) != 0) break;
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::array<std::pair<void*, size_t>, kSlots> slots_{};  // GUARDED_BY(mu_)
  size_t head_ = 0, size_ = 0;                            // GUARDED_BY(mu_)
  std::thread thread_;
};

// tcmalloc's source of memory: bump allocation from 2 MiB-aligned chunks advised for huge
// pages, the next ones populated ahead (Note [Populating ahead]). tcmalloc serialises its calls
// (TCMalloc_SystemAlloc's lock), so no locking of its own. What it cannot serve (mmap failed, a
// size that would overflow) goes to tcmalloc's own allocator; the tail of a chunk too short for
// a request is left untouched (address space, not memory).
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
  // Makes [next_, end_) a region of at least `bytes`: the oldest chunk mapped ahead when it is
  // large enough, else a fresh mapping; then tops the chunks ahead up to kChunksAhead.
  bool reserve(size_t bytes) {
    std::pair<uintptr_t, size_t> region{0, 0};
    if (ahead_count_ > 0 && ahead_[0].second >= bytes) {
      region = ahead_[0];
      std::copy(ahead_.begin() + 1, ahead_.end(), ahead_.begin());
      --ahead_count_;
    } else {
      region = map(bytes);
      if (region.first == 0) return false;
    }
    next_ = round_up(region.first, kHugePage);
    end_ = region.first + region.second;
    while (ahead_count_ < kChunksAhead) {
      const std::pair<uintptr_t, size_t> chunk = map(kChunk + kHugePage);
      if (chunk.first == 0) break;
      populator_->add(reinterpret_cast<void*>(round_up(chunk.first, kHugePage)), kChunk);
      ahead_[ahead_count_++] = chunk;
    }
    return true;
  }

  static std::pair<uintptr_t, size_t> map(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return {0, 0};
    // Advice only: where the kernel has THP off, the pages are ordinary ones.
    madvise(p, bytes, MADV_HUGEPAGE);
    return {reinterpret_cast<uintptr_t>(p), bytes};
  }

  SysAllocator* fallback_;
  uintptr_t next_ = 0, end_ = 0;
  // Mapped and being populated, oldest first: (start, bytes); a fixed array (no malloc here).
  std::array<std::pair<uintptr_t, size_t>, kChunksAhead> ahead_{};
  size_t ahead_count_ = 0;
  Populator* populator_ = new Populator();  // never destroyed (Note [Populating ahead])
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
