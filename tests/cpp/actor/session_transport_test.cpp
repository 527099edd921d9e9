// TransportSessions: several runtimes of one process over one transport, each rank's part of a
// job run by its own runtime (as each process of a job does), fed and fetched by pieces.

#include "actor/session_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "actor/message.h"
#include "actor/runtime.h"
#include "comm/in_process_transport.h"
#include "compiler/compile.h"
#include "compiler/graph_tracer.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/ops/embedding.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using testing::expect_error;
using testing::make_tensor;
using testing::values_of;

comm::MessageBytes message_for(int64_t dst_rank, int64_t dst_actor) {
  return to_bytes(ActorMessage::register_ack({1, 1}, {dst_actor, dst_rank}, 7, 0));
}

// Two "processes" (one per rank) over one in-process transport.
struct TwoProcesses {
  std::shared_ptr<comm::InProcessTransport> base = std::make_shared<comm::InProcessTransport>();
  std::shared_ptr<TransportSessions> rank0 =
      std::make_shared<TransportSessions>(base, std::vector<int64_t>{0});
  std::shared_ptr<TransportSessions> rank1 =
      std::make_shared<TransportSessions>(base, std::vector<int64_t>{1});
};

TEST(TransportSessions, KeepsEarlyMessagesAndDropsLateOnes) {
  TwoProcesses p;
  auto sender = p.rank1->open(5);
  sender->serve_rank(1, [](const comm::MessageBytes&) {});
  sender->send(0, message_for(0, 42));  // session 5 is not open on rank 0 yet
  std::vector<ActorMessage> got;
  {
    auto receiver = p.rank0->open(5);
    receiver->serve_rank(0, [&](const comm::MessageBytes& m) { got.push_back(from_bytes(m)); });
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].dst_actor, 42);
    EXPECT_EQ(got[0].session, 5u);
    sender->send(0, message_for(0, 43));
    ASSERT_EQ(got.size(), 2u);
  }  // session 5 closes on rank 0
  sender->send(0, message_for(0, 44));
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(p.rank0->dropped_messages(), 1u);
  expect_error([&] { p.rank0->open(5); }, ErrorCode::kInvalidArgument, "was used before");
  auto again = p.rank1->open(6);
  expect_error([&] { p.rank1->open(6); }, ErrorCode::kInvalidArgument, "is open already");
}

TEST(TransportSessions, SessionsDoNotSeeEachOthersMessages) {
  TwoProcesses p;
  auto a1 = p.rank1->open(1);
  auto b1 = p.rank1->open(2);
  auto a0 = p.rank0->open(1);
  auto b0 = p.rank0->open(2);
  int a_count = 0, b_count = 0;
  a0->serve_rank(0, [&](const comm::MessageBytes& m) { a_count += from_bytes(m).session == 1; });
  b0->serve_rank(0, [&](const comm::MessageBytes& m) { b_count += from_bytes(m).session == 2; });
  a1->send(0, message_for(0, 1));
  b1->send(0, message_for(0, 1));
  b1->send(0, message_for(0, 1));
  EXPECT_EQ(a_count, 1);
  EXPECT_EQ(b_count, 2);
}

// Job A: x (8,) split over ranks 0 and 1, summed: a partial sum made whole by an all-reduce.
// Job B: y (2, 3) fed as partial sums, made broadcast. Each rank runs both jobs as two runtimes
// over the same transport, alternately, fed and fetched by pieces.
proto::PlanProto job_a(int64_t rank) {
  const Placement both(DeviceType::kCPU, {0, 1});
  compiler::GraphTracer t("a", both);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{8}, DataType::kFloat32, both, {S(0)});
  const Tensor sum = apply_op1(OpRegistry::global().find("reduce_sum"), ReduceParams{}, {x});
  t.fetch(t.to_global(sum, both, {B()}));
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

proto::PlanProto job_b(int64_t rank) {
  const Placement both(DeviceType::kCPU, {0, 1});
  compiler::GraphTracer t("b", both);
  const Tensor y = t.input("y", Shape{2, 3}, DataType::kFloat32, both, {P()});
  t.fetch(t.to_global(y, both, {B()}));
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

// Job C: rows of a table w (4, 2), broadcast, looked up by ids (4,) split over ranks 0 and 1;
// `gather_first`: the ids are all-gathered and fetched, and each rank's lookup of its own ids
// fetched as it is (no rank needs another's lookup), else the looked-up rows are all-gathered.
proto::PlanProto job_c(int64_t rank, bool gather_first) {
  const Placement both(DeviceType::kCPU, {0, 1});
  compiler::GraphTracer t("c", both);
  TracingScope scope(&t);
  const Tensor w = t.input("w", Shape{4, 2}, DataType::kFloat32, both, {B()});
  const Tensor ids = t.input("ids", Shape{4}, DataType::kInt64, both, {S(0)});
  const OpSchema& embedding = OpRegistry::global().find("embedding");
  if (gather_first) {
    t.fetch(t.to_global(ids, both, {B()}));
    t.fetch(apply_op1(embedding, EmbeddingParams{}, {w, ids}));
  } else {
    t.fetch(t.to_global(apply_op1(embedding, EmbeddingParams{}, {w, ids}), both, {B()}));
  }
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

Runtime::Pieces lookup_feed(int64_t rank, double id) {
  return {{"w", {{rank, make_tensor({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2}, DataType::kFloat32)}}},
          {"ids", {{rank, make_tensor({0, id}, Shape{2}, DataType::kInt64)}}}};
}

// Options of a runtime of `rank` in session `session` of `sessions`, with a 30 s watchdog.
RuntimeOptions session_options(int64_t rank, TransportSessions& sessions, uint32_t session) {
  RuntimeOptions options;
  options.watchdog_seconds = 30;
  options.ranks = {rank};
  options.transport = sessions.open(session);
  return options;
}

// Note [Failed runs across processes]: rank 1's lookup fails (an id out of range in its piece).
// Rank 0, waiting for rank 1's rows or done with the iteration first, ends that run or refuses
// its next one at once, naming rank 1, not at its watchdog (30 s here); neither runtime runs
// again.
TEST(TransportSessions, ARunThatFailsOnOneRankEndsItsPeersRunsAtOnce) {
  for (bool gather_first : {false, true}) {
    SCOPED_TRACE(gather_first ? "rank 0 finishes first" : "rank 0 waits for rank 1");
    TwoProcesses p;
    RuntimeOptions options;
    options.watchdog_seconds = 30;
    options.ranks = {1};
    options.transport = p.rank1->open(1);
    Runtime c1(job_c(1, gather_first), options);
    options.ranks = {0};
    options.transport = p.rank0->open(1);
    Runtime c0(job_c(0, gather_first), options);
    const auto start = std::chrono::steady_clock::now();
    std::thread one([&] {
      c1.run_local(lookup_feed(1, 3));  // a good iteration first
      expect_error([&] { c1.run_local(lookup_feed(1, 9)); }, ErrorCode::kOutOfRange,
                   "every index must be in [0, num_embeddings)");
      EXPECT_FALSE(c1.usable());
    });
    c0.run_local(lookup_feed(0, 1));
    const std::string refused = "rank 1's run of 'c' failed in iteration 1 (OutOfRange";
    if (gather_first) {
      // Rank 0's iteration 1 needs nothing of rank 1's failed lookup: it may finish; its next
      // one is refused.
      bool finished = true;
      try {
        c0.run_local(lookup_feed(0, 1));
      } catch (const Error& e) {  // the notice came while it ran
        finished = false;
        EXPECT_NE(std::string(e.what()).find(refused), std::string::npos) << e.what();
      }
      one.join();
      if (finished) {
        expect_error([&] { c0.run_local(lookup_feed(0, 1)); }, ErrorCode::kUnavailable, refused);
      }
    } else {
      expect_error([&] { c0.run_local(lookup_feed(0, 1)); }, ErrorCode::kUnavailable, refused);
      one.join();
    }
    EXPECT_FALSE(c0.usable());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
    // Their program positions stayed in step (Note [Program positions]: a run refused after
    // the failed iteration takes none, one started before the notice is taken back): a later
    // job runs on both.
    Runtime b1(job_b(1), session_options(1, *p.rank1, 2));
    Runtime b0(job_b(0), session_options(0, *p.rank0, 2));
    const auto y = [](int64_t rank) -> Runtime::Pieces {
      return {{"y", {{rank, make_tensor({1, 1, 1, 1, 1, 1}, Shape{2, 3}, DataType::kFloat32)}}}};
    };
    std::thread b([&] { b1.run_local(y(1)); });
    EXPECT_EQ(values_of(b0.run_local(y(0)).begin()->second.at(0)),
              (std::vector<double>{2, 2, 2, 2, 2, 2}));
    b.join();
  }
}

// Job P, a pipeline over ranks 0 -> 1 -> 2 and back: x on rank 0, relu on rank 1, on rank 2
// the rows of w looked up by ids added to it, the sum fetched on rank 0 through rank 1 (or on
// rank 2: `fetch_on_rank_2`). Rank 0 exchanges data with rank 1 only.
proto::PlanProto job_p(int64_t rank, bool fetch_on_rank_2 = false) {
  const Placement r0(DeviceType::kCPU, {0}), r1(DeviceType::kCPU, {1}), r2(DeviceType::kCPU, {2});
  compiler::GraphTracer t("p", r0);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{2}, DataType::kFloat32, r0, {B()});
  const Tensor w = t.input("w", Shape{4, 2}, DataType::kFloat32, r2, {B()});
  const Tensor ids = t.input("ids", Shape{1}, DataType::kInt64, r2, {B()});
  const Tensor h =
      apply_op1(OpRegistry::global().find("relu"), NoParams{}, {t.to_global(x, r1, {B()})});
  const Tensor rows =
      apply_op1(OpRegistry::global().find("embedding"), EmbeddingParams{}, {w, ids});
  const Tensor sum =
      apply_op1(OpRegistry::global().find("add"), NoParams{}, {t.to_global(h, r2, {B()}), rows});
  if (fetch_on_rank_2) {
    t.fetch(sum);
  } else {
    t.fetch(t.to_global(t.to_global(sum, r1, {B()}), r0, {B()}));
  }
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

// Three processes of one rank each over one in-process network, each running its rank's plan
// (`plan_of`) in session 1, with a 30 s watchdog.
struct ThreeProcesses {
  explicit ThreeProcesses(const std::function<proto::PlanProto(int64_t)>& plan_of) {
    for (int64_t r = 0; r < 3; ++r) {
      sessions.push_back(std::make_shared<TransportSessions>(base, std::vector<int64_t>{r}));
      RuntimeOptions options;
      options.watchdog_seconds = 30;
      options.ranks = {r};
      options.transport = sessions[r]->open(1);
      runtimes.push_back(std::make_unique<Runtime>(plan_of(r), options));
    }
  }
  std::shared_ptr<comm::InProcessTransport> base = std::make_shared<comm::InProcessTransport>();
  std::vector<std::shared_ptr<TransportSessions>> sessions;
  std::vector<std::unique_ptr<Runtime>> runtimes;  // last: they go first
};

// Note [Failed runs across processes], passed on: rank 2's lookup fails; rank 1 ends or refuses
// its run and tells rank 0, which never exchanges data with rank 2, so rank 0's next run ends
// at once naming rank 2 instead of at its watchdog (30 s here).
TEST(TransportSessions, AFailedRunIsPassedOnToRanksTwoHopsAway) {
  ThreeProcesses p([](int64_t r) { return job_p(r); });
  std::vector<std::unique_ptr<Runtime>>& runtimes = p.runtimes;
  auto feed = [](int64_t rank, double id) -> Runtime::Pieces {
    if (rank == 0) return {{"x", {{0, make_tensor({1, -1}, Shape{2}, DataType::kFloat32)}}}};
    if (rank == 1) return {};
    return {{"w", {{2, make_tensor({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2}, DataType::kFloat32)}}},
            {"ids", {{2, make_tensor({id}, Shape{1}, DataType::kInt64)}}}};
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors(3);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      try {
        runtimes[r]->run_local(feed(r, 9));  // rank 2's id is out of range
        runtimes[r]->run_local(feed(r, 1));
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& thread : ranks) thread.join();
  EXPECT_NE(errors[2].find("[embedding] every index must be in [0, num_embeddings)"),
            std::string::npos)
      << errors[2];
  for (int64_t r : {0, 1}) {
    EXPECT_NE(errors[r].find("rank 2's run of 'p' failed in iteration 0 (OutOfRange"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_FALSE(runtimes[r]->usable()) << r;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

// Rank 2's plan orders its INPUT w after a task fed by rank 1 (a control input): when rank 1's
// data comes before rank 2's run starts, the INPUT still waits for that run's feed (it read a
// feed that was not there, and crashed, before it waited for the tick too).
TEST(TransportSessions, AnInputOrderedAfterAnotherRanksDataWaitsForItsRun) {
  const proto::PlanProto plan2 = job_p(2, /*fetch_on_rank_2=*/true);
  bool ordered = false;
  for (const auto& task : plan2.ranks(0).tasks()) {
    ordered = ordered || (task.kind() == proto::TaskProto::INPUT && task.control_inputs_size() > 0);
  }
  EXPECT_TRUE(ordered) << "the plan no longer orders an INPUT after other tasks: find another";
  ThreeProcesses p([&](int64_t r) { return r == 2 ? plan2 : job_p(r, true); });
  std::vector<std::unique_ptr<Runtime>>& runtimes = p.runtimes;
  std::thread early([&] {
    runtimes[0]->run_local({{"x", {{0, make_tensor({1, -1}, Shape{2}, DataType::kFloat32)}}}});
    runtimes[1]->run_local({});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1's data is there first
  const auto out = runtimes[2]->run_local(
      {{"w", {{2, make_tensor({0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2}, DataType::kFloat32)}}},
       {"ids", {{2, make_tensor({3}, Shape{1}, DataType::kInt64)}}}});
  early.join();
  EXPECT_EQ(values_of(out.begin()->second.at(2)), (std::vector<double>{7, 7}));  // [6, 7] + [1, 0]
}

TEST(TransportSessions, RuntimesOfTwoJobsShareOneTransport) {
  TwoProcesses p;
  std::vector<double> a_results[2], b_results[2];
  auto process = [&](int64_t rank, std::shared_ptr<TransportSessions> sessions) {
    RuntimeOptions options;
    options.ranks = {rank};
    options.transport = sessions->open(1);
    Runtime a(job_a(rank), options);
    options.transport = sessions->open(2);
    Runtime b(job_b(rank), options);
    const double base = rank == 0 ? 1 : 5;  // rank 0 holds 1..4, rank 1 holds 5..8
    for (int round = 0; round < 2; ++round) {
      Runtime::Pieces x = {{"x",
                            {{rank, make_tensor({base, base + 1, base + 2, base + 3}, Shape{4},
                                                DataType::kFloat32)}}}};
      const auto a_out = a.run_local(x);
      const Tensor& a_piece = a_out.begin()->second.at(rank);
      a_results[rank].push_back(values_of(a_piece)[0]);
      Runtime::Pieces y = {
          {"y",
           {{rank, make_tensor({1, 2, 3, 4, 5, double(rank)}, Shape{2, 3}, DataType::kFloat32)}}}};
      const auto b_out = b.run_local(y);
      for (double v : values_of(b_out.begin()->second.at(rank))) b_results[rank].push_back(v);
    }
    a.shutdown();
    b.shutdown();
  };
  std::thread one(process, 1, p.rank1);
  process(0, p.rank0);
  one.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a_results[r], (std::vector<double>{36, 36})) << "rank " << r;
    EXPECT_EQ(b_results[r], (std::vector<double>{2, 4, 6, 8, 10, 1, 2, 4, 6, 8, 10, 1}))
        << "rank " << r;
  }
}

Runtime::Pieces pieces_of_x(int64_t rank) {
  const double base = rank == 0 ? 1 : 5;
  return {
      {"x",
       {{rank, make_tensor({base, base + 1, base + 2, base + 3}, Shape{4}, DataType::kFloat32)}}}};
}

// Note [Departures]: rank 1's program ends after one iteration of job a. Rank 0's next
// iteration of a cannot finish: it is refused at once, naming rank 1 and where it stopped; a
// runtime of a job rank 1 never ran (b) counts it as 0 iterations, even when it opens after the
// departure; the watchdog (30 s here) is never what ends them.
TEST(TransportSessions, ARunNeedingARankThatDepartedBeforeItStartsIsRefusedAtOnce) {
  TwoProcesses p;
  RuntimeOptions options;
  options.watchdog_seconds = 30;
  options.ranks = {1};
  options.transport = p.rank1->open(1);
  auto a1 = std::make_unique<Runtime>(job_a(1), options);
  options.transport = p.rank1->open(2);
  auto b1 = std::make_unique<Runtime>(job_b(1), options);  // loaded, never run
  std::thread one([&] {
    a1->run_local(pieces_of_x(1));
    p.rank1->announce_departure({{1, a1->iterations()}}, {0, 1});
  });
  options.ranks = {0};
  options.transport = p.rank0->open(1);
  auto a0 = std::make_unique<Runtime>(job_a(0), options);
  EXPECT_EQ(values_of(a0->run_local(pieces_of_x(0)).begin()->second.at(0))[0], 36);
  one.join();
  const auto start = std::chrono::steady_clock::now();
  expect_error([&] { a0->run_local(pieces_of_x(0)); }, ErrorCode::kUnavailable,
               "rank 1 ended its program after 1 iteration of 'a', while rank 0 needs it in "
               "iteration 2");
  options.transport = p.rank0->open(2);
  auto b0 = std::make_unique<Runtime>(job_b(0), options);
  expect_error(
      [&] {
        b0->run_local({{"y", {{0, Tensor::zeros(Shape{2, 3}, DataType::kFloat32)}}}});
      },
      ErrorCode::kUnavailable, "rank 1 ended its program after 0 iterations of 'b'");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
  std::thread end_one([&] {  // both ends of each job end together, as at a job's end
    a1.reset();
    b1.reset();
  });
  a0.reset();
  b0.reset();
  end_one.join();
}

TEST(TransportSessions, ARunWaitingForARankThatDepartsEndsAtOnceListingWhatItWaitsFor) {
  TwoProcesses p;
  RuntimeOptions options;
  options.watchdog_seconds = 30;
  options.ranks = {0};
  options.transport = p.rank0->open(1);
  Runtime a0(job_a(0), options);
  std::thread one([&] {  // rank 1 never runs job a: its program ends while rank 0 waits
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    p.rank1->announce_departure({}, {0, 1});
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    a0.run_local(pieces_of_x(0));
    ADD_FAILURE() << "the run finished without rank 1";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(what.find("rank 1 ended its program after 0 iterations of 'a', while rank 0 needs "
                        "it in iteration 1"),
              std::string::npos)
        << what;
    // The rank that left comes first, the actors after.
    EXPECT_GT(what.find("\nWaiting actors:"), what.find("rank 1 ended"));
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
  one.join();
}

// Runs `process` for rank 1 on a thread and rank 0 on this one; both end within 10 s (the
// watchdog is 30 s).
void run_ranks(TwoProcesses& p,
               const std::function<void(int64_t, std::shared_ptr<TransportSessions>)>& process) {
  const auto start = std::chrono::steady_clock::now();
  std::thread one(process, 1, p.rank1);
  process(0, p.rank0);
  one.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

// Note [Program positions]: rank 0 runs job b where rank 1 runs job a, their second run
// exchanging data. Both runs end at once (the watchdog is 30 s), naming both ranks and the
// jobs; every later run with the other rank is refused on both.
TEST(TransportSessions, RanksRunningDifferentJobsAtOnePositionEndAtOnce) {
  TwoProcesses p;
  std::string errors[2];
  std::string refusals[2];
  auto process = [&](int64_t rank, std::shared_ptr<TransportSessions> sessions) {
    Runtime a(job_a(rank), session_options(rank, *sessions, 1));
    Runtime b(job_b(rank), session_options(rank, *sessions, 2));
    const Runtime::Pieces y = {{"y", {{rank, Tensor::zeros(Shape{2, 3}, DataType::kFloat32)}}}};
    a.run_local(pieces_of_x(rank));
    try {
      rank == 0 ? b.run_local(y) : a.run_local(pieces_of_x(rank));
      ADD_FAILURE() << "rank " << rank << "'s second run finished";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
      errors[rank] = e.what();
    }
    try {  // the runtime that did not fail, refused
      rank == 0 ? a.run_local(pieces_of_x(rank)) : b.run_local(y);
      ADD_FAILURE() << "rank " << rank << "'s third run was not refused";
    } catch (const Error& e) {
      refusals[rank] = e.what();
    }
  };
  run_ranks(p, process);
  EXPECT_NE(errors[0].find("ranks 0 and 1 run different things as their run 2 exchanging data "
                           "with each other: rank 0 runs 'b', rank 1 runs 'a'."),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("ranks 1 and 0 run different things as their run 2 exchanging data "
                           "with each other: rank 1 runs 'a', rank 0 runs 'b'."),
            std::string::npos)
      << errors[1];
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(
        refusals[r].find(str_cat("refused: '", r == 0 ? "a" : "b", "' exchanges data with rank ",
                                 1 - r, ", and an earlier run found: ranks ", r, " and ", 1 - r,
                                 " run different things as their run 2")),
        std::string::npos)
        << "rank " << r << ": " << refusals[r];
  }
}

// Job L (or M: `op` "mul"): x (4,) split over ranks 0 and 1, added to (multiplied by) itself
// and fetched as it is: each rank's run needs nothing of the other's.
proto::PlanProto job_l(int64_t rank, const std::string& op = "add") {
  const Placement both(DeviceType::kCPU, {0, 1});
  compiler::GraphTracer t(op == "add" ? "l" : "m", both);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{4}, DataType::kFloat32, both, {S(0)});
  t.fetch(apply_op1(OpRegistry::global().find(op), NoParams{}, {x, x}));
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

// Job S: a job of rank `rank` alone.
proto::PlanProto job_s(int64_t rank) {
  const Placement one(DeviceType::kCPU, {rank});
  compiler::GraphTracer t("s", one);
  t.fetch(t.input("x", Shape{2}, DataType::kFloat32, one, {B()}));
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

// Runs that exchange no data take no position (Note [Program positions]): rank 0 logging a
// value (its own L) between two runs of a, the ranks running different such jobs (L on rank
// 0, M on rank 1), or one-rank jobs as often as each likes, is no difference.
TEST(TransportSessions, RunsThatExchangeNoDataMayDifferBetweenRanks) {
  TwoProcesses p;
  std::vector<double> results[2];
  run_ranks(p, [&](int64_t rank, std::shared_ptr<TransportSessions> sessions) {
    Runtime a(job_a(rank), session_options(rank, *sessions, 1));
    Runtime local(job_l(rank, rank == 0 ? "add" : "mul"), session_options(rank, *sessions, 3));
    Runtime solo(job_s(rank), session_options(rank, *sessions, 10 + rank));
    const Runtime::Pieces x = {{"x", {{rank, make_tensor({1, 2}, Shape{2}, DataType::kFloat32)}}}};
    for (int round = 0; round < 3; ++round) {
      if (rank == 0 || round == 1) local.run_local(x);
      for (int k = 0; k < (rank == 0 ? round : 2 - round); ++k) solo.run_local(x);
      results[rank].push_back(
          values_of(a.run_local(pieces_of_x(rank)).begin()->second.at(rank))[0]);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(results[r], (std::vector<double>{36, 36, 36})) << r;
}

// Job F: x (2,) on rank 0, moved to rank 1 and fetched there: rank 0's part sends it with its
// message (Note [Small transfers travel with their message]) and needs nothing of rank 1.
proto::PlanProto job_f(int64_t rank) {
  const Placement r0(DeviceType::kCPU, {0}), r1(DeviceType::kCPU, {1});
  compiler::GraphTracer t("f", r0);
  t.fetch(t.to_global(t.input("x", Shape{2}, DataType::kFloat32, r0, {B()}), r1, {B()}));
  compiler::CompileOptions options;
  options.ranks = {rank};
  return compiler::compile_graph(t.builder().graph(), options);
}

// Rank 0 runs F (alone: it finishes) and then a; rank 1 runs a only. Rank 0's a is its second
// run with rank 1 and rank 1's its first: rank 1's a is refused at its start (rank 0's data for
// that iteration of a may be there already, and it must not pair), and rank 0's ends at once.
TEST(TransportSessions, OneIterationOfAJobStartedAtDifferentPointsIsRefused) {
  TwoProcesses p;
  Runtime a1(job_a(1), session_options(1, *p.rank1, 1));
  Runtime a0(job_a(0), session_options(0, *p.rank0, 1));
  Runtime f0(job_f(0), session_options(0, *p.rank0, 4));
  f0.run_local({{"x", {{0, make_tensor({1, 2}, Shape{2}, DataType::kFloat32)}}}});
  const auto start = std::chrono::steady_clock::now();
  std::thread zero([&] {
    expect_error([&] { a0.run_local(pieces_of_x(0)); }, ErrorCode::kFailedPrecondition,
                 "ranks 0 and 1 run 'a' at different points of their programs: rank 0 as its run "
                 "2 exchanging data with rank 1, rank 1 as its run 1 (the run 1 of it on both). "
                 "Before it, since they last agreed, rank 0 ran 'f' with rank 1.");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0's a waits for rank 1
  expect_error([&] { a1.run_local(pieces_of_x(1)); }, ErrorCode::kFailedPrecondition,
               "ranks 1 and 0 run different things as their run 1 exchanging data with each "
               "other: rank 1 runs 'a', rank 0 runs a graph or op that rank 1 has not loaded");
  zero.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST(TransportSessions, PiecesMustMatchTheRegister) {
  RuntimeOptions options;
  options.ranks = {0};
  const Placement one(DeviceType::kCPU, {0});
  compiler::GraphTracer t("c", one);
  t.fetch(t.input("x", Shape{3}, DataType::kFloat32, one, {S(0)}));
  Runtime runtime(compiler::compile_graph(t.builder().graph()), options);
  expect_error([&] { runtime.run_local({}); }, ErrorCode::kInvalidArgument,
               "run needs the pieces of input 'x'");
  expect_error(
      [&] {
        runtime.run_local({{"x", {{0, make_tensor({1, 2}, Shape{2}, DataType::kFloat32)}}}});
      },
      ErrorCode::kInvalidArgument, "must have shape (3,). However, got (2,)");
  const auto out =
      runtime.run_local({{"x", {{0, make_tensor({1, 2, 3}, Shape{3}, DataType::kFloat32)}}}});
  EXPECT_EQ(values_of(out.at("x").at(0)), (std::vector<double>{1, 2, 3}));
}

}  // namespace
}  // namespace ofl::actor
