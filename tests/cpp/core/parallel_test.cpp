// parallel_each (oneflowlike/common/parallel.h): every index once, and a thrown error reaches
// the caller instead of ending the process.

#include "oneflowlike/common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace ofl {
namespace {

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

}  // namespace
}  // namespace ofl
