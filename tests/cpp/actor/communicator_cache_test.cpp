// GPU communicators kept per process (Note [Communicators kept per process] in
// actor/communicator_cache.h), on the simulated backend: runtimes of one job share them, the
// members agree at load on whether to reuse one, runs sharing one take turns, and a runtime
// whose communicator was aborted by another's failure is refused at its next run.

#include "actor/communicator_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "actor/device_collectives.h"
#include "actor/runtime.h"
#include "actor/session_transport.h"
#include "comm/in_process_transport.h"
#include "compiler/compile.h"
#include "tests/cpp/models/mlp_training.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using compiler::OptimizerConfig;

constexpr auto kSimulated = DeviceCollectiveBackend::kSimulated;

testing::MlpLayout layout_on_cuda(const std::string& name) {
  for (testing::MlpLayout layout : testing::mlp_layouts()) {
    if (layout.name != name) continue;
    layout.placement =
        Placement(DeviceType::kCUDA, layout.placement.ranks(), layout.placement.hierarchy());
    return layout;
  }
  ADD_FAILURE() << "no layout " << name;
  return testing::mlp_layouts()[0];
}

testing::MlpLayout dp2_layout_on_cuda() { return layout_on_cuda("dp2"); }

proto::PlanProto dp2_on_cuda() {
  return compiler::compile_graph(
      testing::build_mlp(dp2_layout_on_cuda(), OptimizerConfig::Kind::kSgd));
}

// The one GPU communicator of the dp2 plan: ranks 0 and 1.
int64_t control_id(const proto::PlanProto& plan) {
  for (const auto& task : plan.ranks(0).tasks()) {
    if (task.kind() == proto::TaskProto::COLLECTIVE) return task.collective().control_id();
  }
  ADD_FAILURE() << "no collective";
  return -1;
}

// The dp2 plan on CUDA placements, indexed, and its one communicator's control id.
struct Dp2Plan {
  proto::PlanProto plan = dp2_on_cuda();
  PlanIndex index{plan, PlanIndexOptions{.cpu_kernels = true}};
  int64_t control = control_id(plan);
};

// One job of two processes (one rank each) over one in-process network; each runtime opens
// a session of its own, as every nn.Graph does.
struct Job {
  std::shared_ptr<comm::InProcessTransport> base = std::make_shared<comm::InProcessTransport>();
  std::shared_ptr<TransportSessions> rank0 =
      std::make_shared<TransportSessions>(base, std::vector<int64_t>{0});
  std::shared_ptr<TransportSessions> rank1 =
      std::make_shared<TransportSessions>(base, std::vector<int64_t>{1});
};

// The two processes' communicators of one runtime (session `session`), loaded at once.
struct Loaded {
  std::shared_ptr<comm::Transport> t0, t1;
  std::unique_ptr<DeviceCollectives> c0, c1;
};

// The communicators first: they send through the transports.
void unload(Loaded& l) {
  l.c0.reset();
  l.c1.reset();
  l.t0.reset();
  l.t1.reset();
}

Loaded load(Job& job, const PlanIndex& index, uint32_t session) {
  Loaded l;
  l.t0 = job.rank0->open(session);
  l.t1 = job.rank1->open(session);
  auto second = std::async(std::launch::async, [&] {
    return std::make_unique<DeviceCollectives>(*l.t1, index, std::vector<int64_t>{1},
                                               std::map<int64_t, int>{}, kSimulated, 30);
  });
  l.c0 = std::make_unique<DeviceCollectives>(*l.t0, index, std::vector<int64_t>{0},
                                             std::map<int64_t, int>{}, kSimulated, 30);
  l.c1 = second.get();
  return l;
}

TEST(CommunicatorCache, RuntimesOfOneJobShareTheirCommunicators) {
  const Dp2Plan dp2;
  const PlanIndex& index = dp2.index;
  const int64_t control = dp2.control;
  Job job;
  const int64_t before = CommunicatorCache::process().made();
  Loaded first = load(job, index, 1);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 2) << "one per process";
  const cuda::NcclUniqueId id = first.c0->communicator(0, control).unique_id();
  EXPECT_EQ(first.c1->communicator(1, control).unique_id(), id);
  {
    Loaded second = load(job, index, 2);
    EXPECT_EQ(CommunicatorCache::process().made(), before + 2) << "the second graph made one";
    EXPECT_EQ(second.c0->communicator(0, control).unique_id(), id);
    EXPECT_EQ(second.c1->communicator(1, control).unique_id(), id);
  }
  // Another job (another network) on the same ranks has communicators of its own.
  Job other;
  Loaded elsewhere = load(other, index, 1);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 4);
  EXPECT_NE(elsewhere.c0->communicator(0, control).unique_id(), id);
  // Once no runtime holds it, the communicator ends and the next runtime makes a new one.
  unload(first);
  Loaded third = load(job, index, 3);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 6);
  EXPECT_NE(third.c0->communicator(0, control).unique_id(), id);
  EXPECT_EQ(third.c0->communicator(0, control).unique_id(),
            third.c1->communicator(1, control).unique_id());
}

// A member that no longer keeps the communicator member 0 offers (aborted after a failure
// there) makes every member make a new one, and both agree on it.
TEST(CommunicatorCache, AMemberLackingTheKeptCommunicatorMakesEveryMemberMakeANewOne) {
  const Dp2Plan dp2;
  const PlanIndex& index = dp2.index;
  const int64_t control = dp2.control;
  Job job;
  Loaded first = load(job, index, 1);
  const cuda::NcclUniqueId id = first.c0->communicator(0, control).unique_id();
  first.c1->abort();  // rank 1's failed run: its process forgets it
  const int64_t before = CommunicatorCache::process().made();
  Loaded second = load(job, index, 2);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 2);
  const cuda::NcclUniqueId made = second.c0->communicator(0, control).unique_id();
  EXPECT_NE(made, id);
  EXPECT_EQ(second.c1->communicator(1, control).unique_id(), made);
  // Rank 0's first runtime still runs on the old one; rank 1's is refused, naming it.
  EXPECT_NO_THROW(first.c0->lease(0));
  try {
    (void)first.c1->lease(0);
    ADD_FAILURE() << "an aborted communicator was leased";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("the GPU communicator of dimension 0 of cuda, [0, 1] was "
                                         "aborted after a failed run of another graph"),
              std::string::npos)
        << e.what();
  }
  // A third runtime reuses the new one.
  Loaded third = load(job, index, 3);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 2);
  EXPECT_EQ(third.c1->communicator(1, control).unique_id(), made);
}

// A member running the collectives another way makes member 0 refuse the load after offering
// its kept communicator; a member that answered and waits for the verdict hears of the refusal,
// naming member 0, instead of waiting out its own timeout.
TEST(CommunicatorCache, MembersWaitingForAVerdictHearOfARefusal) {
  const proto::PlanProto plan = compiler::compile_graph(
      testing::build_mlp(layout_on_cuda("dp3_uneven"), OptimizerConfig::Kind::kSgd));
  const PlanIndex index{plan, PlanIndexOptions{.cpu_kernels = true}};
  auto base = std::make_shared<comm::InProcessTransport>();
  std::vector<std::shared_ptr<TransportSessions>> ranks;
  for (int64_t r = 0; r < 3; ++r) {
    ranks.push_back(std::make_shared<TransportSessions>(base, std::vector<int64_t>{r}));
  }
  // Each rank's communicators of session `session` with `backends[rank]`, loaded at once; the
  // error of each rank that failed, and how long each took.
  struct Outcome {
    std::shared_ptr<comm::Transport> transport;
    std::unique_ptr<DeviceCollectives> collectives;
    std::string error;
    double seconds = 0;
  };
  auto load3 = [&](uint32_t session, std::vector<DeviceCollectiveBackend> backends,
                   double timeout_s) {
    std::vector<Outcome> out(3);
    std::vector<std::future<void>> loads;
    for (int64_t r = 0; r < 3; ++r) {
      out[r].transport = ranks[r]->open(session);
      loads.push_back(std::async(std::launch::async, [&, r] {
        const auto start = std::chrono::steady_clock::now();
        try {
          out[r].collectives =
              std::make_unique<DeviceCollectives>(*out[r].transport, index, std::vector<int64_t>{r},
                                                  std::map<int64_t, int>{}, backends[r], timeout_s);
        } catch (const Error& e) {
          out[r].error = e.what();
        }
        out[r].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }));
    }
    for (auto& l : loads) l.get();
    return out;
  };
  const std::vector<Outcome> first = load3(1, {kSimulated, kSimulated, kSimulated}, 30);
  for (const Outcome& o : first) ASSERT_EQ(o.error, "");
  const int64_t before = CommunicatorCache::process().made();
  const std::vector<Outcome> second =
      load3(2, {kSimulated, DeviceCollectiveBackend::kHost, kSimulated}, 30);
  EXPECT_NE(second[0].error.find("rank 1 runs the collectives of"), std::string::npos)
      << second[0].error;
  EXPECT_NE(second[1].error.find("every member must run them one way"), std::string::npos)
      << second[1].error;
  EXPECT_NE(second[2].error.find("member 0 (rank 0) of"), std::string::npos) << second[2].error;
  EXPECT_NE(second[2].error.find("refused to make it"), std::string::npos) << second[2].error;
  EXPECT_LT(second[2].seconds, 10) << "rank 2 waited out its timeout";
  EXPECT_EQ(CommunicatorCache::process().made(), before) << "a refused load made none";
}

// Note [Communicators kept per process], "One run at a time".
TEST(CommunicatorCache, RunsSharingACommunicatorTakeTurns) {
  const Dp2Plan dp2;
  const PlanIndex& index = dp2.index;
  Job job;
  Loaded a = load(job, index, 1);
  Loaded b = load(job, index, 2);
  std::future<void> waiting;
  {
    DeviceCollectives::Lease held = a.c0->lease(0);
    waiting = std::async(std::launch::async, [&] { (void)b.c0->lease(0); });
    EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
        << "a second run started while the first held the communicator";
    // Another process's runtime holds its own.
    EXPECT_NO_THROW(b.c1->lease(0));
  }
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

// A refused run, which holds no lease, aborts its communicators only once no other run holds
// them (NCCL allows no call beside an abort).
TEST(CommunicatorCache, ARefusedRunAbortsSharedCommunicatorsOnlyWhenFree) {
  const Dp2Plan dp2;
  Job job;
  Loaded a = load(job, dp2.index, 1);
  Loaded b = load(job, dp2.index, 2);
  std::future<void> aborting;
  {
    DeviceCollectives::Lease running = a.c0->lease(0);
    aborting = std::async(std::launch::async, [&] { b.c0->abort_when_free(); });
    EXPECT_EQ(aborting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
        << "aborted under a run";
  }
  EXPECT_EQ(aborting.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_THROW((void)a.c0->lease(1), Error) << "the shared communicator is aborted";
}

// A collective starts only in the run of its own iteration, holding its communicator: an act
// fed early by another process (iteration i + 1 before this process's run i + 1) waits, as one
// of another runtime does.
TEST(CommunicatorCache, ACollectiveStartsOnlyInTheRunOfItsIteration) {
  const Dp2Plan dp2;
  const PlanIndex& index = dp2.index;
  const int64_t control = dp2.control;
  Job job;
  Loaded a = load(job, index, 1);
  Loaded b = load(job, index, 2);
  const DeviceCommunicator& mine = a.c0->communicator(0, control);
  const DeviceCommunicator& theirs = b.c0->communicator(0, control);
  EXPECT_FALSE(mine.may_start(0)) << "between runs";
  {
    DeviceCollectives::Lease run = a.c0->lease(4);
    EXPECT_TRUE(mine.may_start(4));
    EXPECT_FALSE(mine.may_start(5)) << "the next iteration, before its run";
    EXPECT_FALSE(theirs.may_start(4)) << "another runtime's";
    EXPECT_FALSE(a.c1->communicator(1, control).may_start(4)) << "another process's, not run";
  }
  EXPECT_FALSE(mine.may_start(4)) << "after the run";
  DeviceCollectives::Lease next = b.c0->lease(0);
  EXPECT_TRUE(theirs.may_start(0));
  EXPECT_FALSE(mine.may_start(0));
}

// Two runtimes (two graphs) of one process over one network train on simulated GPUs through one
// communicator, their runs interleaved, and give each its own correct result.
TEST(CommunicatorCache, TwoRuntimesOfAProcessRunOnOneCommunicator) {
  const proto::PlanProto plan = dp2_on_cuda();
  auto base = std::make_shared<comm::InProcessTransport>();
  auto sessions = std::make_shared<TransportSessions>(base, std::vector<int64_t>{0, 1});
  auto runtime = [&](uint32_t session) {
    RuntimeOptions options;
    options.simulate_cuda = true;
    options.watchdog_seconds = 60;
    options.transport = sessions->open(session);
    return std::make_unique<Runtime>(plan, options);
  };
  const int64_t before = CommunicatorCache::process().made();
  std::unique_ptr<Runtime> a = runtime(1);
  std::unique_ptr<Runtime> b = runtime(2);
  EXPECT_EQ(CommunicatorCache::process().made(), before + 1) << "one process hosting both ranks";
  const auto kind = OptimizerConfig::Kind::kSgd;
  const testing::TrainingRun reference = testing::train_mlp(testing::mlp_layouts()[0], kind, 2);
  a->initialize_variables();
  b->initialize_variables();
  const testing::MlpLayout layout = dp2_layout_on_cuda();
  for (int step = 1; step <= 2; ++step) {
    const std::map<std::string, Tensor> feed = testing::mlp_feed(layout, kind, step);
    const double loss_a = testing::values_of(a->run(feed).at("loss/out0"))[0];
    const double loss_b = testing::values_of(b->run(feed).at("loss/out0"))[0];
    EXPECT_NEAR(loss_a, reference.losses[step - 1], 1e-5) << step;
    EXPECT_EQ(loss_a, loss_b) << step;
  }
}

}  // namespace
}  // namespace ofl::actor
