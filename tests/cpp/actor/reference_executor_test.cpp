// The reference executor on hand-built plans: each test compares a plan against values computed
// on one device (eager functional ops) or written out by hand.

#include "actor/reference_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/proto_convert.h"
#include "oneflowlike/sbp.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using ofl::testing::add_range;
using ofl::testing::expect_error_phrases;
using ofl::testing::make_tensor;
using ofl::testing::PlanBuilder;
using ofl::testing::random_tensor;
using ofl::testing::values_of;

void expect_equal(const Tensor& actual, const Tensor& expected) {
  ASSERT_TRUE(actual.defined());
  EXPECT_EQ(actual.shape(), expected.shape());
  EXPECT_EQ(actual.dtype(), expected.dtype());
  EXPECT_EQ(values_of(actual), values_of(expected));
}

// Rows of a (rows, ...) tensor split over `parts` ranks, piece `index`.
std::vector<Range> rows(const Shape& logical, int parts, int index) {
  std::vector<Range> region;
  for (int a = 0; a < logical.ndim(); ++a) region.push_back(Range{0, logical[a]});
  region[0] = balanced_range(logical[0], parts, index);
  return region;
}

const Shape kX{4, 3};
const Shape kW{3, 5};
const Shape kY{4, 5};
constexpr int64_t kSeed = 42;

// y = x @ w with x split S(0) over `world` ranks and w a broadcast NORMAL variable.
proto::PlanProto matmul_plan(int world) {
  PlanBuilder b(world);
  for (int r = 0; r < world; ++r) {
    const int64_t x = b.input(r, "x", kX, rows(kX, world, r));
    const int64_t w = b.variable(r, "w", kW, {}, proto::InitializerProto::NORMAL, /*a=*/0.0,
                                 /*b=*/1.0, kSeed);
    const std::vector<Range> y_region = rows(kY, world, r);
    const int64_t y = b.reg(r, "y@" + std::to_string(r), Shape{y_region[0].size(), 5});
    b.compute(r, "matmul", "matmul", MatmulParams{}, {x, w}, {y});
    b.output(r, "y", y, kY, y_region);
  }
  return b.plan();
}

TEST(ReferenceExecutor, DataParallelMatmulEqualsOneDeviceAndEager) {
  const Tensor x = random_tensor(kX, DataType::kFloat32, /*seed=*/1);
  ReferenceExecutor one(matmul_plan(1));
  ReferenceExecutor two(matmul_plan(2));
  one.initialize_variables();
  two.initialize_variables();

  const Tensor w = two.read_variable("w");
  expect_equal(w, functional::random_normal(kW, DataType::kFloat32, 0.0, 1.0, kSeed, 0));
  expect_equal(one.read_variable("w"), w);

  const Tensor y1 = one.run({{"x", x}}).at("y");
  const Tensor y2 = two.run({{"x", x}}).at("y");
  const Tensor eager = functional::matmul(x, w);
  ofl::testing::expect_close(y2, values_of(eager), kY);
  ofl::testing::expect_close(y1, values_of(eager), kY);
}

// A variable split on `axis` over `world` ranks, initialised by `init`.
proto::PlanProto split_variable_plan(int world, int axis, proto::InitializerProto::Kind init) {
  const Shape logical{5, 3};
  PlanBuilder b(world);
  for (int r = 0; r < world; ++r) {
    std::vector<Range> region = {Range{0, 5}, Range{0, 3}};
    region[axis] = balanced_range(logical[axis], world, r);
    b.variable(r, "v", logical, region, init, /*a=*/-2.0, /*b=*/3.0, /*seed=*/7);
  }
  return b.plan();
}

TEST(ReferenceExecutor, RandomlyInitialisedSplitVariableEqualsOneDeviceVariable) {
  for (auto init : {proto::InitializerProto::NORMAL, proto::InitializerProto::UNIFORM}) {
    for (int axis : {0, 1}) {
      SCOPED_TRACE(str_cat("init ", init, ", S(", axis, ")"));
      ReferenceExecutor one(split_variable_plan(1, axis, init));
      ReferenceExecutor split(split_variable_plan(2, axis, init));
      one.initialize_variables();
      split.initialize_variables();
      const Tensor expected =
          init == proto::InitializerProto::NORMAL
              ? functional::random_normal(Shape{5, 3}, DataType::kFloat32, -2.0, 3.0, 7, 0)
              : functional::random_uniform(Shape{5, 3}, DataType::kFloat32, -2.0, 3.0, 7, 0);
      expect_equal(one.read_variable("v"), expected);
      expect_equal(split.read_variable("v"), expected);
    }
  }
}

TEST(ReferenceExecutor, ConstantInitialisersFillEveryPiece) {
  for (auto [init, value] : {std::pair{proto::InitializerProto::ZEROS, 0.0},
                             std::pair{proto::InitializerProto::ONES, 1.0},
                             std::pair{proto::InitializerProto::CONSTANT, -2.0}}) {
    ReferenceExecutor executor(split_variable_plan(2, 0, init));
    executor.write_variable("v", random_tensor(Shape{5, 3}, DataType::kFloat32, 3));
    executor.initialize_variables();
    expect_equal(executor.read_variable("v"),
                 make_tensor(std::vector<double>(15, value), Shape{5, 3}));
  }
}

TEST(ReferenceExecutor, WrittenSplitVariableIsReadBackAndUsed) {
  ReferenceExecutor executor(matmul_plan(2));
  const Tensor w = random_tensor(kW, DataType::kFloat32, /*seed=*/5);
  executor.write_variable("w", w);
  expect_equal(executor.read_variable("w"), w);
  const Tensor x = random_tensor(kX, DataType::kFloat32, /*seed=*/6);
  ofl::testing::expect_close(executor.run({{"x", x}}).at("y"), values_of(functional::matmul(x, w)),
                             kY);

  ReferenceExecutor split(split_variable_plan(2, 1, proto::InitializerProto::ZEROS));
  const Tensor v = random_tensor(Shape{5, 3}, DataType::kFloat32, /*seed=*/8);
  split.write_variable("v", v);
  expect_equal(split.read_variable("v"), v);
}

TEST(ReferenceExecutor, PartialSumPiecesAreSummedAndBroadcastReplicasCountOnce) {
  const Shape shape{2, 2};
  PlanBuilder b(2);
  const int64_t a = b.input(0, "a", shape);
  const int64_t c = b.input(1, "b", shape);
  b.output(0, "sum", a, shape);  // P: both pieces contribute
  b.output(1, "sum", c, shape);
  b.output(0, "first", a, shape);  // B: only coordinate 0 contributes
  b.output(1, "first", c, shape, {}, /*contributes=*/false);
  // S(1): each rank places one column.
  for (int r = 0; r < 2; ++r) {
    const int64_t column = b.reg(r, "column@" + std::to_string(r), Shape{2, 1});
    proto::TaskProto* slice =
        b.task(r, "slice", proto::TaskProto::SLICE, {r == 0 ? a : c}, {column});
    add_range(slice, Range{0, 2}, /*concat=*/false);
    add_range(slice, Range{r, r + 1}, /*concat=*/false);
    b.output(r, "columns", column, shape, {Range{0, 2}, Range{r, r + 1}});
  }
  ReferenceExecutor executor(b.plan());
  const Tensor av = make_tensor({1, 2, 3, 4}, shape);
  const Tensor bv = make_tensor({10, 20, 30, 40}, shape);
  auto out = executor.run({{"a", av}, {"b", bv}});
  expect_equal(out.at("sum"), make_tensor({11, 22, 33, 44}, shape));
  expect_equal(out.at("first"), av);
  expect_equal(out.at("columns"), make_tensor({1, 20, 3, 40}, shape));
}

TEST(ReferenceExecutor, SendRecvAddAllReduceGivesEveryRankTheSum) {
  const Shape shape{3};
  PlanBuilder b(2);
  const int64_t p0 = b.input(0, "x0", shape);
  const int64_t p1 = b.input(1, "x1", shape);
  // Rank 0 lists its RECV before its SEND: the order must still let both transfers happen.
  auto [recv0, q0] = b.send_recv(1, 0, p1, /*transfer_id=*/2);
  auto [recv1, q1] = b.send_recv(0, 1, p0, /*transfer_id=*/1);
  (void)recv0;
  (void)recv1;
  const int64_t s0 = b.reg(0, "sum@0", shape);
  const int64_t s1 = b.reg(1, "sum@1", shape);
  b.task(0, "add@0", proto::TaskProto::ADD, {p0, q0}, {s0});
  b.task(1, "add@1", proto::TaskProto::ADD, {q1, p1}, {s1});
  b.output(0, "sum0", s0, shape);
  b.output(1, "sum1", s1, shape);

  ReferenceExecutor executor(b.plan());
  EXPECT_EQ(executor.schedule(),
            (std::vector<std::string>{"input_x0", "send_1", "input_x1", "send_2", "recv_2", "add@0",
                                      "output_sum0@0", "recv_1", "add@1", "output_sum1@1"}));
  auto out = executor.run(
      {{"x0", make_tensor({1, 2, 3}, shape)}, {"x1", make_tensor({0.5, -2, 10}, shape)}});
  expect_equal(out.at("sum0"), make_tensor({1.5, 0, 13}, shape));
  expect_equal(out.at("sum1"), make_tensor({1.5, 0, 13}, shape));
}

TEST(ReferenceExecutor, SliceConcatZerosAndCopyMoveTheExpectedElements) {
  const Shape shape{3, 4};
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", shape);  // 0 .. 11
  const int64_t y = b.input(0, "y", Shape{2, 1});

  const int64_t sliced = b.reg(0, "sliced", Shape{2, 3});
  proto::TaskProto* slice = b.task(0, "slice", proto::TaskProto::SLICE, {x}, {sliced});
  add_range(slice, Range{1, 3}, false);
  add_range(slice, Range{1, 4}, false);
  b.output(0, "sliced", sliced, Shape{2, 3});

  const int64_t zeros = b.reg(0, "zeros", Shape{2, 1});
  b.task(0, "zeros", proto::TaskProto::ZEROS, {}, {zeros});
  const int64_t joined = b.reg(0, "joined", Shape{2, 5});
  proto::TaskProto* concat =
      b.task(0, "concat", proto::TaskProto::CONCAT, {zeros, sliced, y}, {joined});
  for (Range r : {Range{0, 2}, Range{0, 1}, Range{0, 2}, Range{1, 4}, Range{0, 2}, Range{4, 5}}) {
    add_range(concat, r, /*concat=*/true);
  }
  b.output(0, "joined", joined, Shape{2, 5});

  const int64_t reshaped = b.reg(0, "reshaped", Shape{4, 3});
  b.task(0, "copy", proto::TaskProto::COPY, {x}, {reshaped});
  b.output(0, "reshaped", reshaped, Shape{4, 3});

  ReferenceExecutor executor(b.plan());
  std::vector<double> iota(12);
  for (int i = 0; i < 12; ++i) iota[i] = i;
  const Tensor xv = make_tensor(iota, shape);
  auto out = executor.run({{"x", xv}, {"y", make_tensor({-1, -2}, Shape{2, 1})}});
  expect_equal(out.at("sliced"), make_tensor({5, 6, 7, 9, 10, 11}, Shape{2, 3}));
  expect_equal(out.at("joined"), make_tensor({0, 5, 6, 7, -1, 0, 9, 10, 11, -2}, Shape{2, 5}));
  expect_equal(out.at("reshaped"), make_tensor(iota, Shape{4, 3}));
}

// sgd_update with momentum on a parameter split S(0) over 2 ranks. The fetched parameter comes
// from an OUTPUT listed before the update on each rank but ordered after it by a control input.
proto::PlanProto sgd_plan() {
  const Shape shape{5};
  PlanBuilder b(2);
  for (int r = 0; r < 2; ++r) {
    const std::vector<Range> region = {balanced_range(5, 2, r)};
    const int64_t w = b.variable(r, "w", shape, region, proto::InitializerProto::NORMAL, 0.0, 1.0,
                                 /*seed=*/3);
    const int64_t buf = b.variable(r, "buf", shape, region, proto::InitializerProto::ZEROS);
    const int64_t lr = b.variable(r, "lr", Shape{}, {}, proto::InitializerProto::CONSTANT, 0.1);
    const int64_t g = b.input(r, "g", shape, region);
    proto::TaskProto* fetch = b.output(r, "w_after", w, shape, region);
    proto::TaskProto* update = b.compute(r, "sgd", "sgd_update",
                                         SgdParams{/*momentum=*/0.9, /*dampening=*/0.0,
                                                   /*weight_decay=*/0.01, /*nesterov=*/false},
                                         {w, g, buf, lr}, {});
    update->add_mutated_inputs(0);
    update->add_mutated_inputs(2);
    fetch->add_control_inputs(update->id());
  }
  return b.plan();
}

TEST(ReferenceExecutor, SgdUpdateMutatesPersistentVariablesAcrossIterations) {
  const Shape shape{5};
  ReferenceExecutor executor(sgd_plan());
  executor.initialize_variables();

  Tensor w = functional::random_normal(shape, DataType::kFloat32, 0.0, 1.0, 3, 0);
  const Tensor buf = Tensor::zeros(shape, DataType::kFloat32);
  const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
  expect_equal(executor.read_variable("w"), w);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(str_cat("step ", step));
    const Tensor g = random_tensor(shape, DataType::kFloat32, /*seed=*/10 + step);
    const Tensor fetched = executor.run({{"g", g}}).at("w_after");
    functional::sgd_update(w, g, buf, lr, 0.9, 0.0, 0.01, false);
    expect_equal(executor.read_variable("w"), w);
    expect_equal(executor.read_variable("buf"), buf);
    expect_equal(fetched, w);
  }
  EXPECT_NE(values_of(executor.read_variable("buf")), std::vector<double>(5, 0.0));
}

TEST(ReferenceExecutor, MissingOrMismatchedInputIsAnErrorNamingIt) {
  ReferenceExecutor executor(matmul_plan(2));
  expect_error_phrases([&] { executor.run({}); }, ErrorCode::kInvalidArgument,
                       {"run needs input 'x'", "input_x", "no inputs"});
  expect_error_phrases(
      [&] {
        executor.run({{"x", Tensor::zeros(Shape{4, 4}, DataType::kFloat32)}});
      },
      ErrorCode::kInvalidArgument, {"input 'x'", "(4, 3)", "(4, 4)"});
  expect_error_phrases(
      [&] {
        executor.run({{"x", Tensor::zeros(kX, DataType::kFloat64)}});
      },
      ErrorCode::kTypeError, {"input 'x'", "float32", "float64"});
  expect_error_phrases(
      [&] {
        executor.run({{"x", Tensor::zeros(kX, DataType::kFloat32)},
                      {"z", Tensor::zeros(kX, DataType::kFloat32)}});
      },
      ErrorCode::kInvalidArgument, {"'z'", "no INPUT task"});
  expect_error_phrases([&] { executor.read_variable("nope"); }, ErrorCode::kNotFound, {"'nope'"});
  expect_error_phrases([&] { executor.write_variable("w", Tensor::zeros(kX, DataType::kFloat32)); },
                       ErrorCode::kInvalidArgument, {"variable 'w'", "(3, 5)", "(4, 3)"});
}

TEST(ReferenceExecutor, RecvWithoutSendIsAValidationErrorNamingTheTask) {
  PlanBuilder b(2);
  const int64_t r = b.reg(1, "received", Shape{2});
  proto::TaskProto* recv = b.task(1, "orphan_recv", proto::TaskProto::RECV, {}, {r});
  recv->set_peer(0);
  recv->set_transfer_id(9);
  b.output(1, "out", r, Shape{2});
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); },
                       ErrorCode::kFailedPrecondition,
                       {"'orphan_recv'", "transfer 9", "has no matching send on rank 0"});
}

TEST(ReferenceExecutor, SendWithMismatchedRecvShapeIsAValidationError) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{2});
  auto [recv, out] = b.send_recv(0, 1, x, /*transfer_id=*/4);
  (void)recv;
  b.find(out)->mutable_shape()->set_dims(0, 3);
  b.find(out)->set_bytes(12);
  b.output(1, "out", out, Shape{3});
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); },
                       ErrorCode::kFailedPrecondition,
                       {"'recv_4'", "'send_4'", "sends (2,) float32 and receives (3,) float32"});
}

TEST(ReferenceExecutor, CycleThroughControlInputsIsReportedWithTheTaskNames) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2});
  const int64_t a = b.reg(0, "a", Shape{2});
  const int64_t c = b.reg(0, "c", Shape{2});
  proto::TaskProto* copy_a = b.task(0, "copy_a", proto::TaskProto::COPY, {x}, {a});
  proto::TaskProto* copy_c = b.task(0, "copy_c", proto::TaskProto::COPY, {a}, {c});
  copy_a->add_control_inputs(copy_c->id());
  b.output(0, "out", c, Shape{2});
  expect_error_phrases(
      [&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kFailedPrecondition,
      {"3 tasks can never act",
       "'copy_a' (task 4 on rank 0) waits for control input 'copy_c' (task 5 on rank 0)",
       "'copy_c' (task 5 on rank 0) waits for register 'a' from 'copy_a' (task 4 on "
       "rank 0)"});
}

TEST(ReferenceExecutor, RegisterWithoutProducerIsAValidationError) {
  PlanBuilder b(1);
  const int64_t dangling = b.reg(0, "dangling", Shape{2});
  b.output(0, "out", dangling, Shape{2});
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); },
                       ErrorCode::kFailedPrecondition,
                       {"register 'dangling'", "is not produced by a task of its rank"});
}

TEST(ReferenceExecutor, ComputeTaskWithUnknownOpOrWrongArityIsAValidationError) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2, 2});
  const int64_t y = b.reg(0, "y", Shape{2, 2});
  proto::TaskProto* t = b.compute(0, "mm", "matmul", MatmulParams{}, {x}, {y});
  b.output(0, "y", y, Shape{2, 2});
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kInvalidArgument,
                       {"task 'mm'", "must read the 2 inputs of 'matmul'"});
  t->set_op_type("no_such_op");
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kNotFound,
                       {"task 'mm'", "'no_such_op'"});
}

// Note [Implicit plan fields]: a compute task's params may sit in the plan's table; an index the
// table does not hold is refused naming the task, not read past the table.
TEST(ReferenceExecutor, ParamsIndexOutsideThePlansTableIsAValidationError) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2, 2});
  const int64_t w = b.input(0, "w", Shape{2, 2});
  const int64_t y = b.reg(0, "y", Shape{2, 2});
  proto::TaskProto* t = b.compute(0, "mm", "matmul", MatmulParams{}, {x, w}, {y});
  b.output(0, "y", y, Shape{2, 2});
  t->clear_params();
  t->set_params_index(3);
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kInvalidArgument,
                       {"task 'mm'", "params_index is 3", "the plan holds 0"});
}

// Note [Micro-batches]: x (4, 3) fed as m = 2 micro-batches of (2, 3); per micro-batch
// y = reduce_sum(relu(x_k)), packed into (2,).
proto::PlanProto micro_batch_sum_plan() {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2, 3});
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, Shape{2, 3});
  const int64_t h = b.reg(0, "h", Shape{2, 3});
  b.compute(0, "relu", "relu", NoParams{}, {xk}, {h})->set_per_micro_batch(true);
  const int64_t s = b.reg(0, "s", Shape{});
  b.compute(0, "sum", "reduce_sum", ReduceParams{}, {h}, {s})->set_per_micro_batch(true);
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, s, Shape{2});
  b.output(0, "y", packed, Shape{2});
  return b.plan();
}

TEST(ReferenceExecutor, MicroBatchesRunInTurnAndPackOneRowEach) {
  ReferenceExecutor executor(micro_batch_sum_plan());
  EXPECT_EQ(executor.micro_batches(), 2);
  EXPECT_EQ(executor.schedule(),
            (std::vector<std::string>{"input_x", "unpack#0", "relu#0", "sum#0", "pack#0",
                                      "unpack#1", "relu#1", "sum#1", "pack#1", "output_y@0"}));
  const Tensor x = make_tensor({1, -2, 3, -4, 5, 6, -7, 8, -9, 10, 11, -12}, Shape{4, 3});
  for (int run = 0; run < 2; ++run) {  // nothing leaks from one iteration into the next
    expect_equal(executor.run({{"x", x}}).at("y"),
                 make_tensor({1 + 3 + 5 + 6, 8 + 10 + 11}, Shape{2}));
  }
}

TEST(ReferenceExecutor, MicroBatchedInputOfTheWrongShapeIsAnErrorNamingBothShapes) {
  ReferenceExecutor executor(micro_batch_sum_plan());
  expect_error_phrases(
      [&] {
        executor.run({{"x", Tensor::zeros(Shape{2, 3}, DataType::kFloat32)}});
      },
      ErrorCode::kInvalidArgument,
      {"input 'x'", "must have shape (4, 3) (2 micro-batches of (2, 3))", "However, got (2, 3)"});
}

// Gradient accumulation: g_k = w * x_k for m = 2 micro-batches of x (3,); the once sgd_update
// (momentum 0.9) applies their sum with the fed lr.
proto::PlanProto accumulation_plan() {
  const Shape shape{3};
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t w = b.variable(0, "w", shape, {}, proto::InitializerProto::ZEROS);
  const int64_t buf = b.variable(0, "buf", shape, {}, proto::InitializerProto::ZEROS);
  const int64_t lr = b.input(0, "lr", Shape{});
  const int64_t x = b.batched_input(0, "x", shape);
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, shape);
  const int64_t wk = b.micro_task(0, "repeat", proto::TaskProto::REPEAT, w, shape);
  const int64_t g = b.reg(0, "g", shape);
  b.compute(0, "mul", "mul", NoParams{}, {wk, xk}, {g})->set_per_micro_batch(true);
  const int64_t sum = b.micro_task(0, "accumulate", proto::TaskProto::ACCUMULATE, g, shape);
  b.output(0, "g_sum", sum, shape);
  proto::TaskProto* update = b.compute(0, "sgd", "sgd_update",
                                       SgdParams{/*momentum=*/0.9, /*dampening=*/0.0,
                                                 /*weight_decay=*/0.0, /*nesterov=*/false},
                                       {w, sum, buf, lr}, {});
  update->add_mutated_inputs(0);
  update->add_mutated_inputs(2);
  return b.plan();
}

TEST(ReferenceExecutor, AccumulatedGradientIsTheSumOverMicroBatchesAndUpdatesOnce) {
  const Shape shape{3};
  ReferenceExecutor executor(accumulation_plan());
  const std::vector<std::string> schedule = executor.schedule();
  EXPECT_EQ(std::count(schedule.begin(), schedule.end(), "sgd"), 1);
  EXPECT_EQ(schedule.back(), "sgd");
  EXPECT_EQ(std::count(schedule.begin(), schedule.end(), "accumulate#1"), 1);

  Tensor w = make_tensor({1, -2, 0.5}, shape);
  const Tensor buf = Tensor::zeros(shape, DataType::kFloat32);
  const Tensor lr = Tensor::scalar(0.1, DataType::kFloat32);
  executor.write_variable("w", w);
  w = w.clone();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(str_cat("step ", step));
    const Tensor x = random_tensor(Shape{6}, DataType::kFloat32, /*seed=*/20 + step);
    const std::vector<double> xv = values_of(x);
    const std::vector<double> wv = values_of(w);
    std::vector<double> sum(3);
    for (int i = 0; i < 3; ++i) sum[i] = wv[i] * xv[i] + wv[i] * xv[3 + i];
    const Tensor g_sum = executor.run({{"x", x}, {"lr", lr}}).at("g_sum");
    ofl::testing::expect_close(g_sum, sum, shape);
    functional::sgd_update(w, g_sum, buf, lr, 0.9, 0.0, 0.0, false);
    expect_equal(executor.read_variable("w"), w);
    expect_equal(executor.read_variable("buf"), buf);
  }
}

// x of micro-batch shape (2, 3), S(0) over 2 ranks inside each of m = 2 micro-batches. Per
// micro-batch, rank 1 sends its row to rank 0, which gathers the micro-batch and applies relu;
// the result is packed on rank 0.
proto::PlanProto split_micro_batch_plan() {
  const Shape micro{2, 3};
  PlanBuilder b(2);
  b.set_micro_batches(2);
  int64_t rows_on[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t x = b.batched_input(r, "x", micro, rows(micro, 2, r));
    b.output(r, str_cat("x_on_", r), x, Shape{2, 3});  // the INPUT register itself
    rows_on[r] = b.micro_task(r, str_cat("unpack@", r), proto::TaskProto::UNPACK, x, Shape{1, 3});
  }
  const int64_t received =
      b.send_recv(1, 0, rows_on[1], /*transfer_id=*/7, /*per_micro_batch=*/true).second;
  const int64_t gathered = b.reg(0, "gathered", micro);
  proto::TaskProto* concat =
      b.task(0, "concat", proto::TaskProto::CONCAT, {rows_on[0], received}, {gathered});
  concat->set_per_micro_batch(true);
  for (Range r : {Range{0, 1}, Range{0, 3}, Range{1, 2}, Range{0, 3}}) {
    add_range(concat, r, /*concat=*/true);
  }
  const int64_t y = b.reg(0, "y", micro);
  b.compute(0, "relu", "relu", NoParams{}, {gathered}, {y})->set_per_micro_batch(true);
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, y, Shape{2, 2, 3});
  b.output(0, "y", packed, Shape{2, 2, 3}, {Range{0, 2}, Range{0, 2}, Range{0, 3}});
  return b.plan();
}

TEST(ReferenceExecutor, SplitMicroBatchedInputGivesEachRankItsRowsOfEveryMicroBatch) {
  ReferenceExecutor executor(split_micro_batch_plan());
  std::vector<double> iota(12);
  for (int i = 0; i < 12; ++i) iota[i] = i - 5;
  auto out = executor.run({{"x", make_tensor(iota, Shape{4, 3})}});
  // Rank 0 holds rows 0 and 2 of the fed tensor (row 0 of each micro-batch), rank 1 rows 1, 3.
  expect_equal(out.at("x_on_0"), make_tensor({-5, -4, -3, 1, 2, 3}, Shape{2, 3}));
  expect_equal(out.at("x_on_1"), make_tensor({-2, -1, 0, 4, 5, 6}, Shape{2, 3}));
  std::vector<double> relu(12);
  for (int i = 0; i < 12; ++i) relu[i] = std::max(0.0, iota[i]);
  expect_equal(out.at("y"), make_tensor(relu, Shape{2, 2, 3}));
}

TEST(ReferenceExecutor, OnceTaskReadingAMicroBatchValueWithoutAccumulateOrPackIsRejected) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2});
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, Shape{2});
  const int64_t h = b.reg(0, "h", Shape{2});
  b.compute(0, "relu", "relu", NoParams{}, {xk}, {h})->set_per_micro_batch(true);
  b.output(0, "h", h, Shape{2});
  expect_error_phrases(
      [&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kInvalidArgument,
      {"a once-per-iteration task may depend on a per-micro-batch task only through "
       "ACCUMULATE or PACK",
       "task 'output_h@0' (id 6, rank 0, OUTPUT) reads register 'h' (id 4) of task "
       "'relu' (id 5, rank 0, COMPUTE relu, per micro-batch)"});
}

TEST(ReferenceExecutor, MicroBatchTaskReadingAOnceRegisterWithoutUnpackOrRepeatIsRejected) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t w = b.variable(0, "w", Shape{2}, {}, proto::InitializerProto::ONES);
  const int64_t h = b.reg(0, "h", Shape{2});
  b.compute(0, "relu", "relu", NoParams{}, {w}, {h})->set_per_micro_batch(true);
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, h, Shape{2, 2});
  b.output(0, "h", packed, Shape{2, 2});
  expect_error_phrases([&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kInvalidArgument,
                       {"a per-micro-batch task may read a once-per-iteration task's register only "
                        "through UNPACK or REPEAT",
                        "task 'relu'", "register 'w@0'", "task 'variable_w'"});
}

// A control input carries no data: it puts a once task after the micro-batches, which is
// fine unless a micro-batch reads that task's register.
TEST(ReferenceExecutor, ControlInputOnAMicroBatchTaskRunsAOnceTaskAfterTheMicroBatches) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2});
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, Shape{2});
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, xk, Shape{2, 2});
  b.output(0, "y", packed, Shape{2, 2});
  const int64_t lr = b.input(0, "lr", Shape{});
  b.output(0, "lr", lr, Shape{});
  proto::PlanProto plan = b.plan();
  proto::TaskProto* input_lr = plan.mutable_ranks(0)->mutable_tasks(4);
  ASSERT_EQ(input_lr->name(), "input_lr");
  input_lr->add_control_inputs(plan.ranks(0).tasks(1).id());  // the UNPACK
  ReferenceExecutor executor(plan);
  EXPECT_EQ(executor.schedule(),
            (std::vector<std::string>{"input_x", "unpack#0", "pack#0", "unpack#1", "pack#1",
                                      "output_y@0", "input_lr", "output_lr@0"}));
  auto out = executor.run({{"x", make_tensor({1, 2, 3, 4}, Shape{4})},
                           {"lr", Tensor::scalar(0.5, DataType::kFloat32)}});
  expect_equal(out.at("y"), make_tensor({1, 2, 3, 4}, Shape{2, 2}));
}

// Labels unpacked per micro-batch cannot wait for micro-batch 0 of x: they are fed once, before
// the micro-batches, so the control input makes the plan impossible although it has no cycle.
TEST(ReferenceExecutor, UnpackedInputWaitingForAMicroBatchTaskIsRejectedWithTheReason) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2});
  const int64_t xk = b.micro_task(0, "x/unpack", proto::TaskProto::UNPACK, x, Shape{2});
  const int64_t labels = b.batched_input(0, "labels", Shape{2});
  const int64_t lk = b.micro_task(0, "labels/unpack", proto::TaskProto::UNPACK, labels, Shape{2});
  const int64_t sum = b.reg(0, "sum", Shape{2});
  b.task(0, "add", proto::TaskProto::ADD, {xk, lk}, {sum})->set_per_micro_batch(true);
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, sum, Shape{2, 2});
  b.output(0, "y", packed, Shape{2, 2});
  proto::PlanProto plan = b.plan();
  ReferenceExecutor valid(plan);
  proto::TaskProto* input_labels = plan.mutable_ranks(0)->mutable_tasks(2);
  ASSERT_EQ(input_labels->name(), "input_labels");
  input_labels->add_control_inputs(plan.ranks(0).tasks(1).id());
  expect_error_phrases(
      [&] { ReferenceExecutor bad(plan); }, ErrorCode::kInvalidArgument,
      {"must not wait for a once-per-iteration task that runs after the micro-batches",
       "task 'labels/unpack' (id 7, rank 0, UNPACK, per micro-batch) reads register "
       "'labels@0' (id 4) of task 'input_labels'",
       "because task 'input_labels' (id 5, rank 0, INPUT) has a control input on task "
       "'x/unpack'"});
}

TEST(ReferenceExecutor, MicroBatchTaskWaitingForATaskAfterTheMicroBatchesIsRejected) {
  // ACCUMULATE -> once COPY -> REPEAT: the REPEAT would need the sum before it exists.
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2});
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, Shape{2});
  const int64_t sum = b.micro_task(0, "accumulate", proto::TaskProto::ACCUMULATE, xk, Shape{2});
  const int64_t copied = b.reg(0, "copied", Shape{2});
  b.task(0, "copy", proto::TaskProto::COPY, {sum}, {copied});
  const int64_t again = b.micro_task(0, "repeat", proto::TaskProto::REPEAT, copied, Shape{2});
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, again, Shape{2, 2});
  b.output(0, "y", packed, Shape{2, 2});
  expect_error_phrases(
      [&] { ReferenceExecutor executor(b.plan()); }, ErrorCode::kInvalidArgument,
      {"must not wait for a once-per-iteration task that runs after the micro-batches",
       "task 'repeat'", "task 'copy' (id"});
}

TEST(ReferenceExecutor, MicroBatchKindsMustActPerMicroBatchAndSourcesOnce) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.batched_input(0, "x", Shape{2});
  const int64_t xk = b.micro_task(0, "unpack", proto::TaskProto::UNPACK, x, Shape{2});
  const int64_t packed = b.micro_task(0, "pack", proto::TaskProto::PACK, xk, Shape{2, 2});
  b.output(0, "y", packed, Shape{2, 2});
  ReferenceExecutor valid(b.plan());  // the plan as built is valid

  proto::PlanProto plan = b.plan();
  plan.mutable_ranks(0)->mutable_tasks(1)->set_per_micro_batch(false);
  expect_error_phrases([&] { ReferenceExecutor executor(plan); }, ErrorCode::kInvalidArgument,
                       {"task 'unpack'", "must act once per micro-batch"});
  plan = b.plan();
  plan.mutable_ranks(0)->mutable_tasks(0)->set_per_micro_batch(true);
  expect_error_phrases([&] { ReferenceExecutor executor(plan); }, ErrorCode::kInvalidArgument,
                       {"task 'input_x'", "must act once per iteration"});
  // PACK's output must hold m rows of its input.
  plan = b.plan();
  plan.mutable_ranks(0)->mutable_registers(2)->mutable_shape()->set_dims(0, 3);
  plan.mutable_ranks(0)->mutable_registers(2)->set_bytes(0);
  expect_error_phrases(
      [&] { ReferenceExecutor executor(plan); }, ErrorCode::kInvalidArgument,
      {"task 'pack'", "(2, 2)", "2 micro-batches of register 'unpack'", "got (3, 2)"});
}

}  // namespace
}  // namespace ofl::actor
