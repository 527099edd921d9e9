#pragma once
// Splitting loops over the cores. Uses OpenMP, the same runtime oneDNN uses, so kernels and
// BLAS calls share one pool of spinning threads instead of fighting over the two cores.

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ofl {

/// Elements below which a loop stays on one thread (the hand-off costs more than it saves).
constexpr int64_t kParallelGrain = 32768;

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

}  // namespace ofl
