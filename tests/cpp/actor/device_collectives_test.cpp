// Collectives on GPU placements (Note [Device collectives] in actor/device_collectives.h): where
// the compiler puts them, the communicators' bootstrap between runtimes, member 0's order, the
// choice of backend, and (with two GPUs or more) DP and TP through NCCL against one CPU rank.

#include "actor/device_collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <set>

#include "actor/runtime.h"
#include "comm/in_process_transport.h"
#include "compiler/compile.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/cuda/device.h"
#include "tests/cpp/models/mlp_training.h"

namespace ofl::actor {
namespace {

using compiler::OptimizerConfig;
using testing::MlpLayout;

// Sets an environment variable for its lifetime (unset: null).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

MlpLayout cuda_layout(const std::string& name) {
  for (MlpLayout layout : testing::mlp_layouts()) {
    if (layout.name != name) continue;
    layout.placement =
        Placement(DeviceType::kCUDA, layout.placement.ranks(), layout.placement.hierarchy());
    layout.name += "_cuda";
    return layout;
  }
  ADD_FAILURE() << "no layout " << name;
  return testing::mlp_layouts()[0];
}

proto::PlanProto cuda_plan(const std::string& layout) {
  return compiler::compile_graph(
      testing::build_mlp(cuda_layout(layout), OptimizerConfig::Kind::kSgd));
}

// The control ids of a plan's GPU communicators, by member list.
std::map<std::vector<int64_t>, int64_t> control_ids(const proto::PlanProto& plan) {
  std::map<std::vector<int64_t>, int64_t> ids;
  for (const auto& rank : plan.ranks()) {
    for (const auto& task : rank.tasks()) {
      if (task.kind() != proto::TaskProto::COLLECTIVE) continue;
      const std::vector<int64_t> members(task.collective().members().begin(),
                                         task.collective().members().end());
      auto [it, fresh] = ids.emplace(members, task.collective().control_id());
      EXPECT_EQ(it->second, task.collective().control_id()) << task.name();
    }
  }
  return ids;
}

TEST(DeviceCollectivePlans, CollectivesOfAGpuPlacementRunOnTheGpuWithoutHostCopies) {
  const proto::PlanProto plan = cuda_plan("dp2_tp2");
  std::map<int64_t, const proto::TaskProto*> tasks;
  std::map<int64_t, const proto::RegisterProto*> registers;
  for (const auto& rank : plan.ranks()) {
    for (const auto& task : rank.tasks()) tasks[task.id()] = &task;
    for (const auto& reg : rank.registers()) registers[reg.id()] = &reg;
  }
  int collectives = 0;
  std::set<int64_t> collective_ids;
  for (const auto& [id, task] : tasks) {
    if (task->kind() != proto::TaskProto::COLLECTIVE) continue;
    ++collectives;
    collective_ids.insert(task->collective().collective_id());
    EXPECT_EQ(task->device(), proto::PLAN_DEVICE_CUDA) << task->name();
    // Read from and written to GPU memory, by GPU tasks: no trip through the host (the receiver
    // of a transfer between GPUs reads nothing).
    for (int64_t r : task->inputs()) {
      const proto::RegisterProto& in = *registers.at(r);
      EXPECT_EQ(in.device(), proto::PLAN_DEVICE_CUDA) << task->name();
      EXPECT_NE(tasks.at(in.producer())->kind(), proto::TaskProto::COPY_H2D) << task->name();
    }
    const proto::RegisterProto& out = *registers.at(task->outputs(0));
    EXPECT_EQ(out.device(), proto::PLAN_DEVICE_CUDA) << task->name();
    for (int64_t c : out.consumers()) {
      EXPECT_NE(tasks.at(c)->kind(), proto::TaskProto::COPY_D2H) << task->name();
    }
  }
  EXPECT_GT(collectives, 0);
  // One control id per communicator (two along each dimension of the 2 x 2 grid, and the pairs
  // of the transfers between GPUs: Note [Transfers between GPUs]), distinct, and never a
  // collective's.
  const auto ids = control_ids(plan);
  std::set<std::vector<int64_t>> dimensions;
  for (const auto& [id, task] : tasks) {
    if (task->kind() != proto::TaskProto::COLLECTIVE) continue;
    const proto::CollectiveProto& c = task->collective();
    const std::vector<int64_t> members(c.members().begin(), c.members().end());
    if (c.communicator().rfind("dimension ", 0) == 0) {
      dimensions.insert(members);
    } else {
      EXPECT_EQ(c.communicator().rfind("the GPUs of ranks ", 0), 0u) << c.communicator();
      EXPECT_EQ(c.op(), proto::CollectiveProto::SEND_RECV) << task->name();
      // Member 0 sends (it decides the order of the pair's collectives), member 1 receives.
      EXPECT_EQ(task->inputs_size(), task->rank() == members[0] ? 1 : 0) << task->name();
    }
  }
  EXPECT_EQ(dimensions.size(), 4u);
  std::set<int64_t> distinct;
  for (const auto& [members, id] : ids) {
    distinct.insert(id);
    EXPECT_FALSE(collective_ids.count(id)) << id;
  }
  EXPECT_EQ(distinct.size(), ids.size());
  // A CPU placement's collectives stay on the host.
  const proto::PlanProto host = compiler::compile_graph(
      testing::build_mlp(testing::mlp_layouts()[5], OptimizerConfig::Kind::kSgd));
  for (const auto& rank : host.ranks()) {
    for (const auto& task : rank.tasks()) EXPECT_EQ(task.device(), proto::PLAN_DEVICE_CPU);
  }
}

// The communicators of one runtime's ranks, in a thread of its own (another process's part).
std::future<std::unique_ptr<DeviceCollectives>> make_in_thread(comm::Transport& transport,
                                                               const PlanIndex& index,
                                                               std::vector<int64_t> hosted,
                                                               DeviceCollectiveBackend backend,
                                                               double timeout_s) {
  return std::async(std::launch::async, [&transport, &index, hosted, backend, timeout_s] {
    return std::make_unique<DeviceCollectives>(transport, index, hosted, std::map<int64_t, int>{},
                                               backend, timeout_s);
  });
}

// dp2 x tp2: ranks 0 and 1 in one runtime, 2 and 3 in another. Rank 0 is member 0 of {0, 1} and
// {0, 2}, rank 1 of {1, 3}, rank 2 of {2, 3}: each runtime waits for the other's ids.
TEST(DeviceCollectivesBootstrap, MemberZeroHandsItsIdToMembersInOtherRuntimes) {
  const proto::PlanProto plan = cuda_plan("dp2_tp2");
  const PlanIndex index(plan, PlanIndexOptions{.cpu_kernels = true});
  comm::InProcessTransport transport;
  auto other = make_in_thread(transport, index, {2, 3}, DeviceCollectiveBackend::kSimulated, 30);
  DeviceCollectives mine(transport, index, {0, 1}, {}, DeviceCollectiveBackend::kSimulated, 30);
  const std::unique_ptr<DeviceCollectives> theirs = other.get();
  std::set<cuda::NcclUniqueId> ids;
  for (const auto& [members, control] : control_ids(plan)) {
    SCOPED_TRACE(str_cat("communicator of ranks ", members[0], " and ", members[1]));
    auto collectives = [&](int64_t rank) -> DeviceCollectives& {
      return rank < 2 ? mine : *theirs;
    };
    const DeviceCommunicator& first = collectives(members[0]).communicator(members[0], control);
    const DeviceCommunicator& second = collectives(members[1]).communicator(members[1], control);
    EXPECT_EQ(first.member(), 0);
    EXPECT_EQ(second.member(), 1);
    EXPECT_EQ(first.unique_id(), second.unique_id());
    ids.insert(first.unique_id());
  }
  EXPECT_EQ(ids.size(), control_ids(plan).size()) << "every communicator has an id of its own";
}

TEST(DeviceCollectivesBootstrap, AMemberWhoseMemberZeroNeverComesFailsNamingIt) {
  const proto::PlanProto plan = cuda_plan("dp2");
  const PlanIndex index(plan, PlanIndexOptions{.cpu_kernels = true});
  comm::InProcessTransport transport;
  try {
    DeviceCollectives collectives(transport, index, {1}, {}, DeviceCollectiveBackend::kSimulated,
                                  0.2);
    FAIL() << "it did not wait for rank 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_NE(std::string(e.what()).find("rank 1 waited 0.2 s for member 0 (rank 0) of dimension "
                                         "0 of cuda, [0, 1] to send the communicator's id"),
              std::string::npos)
        << e.what();
  }
}

TEST(DeviceCollectivesBootstrap, MembersRunningCollectivesTwoWaysAreRefused) {
  const proto::PlanProto plan = cuda_plan("dp2");
  const PlanIndex index(plan, PlanIndexOptions{.cpu_kernels = true});
  comm::InProcessTransport transport;
  auto first = make_in_thread(transport, index, {0}, DeviceCollectiveBackend::kSimulated, 30);
  // Rank 1 refuses, and member 0 hears of it too instead of waiting for rank 1 in NCCL's
  // creation: both name both ranks and both backends.
  auto expect_refused = [](const auto& run, const char* who) {
    try {
      run();
      ADD_FAILURE() << who << " went on";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 runs the collectives of dimension 0 of cuda, "
                                           "[0, 1] with host, but rank 0 with simulated"),
                std::string::npos)
          << who << ": " << e.what();
    }
  };
  expect_refused(
      [&] {
        DeviceCollectives second(transport, index, {1}, {}, DeviceCollectiveBackend::kHost, 30);
      },
      "rank 1");
  expect_refused([&] { first.get(); }, "rank 0");
}

// Note [Device collectives], "Order": the others queue in the order member 0 queued, whatever
// order their own collectives become ready in.
TEST(DeviceCollectivesOrder, MembersQueueInMemberZerosOrder) {
  const proto::PlanProto plan = cuda_plan("dp2");
  const PlanIndex index(plan, PlanIndexOptions{.cpu_kernels = true});
  comm::InProcessTransport transport;
  DeviceCollectives collectives(transport, index, {0, 1}, {}, DeviceCollectiveBackend::kSimulated,
                                30);
  const int64_t control = control_ids(plan).at({0, 1});
  DeviceCommunicator& zero = collectives.communicator(0, control);
  DeviceCommunicator& one = collectives.communicator(1, control);
  EXPECT_FALSE(one.take_turn(3)) << "member 0 has queued nothing yet";
  EXPECT_TRUE(zero.take_turn(7));
  EXPECT_TRUE(zero.take_turn(3));
  EXPECT_FALSE(one.take_turn(3)) << "7 comes first";
  EXPECT_TRUE(one.take_turn(7));
  EXPECT_TRUE(one.take_turn(3));
  EXPECT_FALSE(one.take_turn(3)) << "each order is used once";
}

TEST(DeviceCollectivesBackend, ChosenFromTheEnvironment) {
  {
    ScopedEnv choice("OFL_CUDA_COLLECTIVES", nullptr);
    ScopedEnv shared("OFL_CUDA_DEVICE", nullptr);
    EXPECT_EQ(choose_device_collective_backend(/*simulate_cuda=*/true),
              DeviceCollectiveBackend::kSimulated);
    EXPECT_EQ(choose_device_collective_backend(false), cuda::nccl_available()
                                                           ? DeviceCollectiveBackend::kNccl
                                                           : DeviceCollectiveBackend::kHost);
    EXPECT_EQ(cuda::nccl_available(), !cuda::nccl_version().empty());
  }
  {
    // Ranks sharing a GPU: NCCL would refuse them.
    ScopedEnv shared("OFL_CUDA_DEVICE", "0");
    EXPECT_EQ(choose_device_collective_backend(false), DeviceCollectiveBackend::kHost);
  }
  {
    ScopedEnv choice("OFL_CUDA_COLLECTIVES", "host");
    EXPECT_EQ(choose_device_collective_backend(false), DeviceCollectiveBackend::kHost);
  }
  {
    // Deterministic mode's GPU tasks have no events: only the host backend waits for the
    // compute stream before reading a register.
    ScopedEnv choice("OFL_CUDA_COLLECTIVES", nullptr);
    ScopedEnv shared("OFL_CUDA_DEVICE", nullptr);
    EXPECT_EQ(choose_device_collective_backend(false, /*deterministic=*/true),
              DeviceCollectiveBackend::kHost);
    EXPECT_EQ(choose_device_collective_backend(true, /*deterministic=*/true),
              DeviceCollectiveBackend::kSimulated);
  }
  {
    ScopedEnv choice("OFL_CUDA_COLLECTIVES", "nccl");
    try {
      choose_device_collective_backend(false, /*deterministic=*/true);
      ADD_FAILURE() << "nccl was accepted in deterministic mode";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find("OFL_CUDA_COLLECTIVES=nccl cannot run in deterministic mode"),
          std::string::npos)
          << e.what();
    }
  }
  {
    ScopedEnv choice("OFL_CUDA_COLLECTIVES", "gloo");
    try {
      choose_device_collective_backend(false);
      ADD_FAILURE() << "gloo was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "OFL_CUDA_COLLECTIVES must be 'nccl' or 'host'. However, got 'gloo'."),
                std::string::npos)
          << e.what();
    }
  }
}

// DP2, TP2 (and DP2 x TP2 with four GPUs) of the MLP through NCCL train like one CPU rank.
TEST(NcclCollectives, MlpLayoutsOnSeveralGpusTrainLikeOneCpuRank) {
  const int gpus = cuda::device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL puts each member of a communicator on a GPU of its "
                    "own); this machine has "
                 << gpus;
  }
  ScopedEnv shared("OFL_CUDA_DEVICE", nullptr);
  const auto kind = OptimizerConfig::Kind::kAdamW;
  const testing::TrainingRun reference = testing::train_mlp(testing::mlp_layouts()[0], kind, 3);
  for (const std::string name : {"dp2", "tp2", "dp3_uneven", "dp2_tp2"}) {
    const MlpLayout layout = cuda_layout(name);
    if (layout.placement.num_ranks() > gpus) continue;
    SCOPED_TRACE(name);
    testing::expect_same_training(
        reference,
        testing::train_mlp(layout, kind, 3,
                           [](proto::PlanProto plan) -> std::unique_ptr<PlanRunner> {
                             RuntimeOptions options;
                             options.first_gpu = 0;
                             auto runtime = std::make_unique<Runtime>(plan, options);
                             EXPECT_EQ(runtime->device_collectives()->backend(),
                                       DeviceCollectiveBackend::kNccl);
                             return runtime;
                           }),
        name);
  }
}

}  // namespace
}  // namespace ofl::actor
