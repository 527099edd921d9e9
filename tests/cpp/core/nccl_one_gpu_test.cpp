// NCCL through oneflowlike/cuda/nccl.h on one GPU: a communicator of one member, the only kind
// one GPU can hold (NCCL refuses two members on one device). Every member's part of a
// collective is then the identity, so each op's output equals its input, which checks what two
// GPUs are not needed for: that NCCL loads, that a communicator is made from a unique id, and
// that each op's call, its stream and the event after it work. The multi-GPU collectives are
// tests/cpp/actor/device_collectives_test.cpp (NcclCollectives, "needs 2 GPUs"). Skips without
// a GPU (CI), saying so.

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/cuda/nccl.h"
#include "oneflowlike/tensor.h"

namespace ofl {
namespace {

using Op = proto::CollectiveProto;

proto::CollectiveProto one_member(Op::Op op, int axis) {
  proto::CollectiveProto c;
  c.set_op(op);
  c.add_members(0);
  c.set_communicator("one member on cuda:0 (test)");
  c.set_axis(axis);
  c.set_out_axis(axis == 0 ? 1 : 0);
  c.set_root(0);
  return c;
}

TEST(NcclOneGpu, EveryOpOfAOneMemberCommunicatorGivesItsInput) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  ASSERT_TRUE(cuda::nccl_available()) << "NCCL does not load in this process";
  auto comms = cuda::NcclCommunicator::create(cuda::nccl_unique_id(), 1, {{0, 0}},
                                              "one member on cuda:0 (test)", /*timeout_s=*/60);
  ASSERT_EQ(comms.size(), 1u);
  cuda::NcclCommunicator& comm = *comms[0];
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.member(), 0);
  const Device gpu{DeviceType::kCUDA, 0};
  std::vector<float> values(6 * 5);
  std::iota(values.begin(), values.end(), -7.0f);
  const Shape shape{6, 5};
  for (const Op::Op op :
       {Op::ALL_REDUCE, Op::REDUCE_SCATTER, Op::ALL_GATHER, Op::ALL_TO_ALL, Op::BROADCAST}) {
    for (const int axis : {0, 1, -1}) {
      if (op == Op::ALL_TO_ALL && axis < 0) continue;  // chunks along two axes
      SCOPED_TRACE(Op::Op_Name(op) + " along axis " + std::to_string(axis));
      const Tensor input = Tensor::from_host(values.data(), shape, DataType::kFloat32, gpu);
      const Tensor output = Tensor::zeros(shape, DataType::kFloat32, gpu);
      cuda::NcclCommunicator::Queued queued =
          comm.collective(one_member(op, axis), input, output, "the test's collective");
      // Note [Nonblocking communicators]: nothing more on its stream until it is ready.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!comm.ready("the test's collective")) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the collective never launched";
        std::this_thread::yield();
      }
      if (queued.finish) queued.finish();
      cuda::Event done(0);
      done.record(comm.stream());
      done.synchronize();
      const Tensor host = output.to(Device::cpu());
      EXPECT_EQ(std::vector<float>(host.data<float>(), host.data<float>() + host.numel()), values);
    }
  }
}

// Note [Nonblocking communicators]: a member that never joins is a deadline, not a hang, and
// the member that did join is aborted (a second communicator on the GPU is made afterwards).
TEST(NcclOneGpu, AMemberThatNeverJoinsEndsCreationAtItsDeadline) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  ASSERT_TRUE(cuda::nccl_available()) << "NCCL does not load in this process";
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)cuda::NcclCommunicator::create(cuda::nccl_unique_id(), 2, {{0, 0}},
                                         "two members, one never comes (test)", /*timeout_s=*/2);
    FAIL() << "a communicator missing a member was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << e.what();
    EXPECT_NE(std::string(e.what()).find("two members, one never comes (test)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("member 0 on cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  auto comms = cuda::NcclCommunicator::create(cuda::nccl_unique_id(), 1, {{0, 0}},
                                              "one member after the failure (test)", 60);
  EXPECT_EQ(comms.size(), 1u);
}

// A communicator aborted right after a collective was queued (still launching in the
// background, or running) ends at once: abort() returns with its stream drained, and the
// communicator refuses work after it, naming itself; its destructor does not touch it again.
TEST(NcclOneGpu, AbortEndsACommunicatorWithWorkQueued) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::why_no_device();
  ASSERT_TRUE(cuda::nccl_available()) << "NCCL does not load in this process";
  auto comms = cuda::NcclCommunicator::create(cuda::nccl_unique_id(), 1, {{0, 0}},
                                              "one member, aborted (test)", 60);
  const Device gpu{DeviceType::kCUDA, 0};
  const Tensor input = Tensor::zeros(Shape{1 << 24}, DataType::kFloat32, gpu);
  const Tensor output = Tensor::zeros(Shape{1 << 24}, DataType::kFloat32, gpu);
  cuda::NcclCommunicator::Queued queued =
      comms[0]->collective(one_member(Op::ALL_REDUCE, -1), input, output, "the test's collective");
  const auto start = std::chrono::steady_clock::now();
  comms[0]->abort();
  EXPECT_TRUE(comms[0]->stream().idle()) << "abort() returned with work on its stream";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  try {
    comms[0]->ready("after the abort");
    FAIL() << "an aborted communicator took work";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one member, aborted (test) (member 0 of 1, cuda:0)"),
              std::string::npos)
        << e.what();
  }
  comms.clear();
}

}  // namespace
}  // namespace ofl
