// COLLECTIVE tasks in hand-built plans (Note [Collective tasks] in oneflowlike/collective.h):
// the reference executor's results against sums taken in the ring order, and the plan
// contract's proof (Note [Collective order] in oneflowlike/plan_contract.h) refusing plans whose
// members disagree or wait on each other in a cycle.

#include <gtest/gtest.h>

#include <functional>

#include "actor/plan_index.h"
#include "actor/reference_executor.h"
#include "compiler/plan_dump.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/plan_contract.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using Op = proto::CollectiveProto;
using ofl::testing::expect_error_phrases;
using ofl::testing::PlanBuilder;
using ofl::testing::random_tensor;
using ofl::testing::values_of;

// The plan contract and the executors' loading (PlanIndex) refuse `plan` alike.
void expect_refused(const proto::PlanProto& plan, const std::vector<std::string>& phrases) {
  expect_error_phrases([&] { check_plan_contract(plan); }, ErrorCode::kFailedPrecondition, phrases);
  expect_error_phrases([&] { ReferenceExecutor executor(plan); }, ErrorCode::kFailedPrecondition,
                       phrases);
}

// A register of `shape` on `rank` written by a ZEROS task.
int64_t zeros(PlanBuilder& b, int rank, const std::string& name, const Shape& shape,
              DataType dtype = DataType::kFloat32) {
  const int64_t r = b.reg(rank, name, shape, dtype);
  b.task(rank, "zeros_" + name, proto::TaskProto::ZEROS, {}, {r});
  return r;
}

// ---------------------------------------------------------------------------------------------
// Values: member m's input is a random (rows, cols) tensor (or, for a gather, its chunk of one);
// the expected results are computed element by element here, summing in ring_sum_order in
// float, so the reference executor must match them bit for bit.

constexpr int64_t kRows = 7;
constexpr int64_t kCols = 5;

struct Case {
  Op::Op op;
  int n;
  int axis;  // 0, 1 or -1 (flat)
  Op::Algorithm algorithm = Op::RING;
};

std::string case_name(const Case& c) {
  return str_cat(collective_op_name(c.op), " over ", c.n, " ranks, axis ", c.axis, " by ",
                 collective_algorithm_name(c.algorithm));
}

// The chunk (0..n-1) that element (i, j) of the whole (kRows, kCols) tensor falls in, and its
// position inside that chunk's piece (row-major within the piece).
std::pair<int64_t, int64_t> chunk_of(const Case& c, int64_t i, int64_t j) {
  const int64_t along = c.axis == 0 ? i : c.axis == 1 ? j : i * kCols + j;
  const int64_t length = c.axis == 0 ? kRows : c.axis == 1 ? kCols : kRows * kCols;
  for (int64_t k = 0; k < c.n; ++k) {
    const Range r = balanced_range(length, c.n, k);
    if (along < r.begin || along >= r.end) continue;
    const int64_t size = r.end - r.begin;
    if (c.axis == 0) return {k, (i - r.begin) * kCols + j};
    if (c.axis == 1) return {k, i * size + (j - r.begin)};
    return {k, along - r.begin};
  }
  return {-1, -1};
}

// Member m's piece of the whole tensor when it is chunk m (a gather's input).
Shape chunk_shape(const Case& c, int64_t m) {
  if (c.axis == 0) {
    const Range r = balanced_range(kRows, c.n, m);
    return Shape{r.end - r.begin, kCols};
  }
  if (c.axis == 1) {
    const Range r = balanced_range(kCols, c.n, m);
    return Shape{kRows, r.end - r.begin};
  }
  const Range r = balanced_range(kRows * kCols, c.n, m);
  return Shape{r.end - r.begin};
}

// Runs the case's plan (INPUT x<m> on rank m -> COLLECTIVE -> OUTPUT y<m>) on the reference
// executor and checks every member's result.
void run_case(const Case& c) {
  SCOPED_TRACE(case_name(c));
  PlanBuilder b(c.n);
  std::vector<int> members;
  std::vector<int64_t> inputs;
  std::map<std::string, Tensor> feeds;
  std::vector<std::vector<float>> x;  // by member, flat
  for (int m = 0; m < c.n; ++m) {
    const Shape shape = c.op == Op::ALL_GATHER ? chunk_shape(c, m) : Shape{kRows, kCols};
    const Tensor value = random_tensor(shape, DataType::kFloat32, /*seed=*/100 + m);
    members.push_back(m);
    inputs.push_back(b.input(m, str_cat("x", m), shape));
    feeds[str_cat("x", m)] = value;
    std::vector<float> flat;
    for (double v : values_of(value)) flat.push_back(static_cast<float>(v));
    x.push_back(flat);
  }
  b.set_collective_algorithm(c.algorithm);
  const std::vector<int64_t> outputs = b.collective(c.op, members, inputs, c.axis);
  for (int m = 0; m < c.n; ++m) {
    b.output(m, str_cat("y", m), outputs[m], from_proto(b.find(outputs[m])->shape()));
  }
  ASSERT_NO_THROW(check_plan_contract(b.plan()));
  ReferenceExecutor executor(b.plan());
  const std::map<std::string, Tensor> results = executor.run(feeds);

  // expected[m]: member m's output, flat.
  std::vector<std::vector<float>> expected(c.n);
  if (c.op == Op::ALL_GATHER) {
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) {
        const auto [chunk, at] = chunk_of(c, i, j);
        for (int m = 0; m < c.n; ++m) expected[m].push_back(x[chunk][at]);
      }
    }
  } else {
    if (c.op == Op::REDUCE_SCATTER) {
      for (int m = 0; m < c.n; ++m) expected[m].resize(chunk_shape(c, m).numel());
    }
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) {
        const auto [chunk, at] = chunk_of(c, i, j);
        const int64_t e = i * kCols + j;
        float sum = 0;
        if (c.algorithm == Op::RECURSIVE_DOUBLING) {  // the one tree
          std::vector<float> partial;
          for (int m = 0; m < c.n; ++m) partial.push_back(x[m][e]);
          for (const auto& [into, from] : recursive_doubling_adds(c.n)) {
            partial[into] = partial[into] + partial[from];
          }
          sum = partial[0];
        } else {
          const std::vector<int64_t> order = ring_sum_order(chunk, c.n);
          sum = x[order[0]][e];
          for (int k = 1; k < c.n; ++k) sum += x[order[k]][e];
        }
        if (c.op == Op::ALL_REDUCE) {
          for (int m = 0; m < c.n; ++m) expected[m].push_back(sum);
        } else {
          expected[chunk][at] = sum;
        }
      }
    }
  }
  for (int m = 0; m < c.n; ++m) {
    const Tensor& y = results.at(str_cat("y", m));
    std::vector<float> got;
    for (double v : values_of(y)) got.push_back(static_cast<float>(v));
    EXPECT_EQ(got, expected[m]) << "member " << m;
  }
}

TEST(CollectivePlan, AllReduceSumsEveryChunkInRingOrderOnTwoAndThreeRanks) {
  for (int n : {2, 3}) {
    for (int axis : {-1, 0, 1}) run_case(Case{Op::ALL_REDUCE, n, axis});
  }
}

TEST(CollectivePlan, AllReduceByRecursiveDoublingSumsOneTreeOnEveryMember) {
  for (int n : {2, 3, 4, 5, 6, 7, 8}) {
    for (int axis : {-1, 0}) run_case(Case{Op::ALL_REDUCE, n, axis, Op::RECURSIVE_DOUBLING});
  }
}

TEST(CollectivePlan, RecursiveDoublingFoldsTheMembersAboveAPowerOfTwoFirst) {
  // p = 4 for n = 6: members 4 and 5 are added to 0 and 1, then ((0 + 1) + (2 + 3)).
  EXPECT_EQ(recursive_doubling_adds(6),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {1, 5}, {0, 1}, {2, 3}, {0, 2}}));
  EXPECT_EQ(recursive_doubling_adds(2), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  EXPECT_EQ(recursive_doubling_core(7), 4);
  // The compiler's choice: small all-reduces only.
  EXPECT_EQ(collective_algorithm(Op::ALL_REDUCE, kRecursiveDoublingMaxBytes, 4),
            Op::RECURSIVE_DOUBLING);
  EXPECT_EQ(collective_algorithm(Op::ALL_REDUCE, kRecursiveDoublingMaxBytes + 1, 4), Op::RING);
  EXPECT_EQ(collective_algorithm(Op::REDUCE_SCATTER, 64, 4), Op::RING);
  // In float, 1e8 + 1 is 1e8: member 2 joins member 0 first, (1e8 + -1e8) + 1 = 1, where the
  // ring's chunk 0 gives (1 + -1e8) + 1e8 = 0.
  PlanBuilder b(3);
  std::vector<int64_t> inputs;
  for (int m = 0; m < 3; ++m) inputs.push_back(b.input(m, str_cat("x", m), Shape{1}));
  b.set_collective_algorithm(Op::RECURSIVE_DOUBLING);
  const std::vector<int64_t> out = b.collective(Op::ALL_REDUCE, {0, 1, 2}, inputs, -1);
  for (int m = 0; m < 3; ++m) b.output(m, str_cat("y", m), out[m], Shape{1});
  std::map<std::string, Tensor> feeds;
  feeds["x0"] = ofl::testing::make_tensor({1e8}, Shape{1});
  feeds["x1"] = ofl::testing::make_tensor({1}, Shape{1});
  feeds["x2"] = ofl::testing::make_tensor({-1e8}, Shape{1});
  ReferenceExecutor executor(b.plan());
  const auto results = executor.run(feeds);
  for (int m = 0; m < 3; ++m)
    EXPECT_EQ(values_of(results.at(str_cat("y", m))), (std::vector<double>{1}));
}

TEST(CollectivePlan, RecursiveDoublingOnlyForAllReducesAndTheSameOnEveryMember) {
  PlanBuilder b(2);
  std::vector<int64_t> inputs;
  for (int m = 0; m < 2; ++m) inputs.push_back(b.input(m, str_cat("x", m), Shape{4}));
  b.set_collective_algorithm(Op::RECURSIVE_DOUBLING);
  b.collective(Op::REDUCE_SCATTER, {0, 1}, inputs, -1, "grad");
  expect_refused(b.plan(), {"must run by ring, by recursive doubling if it is an all-reduce or by "
                            "a tree if it is a broadcast. However, it is reduce_scatter by "
                            "recursive doubling."});
  PlanBuilder c(2);
  inputs.clear();
  for (int m = 0; m < 2; ++m) inputs.push_back(c.input(m, str_cat("x", m), Shape{4}));
  c.set_collective_algorithm(Op::RECURSIVE_DOUBLING);
  const std::vector<int64_t> mixed = c.collective(Op::ALL_REDUCE, {0, 1}, inputs, -1, "grad");
  c.find_task_of(mixed[1])->mutable_collective()->set_algorithm(Op::RING);
  expect_refused(c.plan(), {"the members of collective 0",
                            "all_reduce float32 x 4 by recursive "
                            "doubling",
                            "all_reduce float32 x 4 (collective 0"});
}

TEST(CollectivePlan, ChunkSizesAreThoseOfTheChunks) {
  for (const Shape& shape : {Shape{7, 5}, Shape{2, 3}, Shape{1, 1}, Shape{0, 4}, Shape{9}}) {
    for (int axis = -1; axis < shape.ndim(); ++axis) {
      for (int64_t n : {1, 2, 3, 8}) {
        const auto chunks = collective_chunks(shape, axis, n);
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_EQ(collective_chunk_numel(shape, axis, n, j),
                    axis < 0 ? chunks[j][0].size() : region_shape(chunks[j]).numel())
              << shape.to_string() << " axis " << axis << " n " << n << " chunk " << j;
        }
      }
    }
  }
}

TEST(CollectivePlan, ReduceScatterGivesEachMemberItsChunkOfTheRingSum) {
  for (int n : {2, 3}) {
    for (int axis : {-1, 0, 1}) run_case(Case{Op::REDUCE_SCATTER, n, axis});
  }
}

TEST(CollectivePlan, AllGatherPlacesMemberJsInputAtChunkJ) {
  for (int n : {2, 3}) {
    for (int axis : {-1, 0, 1}) run_case(Case{Op::ALL_GATHER, n, axis});
  }
}

TEST(CollectivePlan, SumsAreTakenInTheRingOrderNotTheMemberOrder) {
  // One element per chunk; in float, 1e8 + 1 is 1e8, so the order of a sum shows in its value.
  PlanBuilder b(3);
  std::vector<int64_t> inputs;
  for (int m = 0; m < 3; ++m) inputs.push_back(b.input(m, str_cat("x", m), Shape{3}));
  const std::vector<int64_t> out = b.collective(Op::ALL_REDUCE, {0, 1, 2}, inputs, /*axis=*/-1);
  b.output(0, "y", out[0], Shape{3});
  ReferenceExecutor executor(b.plan());
  std::map<std::string, Tensor> feeds;
  feeds["x0"] = ofl::testing::make_tensor({1e8, -1e8, 1e8}, Shape{3});
  feeds["x1"] = ofl::testing::make_tensor({-1e8, 1, 1}, Shape{3});
  feeds["x2"] = ofl::testing::make_tensor({1, 1e8, -1e8}, Shape{3});
  // Chunk c is summed (x[c+1] + x[c+2]) + x[c]:
  //  c = 0: (-1e8 + 1) + 1e8 = 0   (member order: (1e8 + -1e8) + 1 = 1)
  //  c = 1: (1e8 + -1e8) + 1 = 1   (member order: (-1e8 + 1) + 1e8 = 0)
  //  c = 2: (1e8 + 1) + -1e8 = 0
  EXPECT_EQ(values_of(executor.run(feeds).at("y")), (std::vector<double>{0, 1, 0}));
}

TEST(CollectivePlan, PlanIndexLinksMembersAndWaitsForEveryMembersInput) {
  PlanBuilder b(3);
  std::vector<int64_t> inputs;  // by member index
  for (int rank : {2, 0, 1}) inputs.push_back(zeros(b, rank, str_cat("x", rank), Shape{6}));
  const std::vector<int64_t> out = b.collective(Op::ALL_REDUCE, {2, 0, 1}, inputs, -1, "grad");
  const PlanIndex index(b.plan());
  std::vector<int> tasks;  // by member index
  for (int64_t r : out) tasks.push_back(index.task_index(b.find(r)->producer()));
  for (int m = 0; m < 3; ++m) {
    const PlanIndex::TaskInfo& t = index.task(tasks[m]);
    EXPECT_EQ(t.member_index, m);
    EXPECT_EQ(t.peers, tasks);
    int collective_edges = 0;
    for (const PlanIndex::Edge& e : index.predecessors()[tasks[m]]) {
      if (e.kind != PlanIndex::EdgeKind::kCollective) continue;
      ++collective_edges;
      EXPECT_NE(e.reg, index.register_index(inputs[m]));
      EXPECT_NE(
          index.describe_edge(tasks[m], e).find(" runs collective 0 with task 'all_reduce_0@"),
          std::string::npos)
          << index.describe_edge(tasks[m], e);
    }
    EXPECT_EQ(collective_edges, 2);
  }
  EXPECT_NE(index.describe_task(tasks[0]).find("rank 2, COLLECTIVE all_reduce)"), std::string::npos)
      << index.describe_task(tasks[0]);
}

TEST(CollectivePlan, APartialPlanIsCheckedAmongTheMembersPresent) {
  PlanBuilder b(3);
  std::vector<int64_t> inputs;
  for (int m = 0; m < 3; ++m) inputs.push_back(zeros(b, m, str_cat("x", m), Shape{6}));
  const std::vector<int64_t> out = b.collective(Op::ALL_REDUCE, {0, 1, 2}, inputs);
  proto::PlanProto plan = b.plan();
  plan.mutable_ranks()->RemoveLast();  // rank 2 is compiled elsewhere (Note [Partial plans])
  EXPECT_NO_THROW(check_plan_contract(plan));
  const PlanIndex index(plan);
  const int t0 = index.task_index(b.find(out[0])->producer());
  const int t1 = index.task_index(b.find(out[1])->producer());
  EXPECT_EQ(index.task(t0).peers, (std::vector<int>{t0, t1, -1}));
  expect_error_phrases([&] { ReferenceExecutor executor(plan); }, ErrorCode::kInvalidArgument,
                       {"runs whole plans", "rank 2 is not"});

  // The members present must still agree: rank 1 runs another collective first.
  PlanBuilder c(3);
  std::vector<int64_t> more;
  for (int m = 0; m < 3; ++m) more.push_back(zeros(c, m, str_cat("x", m), Shape{6}));
  const std::vector<int64_t> first = c.collective(Op::ALL_REDUCE, {0, 1, 2}, more, -1, "a");
  const std::vector<int64_t> second = c.collective(Op::ALL_REDUCE, {0, 1, 2}, first, -1, "b");
  c.find_task_of(first[1])->mutable_collective()->set_sequence(1);
  c.find_task_of(second[1])->mutable_collective()->set_sequence(0);
  plan = c.plan();
  plan.mutable_ranks()->RemoveLast();
  expect_error_phrases(
      [&] { check_plan_contract(plan); }, ErrorCode::kFailedPrecondition,
      {"(ranks [0, 1, 2])", "at position 0 rank 0 runs all_reduce float32 x 6 (collective 0",
       "rank 1 runs all_reduce float32 x 6 (collective 1"});
}

// ---------------------------------------------------------------------------------------------
// Seeded wrong plans.

TEST(CollectivePlan, SwappedCollectivesAreRefusedNamingBothRanksOps) {
  // Rank 0 runs A then B on the communicator, rank 1 B then A.
  PlanBuilder b(2);
  const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4}), zeros(b, 1, "x1", Shape{4})};
  const std::vector<int64_t> a = b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "grad_a", "dp");
  const std::vector<int64_t> g =
      b.collective(Op::ALL_GATHER, {0, 1}, x, /*axis=*/0, "gather_b", "dp");
  b.find_task_of(a[1])->mutable_collective()->set_sequence(1);
  b.find_task_of(g[1])->mutable_collective()->set_sequence(0);
  expect_refused(b.plan(),
                 {"collectives must run in the same order on every member of communicator 'dp' "
                  "(ranks [0, 1]). However, at position 0 rank 0 runs all_reduce float32 x 4 "
                  "(collective 0, task 'all_reduce_0@0' from 'grad_a') and rank 1 runs "
                  "all_gather float32 x 8 along axis 0 (collective 1, task 'all_gather_1@1' from "
                  "'gather_b')."});
}

TEST(CollectivePlan, ARefusedOrderNamesTheSourceLinesOfBothOps) {
  PlanBuilder b(2);
  const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4}), zeros(b, 1, "x1", Shape{4})};
  const std::vector<int64_t> a = b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "grad_a", "dp");
  const std::vector<int64_t> c = b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "grad_c", "dp");
  for (int64_t r : a) b.find_task_of(r)->set_location("model.py:12");
  for (int64_t r : c) b.find_task_of(r)->set_location("model.py:30");
  b.find_task_of(a[1])->mutable_collective()->set_sequence(1);
  b.find_task_of(c[1])->mutable_collective()->set_sequence(0);
  expect_refused(b.plan(), {"rank 0 runs all_reduce float32 x 4 (collective 0, task "
                            "'all_reduce_0@0' from 'grad_a' at model.py:12) and rank 1 runs "
                            "all_reduce float32 x 4 (collective 1, task 'all_reduce_1@1' from "
                            "'grad_c' at model.py:30)."});
}

TEST(CollectivePlan, ARankDependentBranchIsRefused) {
  // Rank 1 copies where rank 0 runs the second all-reduce (a branch taken on rank 0 only) ...
  auto plan_with_branch = [](int copying_rank) {
    PlanBuilder b(2);
    const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4}), zeros(b, 1, "x1", Shape{4})};
    const std::vector<int64_t> a = b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "grad_a", "dp");
    const std::vector<int64_t> c = b.collective(Op::ALL_REDUCE, {0, 1}, a, -1, "grad_b", "dp");
    b.find_task_of(c[copying_rank])->set_kind(proto::TaskProto::COPY);
    return b.plan();
  };
  expect_refused(plan_with_branch(1),
                 {"communicator 'dp' (ranks [0, 1])",
                  "at position 1 rank 0 runs all_reduce float32 x 4 (collective 1, task "
                  "'all_reduce_1@0' from 'grad_b') and rank 1 runs nothing (it runs 1 collective "
                  "on this communicator)."});
  // ... and the other way round: rank 1 runs one more than rank 0.
  expect_refused(plan_with_branch(0),
                 {"communicator 'dp' (ranks [0, 1])",
                  "at position 1 rank 0 runs nothing (it runs 1 collective on this communicator) "
                  "and rank 1 runs all_reduce float32 x 4 (collective 1, task 'all_reduce_1@1' "
                  "from 'grad_b')."});
}

TEST(CollectivePlan, MismatchedDtypeOrCountIsRefusedNamingBothRanksOps) {
  for (bool dtype : {true, false}) {
    PlanBuilder b(2);
    const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4}),
                                    zeros(b, 1, "x1", dtype ? Shape{4} : Shape{6},
                                          dtype ? DataType::kFloat16 : DataType::kFloat32)};
    b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "grad_w", "dp");
    expect_refused(b.plan(), {"the members of collective 0 on communicator 'dp' (ranks [0, 1]) "
                              "must run one op over one dtype and element count",
                              "rank 0 runs all_reduce float32 x 4 (collective 0, task "
                              "'all_reduce_0@0' from 'grad_w')",
                              dtype ? "rank 1 runs all_reduce float16 x 4 (collective 0, task "
                                      "'all_reduce_0@1' from 'grad_w')"
                                    : "rank 1 runs all_reduce float32 x 6 (collective 0, task "
                                      "'all_reduce_0@1' from 'grad_w')"});
  }
}

// Note [Broadcast]: every member gets the root's input in the reference executor; the members
// must agree on the root, and only the root reads a register.
TEST(CollectivePlan, BroadcastGivesEveryMemberTheRootsInputAndNeedsOneRoot) {
  for (int root : {0, 2}) {
    PlanBuilder b(3);
    const int64_t x = b.input(root, "x", Shape{kRows, kCols});
    const std::vector<int64_t> y = b.broadcast({0, 1, 2}, root, x);
    for (int m = 0; m < 3; ++m) b.output(m, str_cat("y", m), y[m], Shape{kRows, kCols});
    ReferenceExecutor executor(b.plan());
    const Tensor value = random_tensor(Shape{kRows, kCols}, DataType::kFloat32, 5);
    const std::map<std::string, Tensor> out = executor.run({{"x", value}});
    for (int m = 0; m < 3; ++m) EXPECT_EQ(values_of(out.at(str_cat("y", m))), values_of(value));
  }
  PlanBuilder b(2);
  const int64_t x = zeros(b, 0, "x", Shape{4});
  const std::vector<int64_t> y = b.broadcast({0, 1}, 0, x, "embedding");
  b.find_task_of(y[1])->mutable_collective()->set_root(1);
  expect_refused(b.plan(), {"collective 'broadcast_0@1' (task 5 on rank 1) must read 1 register "
                            "and write one. However, it reads 0 and writes 1."});
  PlanBuilder c(3);
  const std::vector<int64_t> z = c.broadcast({0, 1, 2}, 0, zeros(c, 0, "x", Shape{4}), "emb");
  c.find_task_of(z[2])->mutable_collective()->set_root(1);
  expect_refused(c.plan(), {"must run one op over one dtype and element count",
                            "rank 0 runs broadcast float32 x 4 from member 0",
                            "rank 2 runs broadcast float32 x 4 from member 1"});
}

// Note [Device collectives], "Order": member 0 of a GPU collective decides the order of its
// communicator's collectives as their inputs become ready, so one that reads nothing (here a
// broadcast rooted at member 1) is refused on a GPU, and accepted on the host.
TEST(CollectivePlan, MemberZeroOfAGpuCollectiveMustReadAnInput) {
  for (bool gpu : {false, true}) {
    PlanBuilder b(2);
    int64_t x = zeros(b, 1, "x", Shape{4});
    if (gpu) {  // the root's input on the GPU, through a copy
      const int64_t on_gpu = b.reg(1, "x_gpu", Shape{4});
      b.find(on_gpu)->set_device(proto::PLAN_DEVICE_CUDA);
      b.task(1, "to_gpu", proto::TaskProto::COPY_H2D, {x}, {on_gpu})
          ->set_device(proto::PLAN_DEVICE_CUDA);
      x = on_gpu;
    }
    const std::vector<int64_t> y = b.broadcast({0, 1}, 1, x, "emb");
    if (!gpu) {
      check_plan_contract(b.plan());
      continue;
    }
    for (int m = 0; m < 2; ++m) b.find_task_of(y[m])->set_device(proto::PLAN_DEVICE_CUDA);
    for (int m = 0; m < 2; ++m) b.find(y[m])->set_device(proto::PLAN_DEVICE_CUDA);
    expect_error_phrases([&] { check_plan_contract(b.plan()); }, ErrorCode::kFailedPrecondition,
                         {"collective 'broadcast_0@0' (task 5 on rank 0) is member 0 of "
                          "communicator 'test communicator' (ranks [0, 1]) on a GPU",
                          "However, it reads no register (broadcast)."});
  }
}

// Note [Grouped send/recv]: a block one member sends must be a block of the same size the other
// receives from it, and a member's receives must fill its output; refused naming both ranks.
TEST(CollectivePlan, GroupedSendRecvBlocksMustMatchAcrossMembers) {
  // Two members swap the halves of a (4, 2) tensor: member m keeps row block m, sends the other.
  auto build = [](int64_t received_rows) {
    PlanBuilder b(2);
    const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4, 2}), zeros(b, 1, "x1", Shape{4, 2})};
    std::vector<CollectiveBlocks> blocks(2);
    for (int m = 0; m < 2; ++m) {
      blocks[m].sends = {{m, {{0, 2}, {0, 2}}}, {1 - m, {{2, 4}, {0, 2}}}};
      blocks[m].receives = {{m, {{0, 2}, {0, 2}}}, {1 - m, {{2, 2 + received_rows}, {0, 2}}}};
    }
    b.send_recv({0, 1}, x, {Shape{4, 2}, Shape{4, 2}}, blocks, "reshard");
    return b.plan();
  };
  check_plan_contract(build(2));
  expect_refused(build(1), {"collective 0 on communicator 'test communicator' (ranks [0, 1]): "
                            "rank 0 sends 4 elements to rank 1 (send_recv float32",
                            "but rank 1 receives 2 elements (send_recv float32"});
}

TEST(CollectivePlan, GroupedSendRecvMovesEachBlockToItsRegion) {
  // Member m holds rows [2m, 2m + 2) of a (4, 3) tensor and gets column block m of it.
  PlanBuilder b(2);
  std::map<std::string, Tensor> feed;
  std::vector<int64_t> x;
  for (int m = 0; m < 2; ++m) {
    x.push_back(b.input(m, str_cat("x", m), Shape{2, 3}));
    feed[str_cat("x", m)] = random_tensor(Shape{2, 3}, DataType::kFloat32, 10 + m);
  }
  const std::vector<Range> cols[2] = {{Range{0, 2}}, {Range{2, 3}}};
  std::vector<CollectiveBlocks> blocks(2);
  for (int m = 0; m < 2; ++m) {
    for (int q = 0; q < 2; ++q) {
      blocks[m].sends.push_back({q, {Range{0, 2}, cols[q][0]}});
      blocks[m].receives.push_back({q, {Range{2 * q, 2 * q + 2}, Range{0, cols[m][0].size()}}});
    }
  }
  const std::vector<int64_t> y = b.send_recv({0, 1}, x, {Shape{4, 2}, Shape{4, 1}}, blocks);
  b.output(0, "y0", y[0], Shape{4, 2});
  b.output(1, "y1", y[1], Shape{4, 1});
  ReferenceExecutor executor(b.plan());
  const std::map<std::string, Tensor> out = executor.run(feed);
  for (int m = 0; m < 2; ++m) {
    const std::vector<double> got = values_of(out.at(str_cat("y", m)));
    const int64_t width = cols[m][0].size();
    for (int64_t row = 0; row < 4; ++row) {
      const std::vector<double> from = values_of(feed.at(str_cat("x", row / 2)));
      for (int64_t col = 0; col < width; ++col) {
        EXPECT_EQ(got[row * width + col], from[(row % 2) * 3 + cols[m][0].begin + col])
            << "member " << m << " row " << row << " col " << col;
      }
    }
  }
}

TEST(CollectivePlan, ACrissCrossThroughCollectivesIsADeadlock) {
  // Both ranks number X before Y, so their orders agree, but rank 0 feeds Y with X's result
  // and rank 1 feeds X with Y's result: each collective waits for an input that only the other
  // can give. The cycle runs through the collective edges only.
  PlanBuilder b(2);
  const int64_t a0 = zeros(b, 0, "a0", Shape{4});
  const int64_t b1 = zeros(b, 1, "b1", Shape{4});
  const int64_t w1 = b.reg(1, "w1", Shape{4});  // written by g below
  const std::vector<int64_t> x = b.collective(Op::ALL_REDUCE, {0, 1}, {a0, w1}, -1, "stage_x");
  const int64_t z0 = b.reg(0, "z0", Shape{4});
  b.task(0, "f", proto::TaskProto::COPY, {x[0]}, {z0});
  const std::vector<int64_t> y = b.collective(Op::ALL_REDUCE, {0, 1}, {z0, b1}, -1, "stage_y");
  b.task(1, "g", proto::TaskProto::COPY, {y[1]}, {w1});
  const proto::PlanProto& plan = b.plan();
  const std::string x1 =
      str_cat("'all_reduce_0@1' (task ", b.find(x[1])->producer(), " on rank 1)");
  const std::string g = str_cat("'g' (task ", b.find(w1)->producer(), " on rank 1)");
  expect_refused(plan, {"would deadlock",
                        str_cat("'all_reduce_0@0' (task ", b.find(x[0])->producer(),
                                " on rank 0) waits for collective 0 (all_reduce on ranks [0, 1]) "
                                "with ",
                                x1, ", whose input 'w1' comes from ", g)});
  EXPECT_NO_THROW(check_plan_contract(plan, PlanContractOptions{/*acyclic=*/false}));
  // Without the collective edges the plan has no cycle: the index leaves out only what the
  // collectives hold up.
  const PlanIndex index(plan, PlanIndexOptions{/*check_acyclic=*/false});
  EXPECT_LT(index.order_tasks(std::vector<bool>(index.num_tasks(), true)).size(),
            static_cast<size_t>(index.num_tasks()));
}

TEST(CollectivePlan, SequenceNumbersMustCountFromZeroOncePerRank) {
  auto two_collectives = [](int64_t rank1_second_sequence) {
    PlanBuilder b(2);
    const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{4}), zeros(b, 1, "x1", Shape{4})};
    const std::vector<int64_t> a = b.collective(Op::ALL_REDUCE, {0, 1}, x, -1, "a", "dp");
    const std::vector<int64_t> c = b.collective(Op::ALL_REDUCE, {0, 1}, a, -1, "b", "dp");
    b.find_task_of(c[1])->mutable_collective()->set_sequence(rank1_second_sequence);
    return b.plan();
  };
  expect_refused(two_collectives(0),
                 {"the collectives of rank 1 on communicator 'dp' (ranks [0, 1]) must have the "
                  "sequence numbers 0, 1, ... once each. However, all_reduce float32 x 4 "
                  "(collective 0, task 'all_reduce_0@1' from 'a') and all_reduce float32 x 4 "
                  "(collective 1, task 'all_reduce_1@1' from 'b') both have sequence 0."});
  expect_refused(two_collectives(5), {"However, it has none with sequence 1: the next, "
                                      "all_reduce float32 x 4 (collective 1, task "
                                      "'all_reduce_1@1' from 'b'), has sequence 5."});
}

TEST(CollectivePlan, MalformedCollectiveTasksAreRefused) {
  auto plan = [](const std::function<void(PlanBuilder&, const std::vector<int64_t>&)>& change,
                 Op::Op op = Op::ALL_REDUCE, int axis = -1) {
    PlanBuilder b(3);
    const Shape shape = op == Op::ALL_GATHER ? Shape{3} : Shape{7, 3};
    const std::vector<int64_t> x = {zeros(b, 0, "x0", shape), zeros(b, 1, "x1", shape)};
    const std::vector<int64_t> out = b.collective(op, {0, 1}, x, axis, "boxing", "dp");
    change(b, out);
    return b.plan();
  };
  auto members = [](std::vector<int64_t> ranks) {
    return [ranks](PlanBuilder& b, const std::vector<int64_t>& out) {
      auto* c = b.find_task_of(out[0])->mutable_collective();
      c->clear_members();
      for (int64_t r : ranks) c->add_members(r);
    };
  };
  for (const auto& [ranks, shown] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{1, 2}, "[1, 2]"}, {{0}, "[0]"}, {{0, 1, 0}, "[0, 1, 0]"}}) {
    expect_refused(plan(members(ranks)),
                   {"must run on at least two distinct member ranks, its own among them. "
                    "However, its members are " +
                    shown});
  }
  // The two tasks of one collective name different members.
  expect_refused(plan(members({1, 0})), {"the tasks of collective 0 must name the same members"});

  // Shapes (PlanIndex): a reduce-scatter's output is its chunk of the input ...
  auto reshape = [](int member, Shape shape, bool input = false) {
    return [member, shape, input](PlanBuilder& b, const std::vector<int64_t>& out) {
      const int64_t r = input ? b.find_task_of(out[member])->inputs(0) : out[member];
      to_proto(shape, b.find(r)->mutable_shape());
      b.find(r)->set_bytes(0);
    };
  };
  expect_error_phrases(
      [&] {
        PlanIndex index(plan(reshape(1, Shape{4, 3}), Op::REDUCE_SCATTER, 0));
      },
      ErrorCode::kInvalidArgument,
      {"task 'reduce_scatter_0@1'", "COLLECTIVE reduce_scatter",
       "of shape (3, 3) (chunk 1 of 2 of its input (7, 3) along axis 0). However, got "
       "(4, 3)."});
  expect_error_phrases(
      [&] {
        PlanIndex index(plan(reshape(0, Shape{2, 3}), Op::REDUCE_SCATTER, -1));
      },
      ErrorCode::kInvalidArgument,
      {"of 11 elements (chunk 0 of 2 of its input (7, 3) as flat elements). However, got "
       "(2, 3)."});
  // ... a gather's input its chunk of the output, an all-reduce keeps the shape ...
  expect_error_phrases(
      [&] { PlanIndex index(plan(reshape(1, Shape{4}, /*input=*/true), Op::ALL_GATHER, 0)); },
      ErrorCode::kInvalidArgument,
      {"of shape (3,) (chunk 1 of 2 of its output (6,) along axis 0). However, got (4,)."});
  expect_error_phrases(
      [&] {
        PlanIndex index(plan(reshape(0, Shape{3, 7})));
      },
      ErrorCode::kInvalidArgument, {"of shape (7, 3) (the shape of its input)"});
  // ... along an axis it has.
  expect_error_phrases(
      [&] {
        PlanIndex index(plan([](PlanBuilder& b, const std::vector<int64_t>& out) {
          for (int64_t r : out) b.find_task_of(r)->mutable_collective()->set_axis(2);
        }));
      },
      ErrorCode::kInvalidArgument, {"However, got axis 2."});
  // The members act in the same part of an iteration.
  expect_error_phrases(
      [&] {
        PlanIndex index(plan([](PlanBuilder& b, const std::vector<int64_t>& out) {
          b.find_task_of(out[1])->set_per_micro_batch(true);
        }));
      },
      ErrorCode::kInvalidArgument,
      {"the members of collective 0 must all act once per micro-batch or all once per "
       "iteration"});
}

TEST(CollectivePlan, DumpShowsCollectivesAndCountsTheirRingTraffic) {
  for (Op::Op op : {Op::ALL_REDUCE, Op::REDUCE_SCATTER}) {
    PlanBuilder b(2);
    const std::vector<int64_t> x = {zeros(b, 0, "x0", Shape{5}), zeros(b, 1, "x1", Shape{5})};
    b.collective(op, {0, 1}, x, -1, "grad", "dp");
    const std::string text = compiler::plan_to_text(b.plan());
    EXPECT_NE(text.find(str_cat("COLLECTIVE ", collective_op_name(op),
                                " over ranks [0, 1] (collective 0, sequence 0, axis -1)")),
              std::string::npos)
        << text;
    EXPECT_NE(compiler::plan_to_dot(b.plan()).find("COLLECTIVE"), std::string::npos);
    const compiler::PlanSummary summary = compiler::summarize_plan(b.plan());
    EXPECT_EQ(summary.ranks[0].tasks_by_kind.at("COLLECTIVE"), 1);
    // 5 floats in chunks of 3 and 2: member 0 sends chunk 1 and receives chunk 0 while
    // reducing, then (all-reduce) sends its chunk 0 and receives chunk 1.
    if (op == Op::ALL_REDUCE) {
      EXPECT_EQ(summary.ranks[0].bytes_sent, 20);
      EXPECT_EQ(summary.ranks[0].bytes_received, 20);
    } else {
      EXPECT_EQ(summary.ranks[0].bytes_sent, 8);
      EXPECT_EQ(summary.ranks[0].bytes_received, 12);
      EXPECT_EQ(summary.ranks[1].bytes_sent, 12);
      EXPECT_EQ(summary.ranks[1].bytes_received, 8);
    }
  }
}

TEST(CollectivePlan, DumpCountsRecursiveDoublingTraffic) {
  // 6 members, p = 4: member 0 takes member 4's input, exchanges twice, hands the sum to 4;
  // member 2 only exchanges; member 5 sends its input and gets the sum.
  PlanBuilder b(6);
  std::vector<int64_t> x;
  for (int m = 0; m < 6; ++m) x.push_back(zeros(b, m, str_cat("x", m), Shape{5}));
  b.set_collective_algorithm(Op::RECURSIVE_DOUBLING);
  b.collective(Op::ALL_REDUCE, {0, 1, 2, 3, 4, 5}, x, -1, "grad", "dp");
  EXPECT_NE(compiler::plan_to_text(b.plan()).find("(collective 0, sequence 0, axis -1, recursive "
                                                  "doubling)"),
            std::string::npos);
  const compiler::PlanSummary summary = compiler::summarize_plan(b.plan());
  EXPECT_EQ(summary.ranks[0].bytes_sent, 3 * 20);
  EXPECT_EQ(summary.ranks[0].bytes_received, 3 * 20);
  EXPECT_EQ(summary.ranks[2].bytes_sent, 2 * 20);
  EXPECT_EQ(summary.ranks[5].bytes_sent, 20);
  EXPECT_EQ(summary.ranks[5].bytes_received, 20);
}

}  // namespace
}  // namespace ofl::actor
