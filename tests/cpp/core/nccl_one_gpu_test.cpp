// NCCL through oneflowlike/cuda/nccl.h on one GPU: a communicator of one member, the only kind
// one GPU can hold (NCCL refuses two members on one device). Every member's part of a
// collective is then the identity, so each op's output equals its input, which checks what two
// GPUs are not needed for: that NCCL loads, that a communicator is made from a unique id, and
// that each op's call, its stream and the event after it work. The multi-GPU collectives are
// tests/cpp/actor/device_collectives_test.cpp (NcclCollectives, "needs 2 GPUs"). Skips without
// a GPU (CI), saying so.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

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
                                              "one member on cuda:0 (test)");
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
      if (queued.finish) queued.finish();
      cuda::Event done(0);
      done.record(comm.stream());
      done.synchronize();
      const Tensor host = output.to(Device::cpu());
      EXPECT_EQ(std::vector<float>(host.data<float>(), host.data<float>() + host.numel()), values);
    }
  }
}

}  // namespace
}  // namespace ofl
