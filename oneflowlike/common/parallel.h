#pragma once
// Splitting loops over the cores. Uses OpenMP, the same runtime oneDNN uses, so kernels and
// BLAS calls share one pool of spinning threads instead of fighting over the two cores.

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

namespace ofl {

/// Elements below which a loop stays on one thread (the hand-off costs more than it saves).
constexpr int64_t kParallelGrain = 32768;

/// How many items of `work_per_item` elements each make one grain (at least one).
inline int64_t items_per_grain(int64_t work_per_item) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work_per_item, 1));
}

/// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel when n > grain.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  const int threads = omp_get_max_threads();
  if (n <= grain || threads <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

// Note [One OpenMP pool at a time]: libgomp keeps a pool of worker threads per thread that
// starts a parallel region, and a worker between regions spins for a few milliseconds before it
// sleeps on a futex, unless the process holds more pool threads than it has cores; then every
// worker spins only about a hundred times (libgomp's "throttled" spin). The Python thread builds
// the model with eager kernels (a pool of its own), then waits while the runtime's compute thread
// runs the step (a second pool): on two cores that is one pool thread too many, each worker
// sleeps between two kernels, and every parallel region waits for a wake-up (about 45 us on this
// VM, MACHINE.md). Measured on the bf16 GPT step at 2 threads, it made the short kernels (casts,
// transposes, small reductions) slower than on one thread, 15 ms of a 160 ms step. So a thread
// gives its pool back before it waits for work that other threads do.

/// Releases the calling thread's OpenMP worker threads (its next parallel region starts new
/// ones); a no-op where it has none or is inside a parallel region.
inline void release_kernel_threads() {
  if (omp_in_parallel()) return;
  omp_pause_resource(omp_pause_soft, omp_get_initial_device());
}

/// Calls fn(i) for every i in [0, n), spread over the threads, each i a sizeable piece of work
/// of its own (a rank of a plan). What fn(i) writes must be its own. The first exception fn
/// throws (by i's order of being run) reaches the caller after every started call has ended;
/// the remaining calls are skipped.
template <class F>
void parallel_each(int64_t n, F&& fn) {
  if (n <= 0) return;
  if (n == 1 || omp_get_max_threads() <= 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::exception_ptr error;
  std::mutex mu;
  bool failed = false;
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < n; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failed) continue;
    }
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) error = std::current_exception();
      failed = true;
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ofl
