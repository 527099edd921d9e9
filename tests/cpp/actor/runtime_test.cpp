// The actor runtime on hand-built plans: each actor kind under the deterministic mode (values
// checked by hand and against the reference executor), the same plans on real threads, the
// watchdog, failures, tracing and the message protocol.

#include "actor/runtime.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <regex>
#include <thread>

#include "actor/actor_kinds.h"
#include "actor/reference_executor.h"
#include "comm/in_process_transport.h"
#include "comm/transport.h"
#include "oneflowlike/ops/layer_norm.h"
#include "oneflowlike/ops/matmul.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/actor/run_everywhere.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using ofl::testing::add_range;
using ofl::testing::expect_error;
using ofl::testing::make_tensor;
using ofl::testing::PlanBuilder;
using ofl::testing::process_threads;
using ofl::testing::random_tensor;
using ofl::testing::run_everywhere;
using ofl::testing::values_of;
using Kind = proto::TaskProto;  // Kind::SLICE etc.

RuntimeOptions deterministic() {
  RuntimeOptions options;
  options.deterministic = true;
  return options;
}

RuntimeOptions threaded() {
  RuntimeOptions options;
  options.watchdog_seconds = 20;
  return options;
}

TEST(Runtime, ComputeActorsRunKernelsBetweenSourcesAndSinks) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t y = b.reg(0, "y", Shape{4, 3});
  const int64_t z = b.reg(0, "z", Shape{4, 3});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  b.compute(0, "add", "add", NoParams{}, {y, y}, {z});  // one register read twice
  b.output(0, "z", z, Shape{4, 3});
  const Tensor xs = random_tensor(Shape{4, 3}, DataType::kFloat32, 1);
  const auto out = run_everywhere(b.plan(), {{"x", xs}});
  std::vector<double> want;
  for (double v : values_of(xs)) want.push_back(2 * std::max(v, 0.0));
  EXPECT_EQ(values_of(out.at("z")), want);
}

TEST(Runtime, BoxingActorsSliceConcatAddZerosAndCopy) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t top = b.reg(0, "top", Shape{2, 3});
  const int64_t bottom = b.reg(0, "bottom", Shape{2, 3});
  for (auto [reg, rows] : {std::pair{top, Range{0, 2}}, std::pair{bottom, Range{2, 4}}}) {
    proto::TaskProto* slice = b.task(0, str_cat("slice_", reg), Kind::SLICE, {x}, {reg});
    add_range(slice, rows, false);
    add_range(slice, Range{0, 3}, false);
  }
  // Swap the halves back together, add the top half to itself, copy, and a zero tensor.
  const int64_t swapped = b.reg(0, "swapped", Shape{4, 3});
  proto::TaskProto* concat = b.task(0, "concat", Kind::CONCAT, {top, bottom}, {swapped});
  for (Range rows : {Range{2, 4}, Range{0, 2}}) {
    add_range(concat, rows, true);
    add_range(concat, Range{0, 3}, true);
  }
  const int64_t doubled = b.reg(0, "doubled", Shape{2, 3});
  b.task(0, "add", Kind::ADD, {top, top, bottom}, {doubled});
  const int64_t copied = b.reg(0, "copied", Shape{6});
  b.task(0, "copy", Kind::COPY, {doubled}, {copied});
  const int64_t zeros = b.reg(0, "zeros", Shape{2, 2});
  b.task(0, "zeros", Kind::ZEROS, {}, {zeros});
  b.output(0, "swapped", swapped, Shape{4, 3});
  b.output(0, "copied", copied, Shape{6});
  b.output(0, "zeros", zeros, Shape{2, 2});

  const Tensor xs =
      make_tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Shape{4, 3}, DataType::kFloat32);
  const auto out = run_everywhere(b.plan(), {{"x", xs}});
  EXPECT_EQ(values_of(out.at("swapped")),
            (std::vector<double>{6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values_of(out.at("copied")), (std::vector<double>{6, 9, 12, 15, 18, 21}));
  EXPECT_EQ(values_of(out.at("zeros")), (std::vector<double>{0, 0, 0, 0}));
}

// The protocol of a transfer. A large piece: SEND announces the address of its input slot to
// the RECV on rank 1; the RECV acknowledges after reading; only then does the SEND acknowledge
// its input to relu. A small one (Note [Small transfers travel with their message]): the
// announcement carries the data, the RECV acknowledges nothing, and the SEND releases its input
// as soon as it has announced it.
TEST(Runtime, SendAndReceiveMoveARegisterBetweenRanksThroughTheTransport) {
  for (const int64_t rows : {int64_t{2}, int64_t{512}}) {  // 24 bytes, 6 KiB
    SCOPED_TRACE(str_cat(rows, " rows"));
    const Shape shape{rows, 3};
    const bool small = shape.numel() * 4 <= static_cast<int64_t>(comm::kInlineTransferBytes);
    PlanBuilder b(2);
    const int64_t x = b.input(0, "x", shape);
    const int64_t y = b.reg(0, "y", shape);
    b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
    auto [recv, received] = b.send_recv(0, 1, y, /*transfer_id=*/7);
    const int64_t z = b.reg(1, "z", shape);
    b.compute(1, "neg", "neg", NoParams{}, {received}, {z});
    b.output(1, "z", z, shape);
    std::vector<double> xv, want;
    for (int64_t i = 0; i < shape.numel(); ++i) {
      xv.push_back(i % 2 ? double(i) : -double(i));
      want.push_back(-std::max(xv.back(), 0.0));
    }
    const Tensor xs = make_tensor(xv, shape, DataType::kFloat32);
    const auto out = run_everywhere(b.plan(), {{"x", xs}}, /*iterations=*/3);
    EXPECT_EQ(values_of(out.at("z")), want);

    RuntimeOptions options = deterministic();
    options.record_messages = true;
    Runtime runtime(b.plan(), options);
    runtime.run({{"x", xs}});
    const std::vector<std::string>& log = runtime.message_log();
    auto find = [&](const std::string& pattern) -> int64_t {
      const std::regex re(pattern);
      auto it = std::find_if(log.begin(), log.end(),
                             [&](const std::string& m) { return std::regex_search(m, re); });
      return it == log.end() ? -1 : it - log.begin();
    };
    // Note [Transfer actor ids]: both ends are addressed by the transfer id.
    const int64_t send_id = kSendActorBase + 7, recv_id = kRecvActorBase + 7;
    const int64_t announce = find(str_cat("register_ready\\{.* src_rank=0 src_actor=", send_id,
                                          " dst_rank=1 dst_actor=", recv_id, " .*address=[1-9]"));
    const int64_t received_ack = find(str_cat("register_ack\\{.* src_rank=1 src_actor=", recv_id,
                                              " dst_rank=0 dst_actor=", send_id));
    const int64_t released = find(str_cat("register_ack\\{.* src_actor=", send_id,
                                          " dst_rank=0 dst_actor=[0-9]+ register_id=", y, " "));
    ASSERT_GE(announce, 0);
    ASSERT_GE(released, 0);
    if (small) {
      EXPECT_EQ(received_ack, -1) << "a small transfer is not acknowledged";
    } else {
      EXPECT_LT(announce, received_ack);
      EXPECT_LT(received_ack, released);
    }
  }
}

// Note [Slice views]: a view's consumers read the input's bytes in place, and the input is
// released only after every one of them (here two, one a SEND to another rank) is done: with one
// slot for x, a view that never released it, or released it twice, would stop the second
// iteration (or trip the protocol's checks).
TEST(Runtime, SliceViewsReadTheInputInPlaceAndReleaseItOnceTheirConsumersAreDone) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t top = b.reg(0, "top", Shape{2, 3});
  const int64_t row = b.reg(0, "row", Shape{1, 3});
  proto::TaskProto* slice_top = b.task(0, "slice_top", Kind::SLICE, {x}, {top});
  add_range(slice_top, Range{0, 2}, false);
  add_range(slice_top, Range{0, 3}, false);
  slice_top->set_view(true);
  // A view of a view: row 1 of `top`.
  proto::TaskProto* slice_row = b.task(0, "slice_row", Kind::SLICE, {top}, {row});
  add_range(slice_row, Range{1, 2}, false);
  add_range(slice_row, Range{0, 3}, false);
  slice_row->set_view(true);
  const int64_t relu_top = b.reg(0, "relu_top", Shape{2, 3});
  b.compute(0, "relu", "relu", NoParams{}, {top}, {relu_top});
  b.output(0, "relu_top", relu_top, Shape{2, 3});
  auto [recv, received] = b.send_recv(0, 1, row, /*transfer_id=*/3);
  b.output(1, "row", received, Shape{1, 3});
  const int64_t neg_x = b.reg(0, "neg_x", Shape{4, 3});
  b.compute(0, "neg", "neg", NoParams{}, {x}, {neg_x});
  b.output(0, "neg_x", neg_x, Shape{4, 3});

  const Tensor xs =
      make_tensor({-1, 2, -3, 4, -5, 6, 7, -8, 9, 10, 11, -12}, Shape{4, 3}, DataType::kFloat32);
  const auto out = run_everywhere(b.plan(), {{"x", xs}}, /*iterations=*/3);
  EXPECT_EQ(values_of(out.at("relu_top")), (std::vector<double>{0, 2, 0, 4, 0, 6}));
  EXPECT_EQ(values_of(out.at("row")), (std::vector<double>{4, -5, 6}));
  EXPECT_EQ(values_of(out.at("neg_x")),
            (std::vector<double>{1, -2, 3, -4, 5, -6, -7, 8, -9, -10, -11, 12}));

  // The outer view acknowledges x to its INPUT once, and only after the SEND has released the
  // inner view.
  RuntimeOptions options = deterministic();
  options.record_messages = true;
  Runtime runtime(b.plan(), options);
  runtime.run({{"x", xs}});
  const std::vector<std::string>& log = runtime.message_log();
  int acks_of_x = 0;
  size_t last_ack_of_x = 0, send_released_row = 0;
  const std::regex ack_of_x(
      str_cat("register_ack\\{.* src_actor=", slice_top->id(), " .* register_id=", x, " "));
  const std::regex release_of_row(
      str_cat("register_ack\\{.* src_actor=", kSendActorBase + 3, " .* register_id=", row, " "));
  for (size_t i = 0; i < log.size(); ++i) {
    if (std::regex_search(log[i], ack_of_x)) {
      ++acks_of_x;
      last_ack_of_x = i;
    }
    if (std::regex_search(log[i], release_of_row)) send_released_row = i;
  }
  EXPECT_EQ(acks_of_x, 1);
  EXPECT_GT(send_released_row, 0u);
  EXPECT_GT(last_ack_of_x, send_released_row);
}

// Note [Concats in place]: the pieces' producers write into the output; the CONCAT keeps every
// piece until the output's readers are done, so a producer's next piece (next iteration) cannot
// overwrite what they read. One piece is also sent to another rank, one is a RECV's.
TEST(Runtime, ConcatsInPlaceHaveTheirPiecesWrittenIntoTheOutputAndKeepThemUntilItIsRead) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{2, 3});
  const int64_t top = b.reg(0, "top", Shape{2, 3});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {top});
  const int64_t x1 = b.input(1, "x1", Shape{1, 3});
  auto [recv, bottom] = b.send_recv(1, 0, x1, /*transfer_id=*/4);
  auto [recv_top, top_on_1] = b.send_recv(0, 1, top, /*transfer_id=*/5);
  b.output(1, "top_on_1", top_on_1, Shape{2, 3});
  const int64_t both = b.reg(0, "both", Shape{3, 3});
  proto::TaskProto* concat = b.task(0, "concat", Kind::CONCAT, {top, bottom}, {both});
  for (Range rows : {Range{0, 2}, Range{2, 3}}) {
    add_range(concat, rows, true);
    add_range(concat, Range{0, 3}, true);
  }
  concat->set_in_place(true);
  const int64_t neg = b.reg(0, "neg", Shape{3, 3});
  b.compute(0, "neg", "neg", NoParams{}, {both}, {neg});
  b.output(0, "neg", neg, Shape{3, 3});
  b.output(0, "both", both, Shape{3, 3});

  const Tensor xs = make_tensor({-1, 2, -3, 4, -5, 6}, Shape{2, 3}, DataType::kFloat32);
  const Tensor x1s = make_tensor({7, 8, 9}, Shape{1, 3}, DataType::kFloat32);
  const auto out = run_everywhere(b.plan(), {{"x", xs}, {"x1", x1s}}, /*iterations=*/3);
  EXPECT_EQ(values_of(out.at("both")), (std::vector<double>{0, 2, 0, 4, 0, 6, 7, 8, 9}));
  EXPECT_EQ(values_of(out.at("neg")), (std::vector<double>{0, -2, 0, -4, 0, -6, -7, -8, -9}));
  EXPECT_EQ(values_of(out.at("top_on_1")), (std::vector<double>{0, 2, 0, 4, 0, 6}));

  // The pieces are acknowledged to their producers only after both readers of the output.
  RuntimeOptions options = deterministic();
  options.record_messages = true;
  Runtime runtime(b.plan(), options);
  runtime.run({{"x", xs}, {"x1", x1s}});
  const std::vector<std::string>& log = runtime.message_log();
  auto last = [&](const std::string& pattern) {
    const std::regex re(pattern);
    int64_t at = -1;
    for (size_t i = 0; i < log.size(); ++i) {
      if (std::regex_search(log[i], re)) at = static_cast<int64_t>(i);
    }
    EXPECT_GE(at, 0) << pattern;
    return at;
  };
  const int64_t both_read = last(str_cat("register_ack\\{.* register_id=", both, " "));
  EXPECT_GT(
      last(str_cat("register_ack\\{.* src_actor=", concat->id(), " .* register_id=", top, " ")),
      both_read);
  EXPECT_GT(
      last(str_cat("register_ack\\{.* src_actor=", concat->id(), " .* register_id=", bottom, " ")),
      both_read);
}

TEST(Runtime, RejectsConcatsInPlaceWhosePiecesDoNotTileTheOutputInRuns) {
  auto plan_with = [](std::vector<std::pair<Range, Range>> regions, Shape out_shape) {
    PlanBuilder b(1);
    const int64_t x = b.input(0, "x", Shape{2, 2});
    const int64_t y = b.input(0, "y", Shape{2, 2});
    const int64_t both = b.reg(0, "both", out_shape);
    proto::TaskProto* concat = b.task(0, "concat", Kind::CONCAT, {x, y}, {both});
    for (const auto& [rows, cols] : regions) {
      add_range(concat, rows, true);
      add_range(concat, cols, true);
    }
    concat->set_in_place(true);
    b.output(0, "both", both, out_shape);
    return b.plan();
  };
  // Side by side: each piece is two runs of the (2, 4) output.
  expect_error(
      [&] {
        Runtime r(plan_with({{{0, 2}, {0, 2}}, {{0, 2}, {2, 4}}}, Shape{2, 4}), deterministic());
      },
      ErrorCode::kInvalidArgument, "must be one contiguous run of its output (2, 4)");
  // Rows 0-1 and 3-4 of (5, 2): row 2 is left out.
  expect_error(
      [&] {
        Runtime r(plan_with({{{0, 2}, {0, 2}}, {{3, 5}, {0, 2}}}, Shape{5, 2}), deterministic());
      },
      ErrorCode::kInvalidArgument, "must cover its output (5, 2) exactly once");
  // Stacked: accepted.
  Runtime ok(plan_with({{{0, 2}, {0, 2}}, {{2, 4}, {0, 2}}}, Shape{4, 2}), deterministic());
}

// A view's region must be one run of its input's memory; the plan is refused otherwise.
TEST(Runtime, RejectsAViewOfANonContiguousRegion) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t left = b.reg(0, "left", Shape{4, 2});
  proto::TaskProto* slice = b.task(0, "slice_left", Kind::SLICE, {x}, {left});
  add_range(slice, Range{0, 4}, false);
  add_range(slice, Range{0, 2}, false);
  slice->set_view(true);
  b.output(0, "left", left, Shape{4, 2});
  expect_error([&] { Runtime runtime(b.plan(), deterministic()); }, ErrorCode::kInvalidArgument,
               "is a view, so its region must be one contiguous run of its input (4, 3)");
}

// A view keeps its input piece until its readers are done, one piece per act: a REPEAT handing
// a once-per-iteration view to each micro-batch (a crossing the plan otherwise allows) is
// refused, naming both tasks.
TEST(Runtime, RejectsAViewWhoseReaderActsAtAnotherRate) {
  PlanBuilder b(1);
  b.set_micro_batches(2);
  const int64_t x = b.input(0, "x", Shape{4, 3});
  const int64_t top = b.reg(0, "top", Shape{2, 3});
  proto::TaskProto* slice = b.task(0, "slice_top", Kind::SLICE, {x}, {top});
  add_range(slice, Range{0, 2}, false);
  add_range(slice, Range{0, 3}, false);
  slice->set_view(true);
  const int64_t each = b.micro_task(0, "repeat", Kind::REPEAT, top, Shape{2, 3});
  const int64_t sum = b.micro_task(0, "accumulate", Kind::ACCUMULATE, each, Shape{2, 3});
  b.output(0, "sum", sum, Shape{2, 3});
  expect_error([&] { Runtime runtime(b.plan(), deterministic()); }, ErrorCode::kInvalidArgument,
               "task 'slice_top' (id 3, rank 0, SLICE) is a view, so the reader task 'repeat'");
}

// Note [Micro-batches] in plan.proto: UNPACK hands micro-batch k of the whole batch, REPEAT a
// once value to each micro-batch, ACCUMULATE sums over them and PACK stacks them. A REPEAT that
// is a view (Note [Repeated views]) hands the variable itself to every micro-batch and lets it
// go after the last one: the same values over several iterations, on every executor; one whose
// variable's in-place writer does not wait for its readers is refused when the plan loads.
TEST(Runtime, MicroBatchActorsUnpackRepeatAccumulateAndPack) {
  for (const bool view : {false, true}) {
    SCOPED_TRACE(view ? "REPEAT view" : "REPEAT copy");
    PlanBuilder b(1);
    b.set_micro_batches(3);
    const int64_t x = b.batched_input(0, "x", Shape{2, 2});  // (3 * 2, 2)
    const int64_t piece = b.micro_task(0, "unpack", Kind::UNPACK, x, Shape{2, 2});
    const int64_t w = b.variable(0, "w", Shape{2, 2}, {}, proto::InitializerProto::CONSTANT, 2.0);
    const int64_t w_each = b.micro_task(0, "repeat", Kind::REPEAT, w, Shape{2, 2});
    b.find_task_of(w_each)->set_view(view);
    const int64_t product = b.reg(0, "product", Shape{2, 2});
    b.compute(0, "mul", "mul", NoParams{}, {piece, w_each}, {product})->set_per_micro_batch(true);
    const int64_t sum = b.micro_task(0, "accumulate", Kind::ACCUMULATE, product, Shape{2, 2});
    const int64_t stacked = b.micro_task(0, "pack", Kind::PACK, product, Shape{3, 2, 2});
    b.output(0, "sum", sum, Shape{2, 2});
    b.output(0, "stacked", stacked, Shape{3, 2, 2});

    std::vector<double> xv(12);
    for (int i = 0; i < 12; ++i) xv[i] = i;
    const Tensor fed = make_tensor(xv, Shape{6, 2}, DataType::kFloat32);
    std::vector<double> twice;
    for (double v : xv) twice.push_back(2 * v);
    for (int iteration = 0; iteration < 2; ++iteration) {
      const auto out = run_everywhere(b.plan(), {{"x", fed}});
      // Micro-batch k holds rows 2k, 2k + 1: the sum of 2 * x over k.
      EXPECT_EQ(values_of(out.at("sum")), (std::vector<double>{24, 30, 36, 42}));
      EXPECT_EQ(values_of(out.at("stacked")), twice);
    }
    for (const RuntimeOptions& options : {threaded(), deterministic()}) {
      Runtime runtime(b.plan(), options);
      runtime.initialize_variables();
      for (int iteration = 0; iteration < 3; ++iteration) {
        EXPECT_EQ(values_of(runtime.run({{"x", fed}}).at("sum")),
                  (std::vector<double>{24, 30, 36, 42}));
      }
    }
    if (!view) continue;
    // The variable written in place by a task that does not wait for the view's reader.
    const int64_t w_new = b.reg(0, "w_new", Shape{2, 2});
    b.compute(0, "update", "relu", NoParams{}, {w}, {w_new})->add_mutated_inputs(0);
    expect_error([&] { Runtime runtime(b.plan(), deterministic()); }, ErrorCode::kInvalidArgument,
                 "which writes it in place, must wait for every reader of the view. However, it "
                 "does not wait for task 'mul'");
  }
}

// Note [Fetched pieces are handed over] and Note [Fed pieces are handed in]: a run fed by pieces
// computes on the caller's piece itself (not a copy) and hands back new memory that later runs
// never write (the first result keeps its values); a whole fed tensor is copied into new memory.
TEST(Runtime, FedPiecesAreHandedInAndFetchedPiecesHandedOver) {
  for (const RuntimeOptions& options : {threaded(), deterministic()}) {
    PlanBuilder b(1);
    const int64_t x = b.input(0, "x", Shape{4});
    const int64_t y = b.reg(0, "y", Shape{4});
    b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
    b.output(0, "y", y, Shape{4});
    b.find(x)->set_handed_in(true);
    b.find(y)->set_fresh_each_piece(true);
    Runtime runtime(b.plan(), options);
    const Tensor first_in = make_tensor({-1, 2, -3, 4}, Shape{4}, DataType::kFloat32);
    const Tensor first = runtime.run_local({{"x", {{0, first_in}}}}).at("y").at(0);
    EXPECT_EQ(values_of(first), (std::vector<double>{0, 2, 0, 4}));
    const Tensor second =
        runtime.run_local({{"x", {{0, make_tensor({5, -6, 7, -8}, Shape{4}, DataType::kFloat32)}}}})
            .at("y")
            .at(0);
    EXPECT_EQ(values_of(second), (std::vector<double>{5, 0, 7, 0}));
    EXPECT_EQ(values_of(first), (std::vector<double>{0, 2, 0, 4})) << "a later run wrote it";
    EXPECT_NE(first.raw_data(), second.raw_data());
    EXPECT_EQ(values_of(first_in), (std::vector<double>{-1, 2, -3, 4}));
    // A whole tensor (run) is copied into new memory of the register's shape.
    const auto whole =
        runtime.run({{"x", make_tensor({1, -1, 1, -1}, Shape{4}, DataType::kFloat32)}});
    EXPECT_EQ(values_of(whole.at("y")), (std::vector<double>{1, 0, 1, 0}));
  }
}

// Note [Donated pieces]: a donating input's piece is the register, and the fetched view of it
// is that memory itself (not a copy), which a later run does not write. (Written in place by
// an all-reduce: tests/python/dist/collectives_worker.py.)
TEST(Runtime, DonatedPiecesAreHandedBackAsTheyAre) {
  for (const RuntimeOptions& options : {threaded(), deterministic()}) {
    PlanBuilder b(1);
    const int64_t x = b.input(0, "x", Shape{2, 2});
    const int64_t flat = b.reg(0, "flat", Shape{4});
    b.task(0, "flatten", proto::TaskProto::COPY, {x}, {flat})->set_view(true);
    b.output(0, "flat", flat, Shape{4});
    b.find_task_of(x)->set_donates(true);
    b.find(x)->set_handed_in(true);
    b.find(x)->set_donated(true);
    b.find(flat)->set_donated(true);
    Runtime runtime(b.plan(), options);
    const Tensor first_in = make_tensor({-1, 2, -3, 4}, Shape{2, 2}, DataType::kFloat32);
    const Tensor first = runtime.run_local({{"x", {{0, first_in}}}}).at("flat").at(0);
    EXPECT_EQ(first.raw_data(), first_in.raw_data());
    EXPECT_EQ(first.shape(), Shape{4});
    const Tensor second_in = make_tensor({5, -6, 7, -8}, Shape{2, 2}, DataType::kFloat32);
    const Tensor second = runtime.run_local({{"x", {{0, second_in}}}}).at("flat").at(0);
    EXPECT_EQ(second.raw_data(), second_in.raw_data());
    EXPECT_EQ(values_of(first), (std::vector<double>{-1, 2, -3, 4})) << "a later run wrote it";
    // Without the flags the fetch is a copy: the same plan, not donating.
    b.find_task_of(x)->set_donates(false);
    b.find(x)->set_handed_in(false);
    b.find(x)->set_donated(false);
    b.find(flat)->set_donated(false);
    Runtime copying(b.plan(), options);
    const Tensor copied = copying.run_local({{"x", {{0, first_in}}}}).at("flat").at(0);
    EXPECT_NE(copied.raw_data(), first_in.raw_data());
    EXPECT_EQ(values_of(copied), (std::vector<double>{-1, 2, -3, 4}));
    // A donated register must be the caller's memory: a view of the plan's memory (x not
    // donated) or a copy's output is the plan's.
    b.find(flat)->set_donated(true);
    for (bool view : {true, false}) {
      b.find_task_of(flat)->set_view(view);
      try {
        Runtime refused(b.plan(), options);
        ADD_FAILURE() << "a donated register of the plan's memory was loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is donated, so it must be a donating INPUT's "
                                             "handed-in register or a view of a donated"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// Note [One OpenMP pool at a time]: the thread that waits for a run gives back its OpenMP
// workers (two pools on two cores would make every worker sleep between kernels).
TEST(Runtime, ARunGivesBackTheCallersKernelThreads) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{4});
  const int64_t y = b.reg(0, "y", Shape{4});
  b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  b.output(0, "y", y, Shape{4});
  const std::map<std::string, Tensor> feed = {
      {"x", random_tensor(Shape{4}, DataType::kFloat32, 3)}};
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  Runtime runtime(b.plan(), threaded());
  runtime.run(feed);  // the runtime's own threads are up
  std::atomic<int> ran{0};
#pragma omp parallel
  ran.fetch_add(1);  // the caller's pool: one worker
  ASSERT_EQ(ran.load(), 2);
  const int with_pool = process_threads();
  runtime.run(feed);  // a 4-element relu runs on one thread: its thread makes no pool
  EXPECT_EQ(process_threads(), with_pool - 1);
  omp_set_num_threads(threads);
}

// A deliberate cycle: a reads b's register and b reads a's. The plan check rejects it at load;
// with the check off, the watchdog stops the run and names the cycle.
proto::PlanProto cycle_plan() {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{2});
  const int64_t a_out = b.reg(0, "a_out", Shape{2});
  const int64_t b_out = b.reg(1, "b_out", Shape{2});
  const int64_t back = b.reg(0, "back", Shape{2});
  b.compute(0, "task_a", "add", NoParams{}, {x, back}, {a_out});
  auto [recv, there] = b.send_recv(0, 1, a_out, /*transfer_id=*/1);
  b.compute(1, "task_b", "relu", NoParams{}, {there}, {b_out});
  auto [recv_back, here] = b.send_recv(1, 0, b_out, /*transfer_id=*/2);
  // Route b's answer into the register task_a reads.
  proto::RegisterProto* reg = b.find(back);
  reg->set_producer(recv_back->id());
  recv_back->set_outputs(0, back);
  b.find(here)->set_producer(-1);
  b.output(0, "y", a_out, Shape{2});
  proto::PlanProto plan = b.plan();
  // Drop the now unused register `here`.
  auto* regs = plan.mutable_ranks(0)->mutable_registers();
  for (int i = 0; i < regs->size(); ++i) {
    if (regs->Get(i).id() == here) {
      regs->DeleteSubrange(i, 1);
      break;
    }
  }
  return plan;
}

TEST(Runtime, WatchdogNamesTheCycleThatStopsARun) {
  const proto::PlanProto plan = cycle_plan();
  expect_error([&] { Runtime runtime(plan, threaded()); }, ErrorCode::kFailedPrecondition,
               "can never act");
  const std::map<std::string, Tensor> feed = {{"x", Tensor::zeros(Shape{2}, DataType::kFloat32)}};
  for (const char* mode : {"deterministic", "threaded", "caller-run"}) {
    SCOPED_TRACE(mode);
    RuntimeOptions options = std::string(mode) == "deterministic" ? deterministic() : threaded();
    options.caller_runs = std::string(mode) == "caller-run";
    options.check_acyclic = false;
    options.watchdog_seconds = 0.3;
    Runtime runtime(plan, options);
    try {
      runtime.run(feed);
      ADD_FAILURE() << "the run should stop";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << what;
      EXPECT_NE(what.find("Cycle:"), std::string::npos) << what;
      for (const char* name : {"task_a", "task_b", "send_1", "recv_1", "send_2", "recv_2"}) {
        EXPECT_NE(what.find(str_cat("'", name, "'")), std::string::npos) << name << ": " << what;
      }
      EXPECT_NE(what.find("waits for a ready register 'back'"), std::string::npos) << what;
    }
    expect_error([&] { runtime.run(feed); }, ErrorCode::kFailedPrecondition,
                 "stopped after an error");
  }
}

// Rank 0 runs a slow chain of matmuls and then an INPUT that waits for it; rank 1's kernel
// fails at once (a label out of range).
proto::PlanProto slow_and_failing_plan() {
  PlanBuilder b(2);
  const int n = 256;
  int64_t h = b.input(0, "x", Shape{n, n});
  proto::TaskProto* last = nullptr;
  for (int i = 0; i < 12; ++i) {
    const int64_t next = b.reg(0, str_cat("h", i), Shape{n, n});
    last = b.compute(0, str_cat("matmul", i), "matmul", MatmulParams{}, {h, h}, {next});
    h = next;
  }
  b.output(0, "h", h, Shape{n, n});
  const int64_t late = b.input(0, "late", Shape{4});
  b.output(0, "late", late, Shape{4});
  const int64_t logits = b.input(1, "logits", Shape{2, 3});
  const int64_t labels = b.input(1, "labels", Shape{2}, {}, DataType::kInt64);
  const int64_t loss = b.reg(1, "loss", Shape{2});
  b.compute(1, "cross_entropy", "sparse_softmax_cross_entropy", NoParams{}, {logits, labels},
            {loss});
  b.output(1, "loss", loss, Shape{2});
  proto::PlanProto plan = b.plan();
  for (auto& task : *plan.mutable_ranks(0)->mutable_tasks()) {
    if (task.name() == "input_late") task.add_control_inputs(last->id());
  }
  return plan;
}

TEST(Runtime, AKernelErrorEndsTheRunNamingTheTaskAndStopsEveryThread) {
  const int n = 256;
  auto feed = [&](double label) {
    return std::map<std::string, Tensor>{
        {"x", Tensor::zeros(Shape{n, n}, DataType::kFloat32)},
        {"late", Tensor::zeros(Shape{4}, DataType::kFloat32)},
        {"logits", Tensor::zeros(Shape{2, 3}, DataType::kFloat32)},
        {"labels", make_tensor({0, label}, Shape{2}, DataType::kInt64)}};
  };
  for (bool serial : {true, false}) {
    RuntimeOptions options = serial ? deterministic() : threaded();
    options.trace = true;
    Runtime runtime(slow_and_failing_plan(), options);
    runtime.run(feed(1));
    runtime.take_acts();
    expect_error([&] { runtime.run(feed(7)); }, ErrorCode::kOutOfRange,
                 "rank 1, COMPUTE sparse_softmax_cross_entropy) in iteration 1 failed: "
                 "[sparse_softmax_cross_entropy] every label must be in [0, C)");
    // Every thread has stopped: nothing acts on after run() threw (the caller's feed is gone).
    const size_t at_throw = runtime.take_acts().size();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(runtime.take_acts().size(), 0u) << at_throw << " acts before the throw";
    expect_error([&] { runtime.run(feed(1)); }, ErrorCode::kFailedPrecondition,
                 "stopped after an error");
  }
}

TEST(Runtime, BadFeedsAreRefusedBeforeAnyActorActs) {
  PlanBuilder b(2);
  const int64_t x = b.input(1, "x", Shape{2, 3});
  const int64_t y = b.reg(1, "y", Shape{2, 3});
  b.compute(1, "relu", "relu", NoParams{}, {x}, {y});
  b.output(1, "y", y, Shape{2, 3});
  for (bool serial : {true, false}) {
    Runtime runtime(b.plan(), serial ? deterministic() : threaded());
    expect_error([&] { runtime.run({}); }, ErrorCode::kInvalidArgument, "needs input 'x'");
    expect_error(
        [&] {
          runtime.run({{"x", Tensor::zeros(Shape{3, 3}, DataType::kFloat32)}});
        },
        ErrorCode::kInvalidArgument, "input 'x' must have shape (2, 3)");
    expect_error(
        [&] {
          runtime.run({{"x", Tensor::zeros(Shape{2, 3}, DataType::kFloat64)}});
        },
        ErrorCode::kTypeError, "input 'x' must have dtype float32");
    expect_error(
        [&] {
          runtime.run({{"x", Tensor::zeros(Shape{2, 3}, DataType::kFloat32)},
                       {"z", Tensor::zeros(Shape{2, 3}, DataType::kFloat32)}});
        },
        ErrorCode::kInvalidArgument, "got 'z', which no INPUT task takes");
    // Still usable.
    EXPECT_EQ(
        values_of(
            runtime
                .run({{"x", make_tensor({-1, 2, -3, 4, -5, 6}, Shape{2, 3}, DataType::kFloat32)}})
                .at("y")),
        (std::vector<double>{0, 2, 0, 4, 0, 6}));
  }
}

// A kernel's outputs are its task's outputs in order, whatever order the registers are listed.
TEST(Runtime, KernelOutputsFollowTheTasksOutputOrder) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", Shape{2, 4});
  const int64_t w = b.input(0, "w", Shape{4});
  const int64_t bias = b.input(0, "b", Shape{4});
  const int64_t inv_std = b.reg(0, "inv_std", Shape{2});
  const int64_t mean = b.reg(0, "mean", Shape{2});
  const int64_t y = b.reg(0, "y", Shape{2, 4});
  b.compute(0, "layer_norm", "layer_norm", LayerNormParams{1, 1e-5}, {x, w, bias},
            {y, mean, inv_std});
  b.output(0, "y", y, Shape{2, 4});
  b.output(0, "mean", mean, Shape{2});
  const auto out = run_everywhere(
      b.plan(), {{"x", make_tensor({1, 2, 3, 4, 5, 7, 9, 11}, Shape{2, 4}, DataType::kFloat32)},
                 {"w", make_tensor({1, 1, 1, 1}, Shape{4}, DataType::kFloat32)},
                 {"b", make_tensor({0, 0, 0, 0}, Shape{4}, DataType::kFloat32)}});
  EXPECT_EQ(values_of(out.at("mean")), (std::vector<double>{2.5, 8}));
}

// A SEND with a control input keeps only its data input until the RECV has read it.
TEST(Runtime, SendWithAControlInputReleasesEachInputOnce) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{2});
  const int64_t y = b.reg(0, "y", Shape{2});
  proto::TaskProto* relu = b.compute(0, "relu", "relu", NoParams{}, {x}, {y});
  b.output(0, "y", y, Shape{2});
  auto [recv, z] = b.send_recv(0, 1, x, /*transfer_id=*/5);
  b.output(1, "z", z, Shape{2});
  proto::PlanProto plan = b.plan();
  for (auto& task : *plan.mutable_ranks(0)->mutable_tasks()) {
    if (task.kind() == proto::TaskProto::SEND) task.add_control_inputs(relu->id());
  }
  run_everywhere(plan, {{"x", make_tensor({1, -2}, Shape{2}, DataType::kFloat32)}},
                 /*iterations=*/3);
}

TEST(Runtime, RejectsOptionsAndPlansItCannotRun) {
  PlanBuilder b(1);
  const int64_t w = b.variable(0, "w", Shape{2}, {}, proto::InitializerProto::ONES);
  b.output(0, "w", w, Shape{2});
  RuntimeOptions options = threaded();
  options.record_messages = true;
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "record_messages needs deterministic mode");
  options = threaded();
  options.ranks = {0, 0};
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "host each rank once");
  options = threaded();
  options.watchdog_seconds = 0;
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "watchdog_seconds must be positive");
  options = threaded();
  options.ranks = {3};
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "host ranks of its plan. However, got rank 3");
  options = deterministic();
  options.caller_runs = true;
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "caller_runs and deterministic are two modes");
  options = threaded();
  options.caller_runs = true;
  options.async_cpu_streams = true;
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "caller_runs runs host tasks at their acts");
  b.find(w)->set_register_num(2);
  expect_error([&] { Runtime runtime(b.plan(), threaded()); }, ErrorCode::kInvalidArgument,
               "must write a register of one slot");
}

TEST(Runtime, RejectsRegistersOutsideTheirMemoryBlock) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{4});
  b.output(0, "x", x, Shape{4});
  b.output(1, "y", b.input(1, "y", Shape{2}), Shape{2});
  RuntimeOptions options = threaded();
  options.ranks = {0};
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kUnimplemented,
               "must host every rank of the plan it loads");
  proto::PlanProto plan = b.plan();
  plan.mutable_ranks(0)->mutable_registers(0)->set_memory_block(0);
  expect_error([&] { Runtime runtime(plan, threaded()); }, ErrorCode::kInvalidArgument,
               "must be in a memory block of its rank. However, rank 0 has no block 0");
  proto::MemoryBlockProto* block = plan.mutable_ranks(0)->add_memory_blocks();
  block->set_id(0);
  block->set_bytes(8);  // x needs 16
  expect_error([&] { Runtime runtime(plan, threaded()); }, ErrorCode::kInvalidArgument,
               "must lie inside memory block 0 (8 bytes). However, it takes bytes [0, 16)");
  block->set_bytes(16);
  Runtime fits(plan, threaded());
  EXPECT_EQ(values_of(fits.run({{"x", make_tensor({1, 2, 3, 4}, Shape{4}, DataType::kFloat32)},
                                {"y", Tensor::zeros(Shape{2}, DataType::kFloat32)}})
                          .at("x")),
            (std::vector<double>{1, 2, 3, 4}));
}

// A constructor that fails (rank 1 already served by someone else) leaves nothing behind.
TEST(Runtime, AFailedConstructorReleasesTheRanksItServed) {
  PlanBuilder b(2);
  b.output(0, "x", b.input(0, "x", Shape{2}), Shape{2});
  b.output(1, "w", b.input(1, "w", Shape{2}), Shape{2});
  auto transport = std::make_shared<comm::InProcessTransport>();
  transport->serve_rank(1, [](const comm::MessageBytes&) {});
  RuntimeOptions options = threaded();
  options.transport = transport;
  expect_error([&] { Runtime runtime(b.plan(), options); }, ErrorCode::kInvalidArgument,
               "rank 1 is served already");
  transport->serve_rank(0, [](const comm::MessageBytes&) {});  // free again: does not throw
}

// x on rank 0 sent to rank 1 and fetched there as y.
proto::PlanProto transfer_plan() {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", Shape{2});
  const int64_t y = b.send_recv(0, 1, x, /*transfer_id=*/3).second;
  b.output(1, "y", y, Shape{2});
  return b.plan();
}

std::map<std::string, Tensor> transfer_feed() {
  return {{"x", Tensor::zeros(Shape{2}, DataType::kFloat32)}};
}

TEST(Runtime, TraceRecordsEveryActInChromeTraceFormat) {
  RuntimeOptions options = threaded();
  options.trace = true;
  Runtime runtime(transfer_plan(), options);
  runtime.run(transfer_feed());
  runtime.run(transfer_feed());
  const std::string json = runtime.chrome_trace();
  EXPECT_EQ(json.rfind("{\"traceEvents\":[", 0), 0u);
  // 4 tasks and 2 ticks act twice.
  const std::regex act("\"ph\":\"X\"");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(json.begin(), json.end(), act), std::sregex_iterator()),
      12);
  for (const char* name : {"input_x", "send_3", "recv_3", "output_y@1"}) {
    EXPECT_NE(json.find(str_cat("\"name\":\"", name, "\"")), std::string::npos) << name;
  }
  EXPECT_NE(json.find("\"iteration\":1"), std::string::npos);
  EXPECT_EQ(runtime.chrome_trace().find("\"ph\":\"X\""), std::string::npos);  // taken
}

TEST(Runtime, EndOfStreamRetiresEveryActorAndStopsTheThreads) {
  RuntimeOptions options = deterministic();
  options.record_messages = true;
  Runtime runtime(transfer_plan(), options);
  runtime.run(transfer_feed());
  const size_t before = runtime.message_log().size();
  EXPECT_TRUE(runtime.shutdown());
  // One end per edge: run() -> 2 ticks, tick -> input_x, input_x -> send, send -> recv,
  // recv -> output.
  const auto& log = runtime.message_log();
  EXPECT_EQ(std::count_if(log.begin() + before, log.end(),
                          [](const std::string& m) { return m.rfind("end_of_stream", 0) == 0; }),
            6);
  expect_error([&] { runtime.run({}); }, ErrorCode::kFailedPrecondition, "shut down");

  Runtime on_threads(transfer_plan(), threaded());
  on_threads.run(transfer_feed());
  EXPECT_TRUE(on_threads.shutdown());
}

}  // namespace
}  // namespace ofl::actor
