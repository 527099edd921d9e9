// parallel_each (oneflowlike/common/parallel.h): every index once, and a thrown error reaches
// the caller instead of ending the process. release_kernel_threads: the caller's OpenMP workers
// end.

#include "oneflowlike/common/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::process_threads;

TEST(ParallelEach, RunsEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    parallel_each(n, [&](int64_t i) { calls[i].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << i;
  }
}

TEST(ParallelEach, AnExceptionReachesTheCaller) {
  std::atomic<int> calls{0};
  EXPECT_THROW(parallel_each(64,
                             [&](int64_t i) {
                               calls.fetch_add(1);
                               if (i == 5) throw std::runtime_error("rank 5 failed");
                             }),
               std::runtime_error);
  EXPECT_GE(calls.load(), 1);
}

// Note [One OpenMP pool at a time].
TEST(ReleaseKernelThreads, EndsTheCallersOpenMPWorkers) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  std::atomic<int> ran{0};
#pragma omp parallel
  ran.fetch_add(1);
  ASSERT_EQ(ran.load(), 3);
  const int with_pool = process_threads();
  release_kernel_threads();
  EXPECT_EQ(process_threads(), with_pool - 2);
  release_kernel_threads();  // none left: nothing to do
  EXPECT_EQ(process_threads(), with_pool - 2);
  ran = 0;
#pragma omp parallel
  ran.fetch_add(1);  // a new pool
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(process_threads(), with_pool);
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace ofl
