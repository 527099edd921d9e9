// CUDA devices (oneflowlike/cuda/device.h). Tests that need a GPU skip with the reason where
// there is none (CI); what must hold without one runs everywhere: no device is a clear error
// naming the device, never a crash (Note [No CUDA device]).

#include <gtest/gtest.h>

#include "oneflowlike/cuda/device.h"
#include "oneflowlike/tensor.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl {
namespace {

using testing::expect_error;

#define OFL_NEEDS_CUDA_DEVICE()                                  \
  if (cuda::device_count() == 0) {                               \
    GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device(); \
  }

TEST(CudaDevice, WithoutADeviceEveryUseSaysSoAndNothingCrashes) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(cuda::why_no_device().empty());
  const Device gpu{DeviceType::kCUDA, 0};
  expect_error([] { cuda::check_device(0); }, ErrorCode::kUnavailable, "[cuda] no CUDA device 0: ");
  expect_error([&] { allocator_for(gpu); }, ErrorCode::kUnavailable, "[cuda] no CUDA device 0");
  expect_error([&] { Tensor::empty(Shape{4}, DataType::kFloat32, gpu); }, ErrorCode::kUnavailable,
               "[cuda] no CUDA device 0");
  expect_error([] { cuda::Stream s(0, cuda::StreamKind::kCompute); }, ErrorCode::kUnavailable,
               "no CUDA device 0");
  expect_error([] { cuda::Event e(1); }, ErrorCode::kUnavailable, "no CUDA device 1");
  expect_error([] { cuda::properties(0); }, ErrorCode::kUnavailable, "no CUDA device 0");
  EXPECT_EQ(cuda::cached_bytes(0), 0u);
  cuda::empty_cache();  // nothing to free, nothing to fail
}

TEST(CudaDevice, AMissingIndexIsNamedWithTheDevicesThereAre) {
  OFL_NEEDS_CUDA_DEVICE();
  const int n = cuda::device_count();
  expect_error([&] { cuda::check_device(n); }, ErrorCode::kUnavailable,
               str_cat("no CUDA device ", n, ": this process sees ", n));
  const cuda::DeviceProperties p = cuda::properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.major, 7);
  EXPECT_GT(p.total_memory, 0);
}

TEST(CudaDevice, TheCachingAllocatorReusesBlocksAndCountsLiveAndPeakBytes) {
  OFL_NEEDS_CUDA_DEVICE();
  cuda::empty_cache();
  Allocator* a = cuda::allocator(0);
  const size_t live = a->live_bytes();
  a->reset_peak();
  void* first = a->allocate(1000);  // 1024 bytes
  EXPECT_EQ(a->live_bytes(), live + 1024);
  a->deallocate(first, 1000);
  EXPECT_EQ(a->live_bytes(), live);
  EXPECT_EQ(cuda::cached_bytes(0), 1024u);
  void* again = a->allocate(900);  // the cached 1024-byte block
  EXPECT_EQ(again, first);
  EXPECT_EQ(cuda::cached_bytes(0), 0u);
  void* big = a->allocate(3000);  // more than twice 1024: a new block
  EXPECT_NE(big, first);
  EXPECT_EQ(a->peak_bytes(), live + 1024 + 3072);
  a->deallocate(again, 900);
  a->deallocate(big, 3000);
  cuda::empty_cache();
  EXPECT_EQ(cuda::cached_bytes(0), 0u);
}

TEST(CudaDevice, AnEventTellsWhenTheWorkBeforeItOnAStreamIsDone) {
  OFL_NEEDS_CUDA_DEVICE();
  cuda::Stream& s = cuda::stream(0, cuda::StreamKind::kCompute);
  EXPECT_EQ(&s, &cuda::stream(0, cuda::StreamKind::kCompute));  // one per kind and device
  EXPECT_NE(&s, &cuda::stream(0, cuda::StreamKind::kHostToDevice));
  cuda::Event e(0);
  EXPECT_TRUE(e.done());  // never recorded
  e.record(s);
  e.synchronize();
  EXPECT_TRUE(e.done());
  e.block(cuda::stream(0, cuda::StreamKind::kDeviceToHost));
  cuda::stream(0, cuda::StreamKind::kDeviceToHost).synchronize();
}

}  // namespace
}  // namespace ofl
