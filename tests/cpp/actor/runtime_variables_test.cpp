// A runtime's variables (actor/runtime_variables.cpp): persistent across iterations, read and
// written between them, and Note [Variables bound to the caller's tensors]: the caller's
// tensors updated in place, and every case where a variable keeps memory of its own instead.

#include <gtest/gtest.h>

#include "actor/runtime.h"
#include "oneflowlike/ops/optimizer.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using ofl::testing::expect_error;
using ofl::testing::make_tensor;
using ofl::testing::PlanBuilder;
using ofl::testing::values_of;
using Kind = proto::TaskProto;

// w and m updated in place by SGD (sgd_update mutates its first and third inputs), w read
// before the update (snapshot).
PlanBuilder sgd_plan(double momentum) {
  PlanBuilder b(1);
  const int64_t w = b.variable(0, "w", Shape{3}, {}, proto::InitializerProto::ONES);
  const int64_t g = b.input(0, "g", Shape{3});
  const int64_t lr = b.input(0, "lr", Shape{});
  const int64_t snapshot = b.reg(0, "snapshot", Shape{3});
  proto::TaskProto* copy = b.task(0, "copy", Kind::COPY, {w}, {snapshot});
  b.output(0, "w_before", snapshot, Shape{3});
  const int64_t m = b.variable(0, "m", Shape{3}, {}, proto::InitializerProto::ZEROS);
  SgdParams params;
  params.momentum = momentum;
  proto::TaskProto* update = b.compute(0, "sgd", "sgd_update", params, {w, g, m, lr}, {});
  update->add_mutated_inputs(0);
  update->add_mutated_inputs(2);
  update->add_control_inputs(copy->id());  // writers after readers
  return b;
}

RuntimeOptions bindable(std::set<std::string> names) {
  RuntimeOptions options;
  options.watchdog_seconds = 20;
  options.bindable_variables = std::move(names);
  return options;
}

Runtime::Pieces feed(const Tensor& g) {
  return {{"g", {{0, g}}}, {"lr", {{0, Tensor::scalar(0.5, DataType::kFloat32)}}}};
}

Tensor f32(std::vector<double> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return make_tensor(std::move(values), Shape{n}, DataType::kFloat32);
}

// Variables live in persistent registers: an in-place update (sgd_update mutates its first
// input) carries over to the next iteration, and the value can be read and written between
// iterations.
TEST(RuntimeVariables, VariablesPersistAcrossIterationsAndCanBeReadAndWritten) {
  Runtime runtime(sgd_plan(/*momentum=*/0).plan(), RuntimeOptions{});
  runtime.initialize_variables();
  const std::map<std::string, Tensor> feed = {
      {"g", make_tensor({1, 2, 3}, Shape{3}, DataType::kFloat32)},
      {"lr", Tensor::scalar(0.5, DataType::kFloat32)}};
  EXPECT_EQ(values_of(runtime.run(feed).at("w_before")), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(values_of(runtime.read_variable("w")), (std::vector<double>{0.5, 0, -0.5}));
  EXPECT_EQ(values_of(runtime.run(feed).at("w_before")), (std::vector<double>{0.5, 0, -0.5}));
  runtime.write_variable("w", make_tensor({7, 8, 9}, Shape{3}, DataType::kFloat32));
  EXPECT_EQ(values_of(runtime.run(feed).at("w_before")), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(runtime.iterations(), 3);
  expect_error([&] { runtime.read_variable("nope"); }, ErrorCode::kNotFound, "'nope'");
}

// The bound tensor is the variable: the run reads the caller's values and updates them in place,
// with the other variable initialised by the runtime; the caller's later writes reach the next
// run without a copy.
TEST(RuntimeVariables, ABoundVariableIsTheCallersTensorUpdatedInPlace) {
  Runtime runtime(sgd_plan(/*momentum=*/0.5).plan(), bindable({"w", "m", "not_in_this_plan"}));
  const Tensor w = f32({2, 4, 6});
  EXPECT_EQ(runtime.bind_variable_pieces("w", {{0, w}}), "");
  // m declines (an undefined tensor): memory of its own, initialised.
  EXPECT_NE(runtime.bind_variable_pieces("m", {{0, Tensor()}}).find("no tensor was given"),
            std::string::npos);
  runtime.initialize_variables();
  const Tensor g = f32({1, 2, 3});
  EXPECT_EQ(values_of(runtime.run_local(feed(g)).at("w_before").at(0)),
            (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(values_of(w), (std::vector<double>{1.5, 3, 4.5}));  // w - 0.5 g, in place
  EXPECT_EQ(values_of(runtime.read_variable_pieces("m").at(0)), (std::vector<double>{1, 2, 3}));
  float* data = w.data<float>();
  data[0] = 10;  // a write of the caller's own
  EXPECT_EQ(values_of(runtime.run_local(feed(g)).at("w_before").at(0)),
            (std::vector<double>{10, 3, 4.5}));
  // m = 0.5 m + g = (1.5, 3, 4.5); w -= 0.5 m.
  EXPECT_EQ(values_of(w), (std::vector<double>{9.25, 1.5, 2.25}));
  // write_variable_pieces writes the caller's tensor.
  runtime.write_variable_pieces("w", {{0, f32({0, 0, 0})}});
  EXPECT_EQ(values_of(w), (std::vector<double>{0, 0, 0}));
}

// Every reason a piece keeps memory of its own, named; the variable then runs on that memory
// (written by the caller), and binding again replaces it.
TEST(RuntimeVariables, APieceThatCannotBeTheRegisterKeepsMemoryOfItsOwnAndSaysWhy) {
  Runtime runtime(sgd_plan(/*momentum=*/0.5).plan(), bindable({"w", "m"}));
  const auto why = [&](const std::string& name, const Tensor& piece) {
    return runtime.bind_variable_pieces(name, {{0, piece}});
  };
  EXPECT_NE(why("w", f32({1, 2})).find("its piece is (3,) float32 on cpu:0, the tensor (2,)"),
            std::string::npos)
      << why("w", f32({1, 2}));
  EXPECT_NE(why("w", make_tensor({1, 2, 3}, Shape{3}, DataType::kFloat64)).find("float64"),
            std::string::npos);
  const Tensor shared = f32({1, 1, 1});
  EXPECT_EQ(why("m", shared), "");
  EXPECT_NE(why("w", shared).find("shares storage with variable 'm' of rank 0"), std::string::npos);
  // w runs on its own memory, written by the caller; m stays the caller's.
  runtime.write_variable_pieces("w", {{0, f32({4, 4, 4})}});
  runtime.run_local(feed(f32({2, 2, 2})));  // m = 0.5 m + g, w -= 0.5 m
  EXPECT_EQ(values_of(runtime.read_variable_pieces("w").at(0)),
            (std::vector<double>{2.75, 2.75, 2.75}));
  EXPECT_EQ(values_of(shared), (std::vector<double>{2.5, 2.5, 2.5}));
  // Bound again: w is now the caller's tensor; m declines and gets zeros of its own.
  const Tensor w = f32({1, 1, 1});
  EXPECT_EQ(why("w", w), "");
  EXPECT_NE(why("m", f32({1})).find("its piece is (3,)"), std::string::npos);
  runtime.write_variable_pieces("m", {{0, f32({0, 0, 0})}});
  runtime.run_local(feed(f32({2, 2, 2})));
  EXPECT_EQ(values_of(w), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values_of(shared), (std::vector<double>{2.5, 2.5, 2.5}));  // no longer m
  expect_error(
      [&] {
        runtime.bind_variable_pieces("w", {{1, w}});
      },
      ErrorCode::kInvalidArgument,
      "bind_variable_pieces of 'w' needs the piece of rank 0. However, got none.");
  // No piece at all: memory of its own again (zeros), the caller's tensor left alone.
  EXPECT_NE(why("w", Tensor()).find("no tensor was given"), std::string::npos);
  EXPECT_NE(runtime.bind_variable_pieces("w", {}).find("the caller gave no piece"),
            std::string::npos);
  EXPECT_EQ(values_of(runtime.read_variable_pieces("w").at(0)), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values_of(w), (std::vector<double>{0, 0, 0}));
  expect_error([&] { runtime.bind_variable_pieces("nope", {}); }, ErrorCode::kNotFound, "'nope'");
}

// A variable a SEND reads is never bound: its receiver may read it after this rank's run has
// returned, when the caller may have written or freed its tensor. It gets memory when the runtime
// loads, and binding it says why not.
TEST(RuntimeVariables, AVariableASendReadsKeepsMemoryOfItsOwn) {
  PlanBuilder b(2);
  const int64_t w = b.variable(0, "w", Shape{3}, {}, proto::InitializerProto::ONES);
  auto [recv, received] = b.send_recv(0, 1, w, /*transfer_id=*/7);
  const int64_t z = b.reg(1, "z", Shape{3});
  b.compute(1, "neg", "neg", NoParams{}, {received}, {z});
  b.output(1, "z", z, Shape{3});
  Runtime runtime(b.plan(), bindable({"w"}));
  runtime.initialize_variables();  // placed at load: no run refuses it
  EXPECT_EQ(values_of(runtime.run({}).at("z")), (std::vector<double>{-1, -1, -1}));
  EXPECT_NE(runtime.bind_variable_pieces("w", {{0, f32({2, 2, 2})}}).find("sends it to rank 1"),
            std::string::npos);
}

// A variable offered for binding has no memory until it is placed: using it is an error naming
// it, never a read of memory that is not there; so is a fed piece sharing a bound piece's
// storage (the update it feeds would write it).
TEST(RuntimeVariables, UnplacedVariablesAndInputsSharingABoundPieceAreRefused) {
  Runtime runtime(sgd_plan(/*momentum=*/0.5).plan(), bindable({"w"}));
  runtime.initialize_variables();  // leaves w alone
  const char* unplaced = "variable 'w' of rank 0 has no memory";
  expect_error(
      [&] {
        runtime.run_local(feed(f32({1, 1, 1})));
      },
      ErrorCode::kFailedPrecondition, unplaced);
  expect_error([&] { runtime.read_variable_pieces("w"); }, ErrorCode::kFailedPrecondition,
               unplaced);
  const Tensor w = f32({1, 2, 3});
  ASSERT_EQ(runtime.bind_variable_pieces("w", {{0, w}}), "");
  expect_error([&] { runtime.run_local(feed(w)); }, ErrorCode::kInvalidArgument,
               "input 'g' of rank 0 shares storage with variable 'w'");
  EXPECT_EQ(values_of(w), (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(runtime.usable());
  runtime.run_local(feed(w.clone()));
  EXPECT_EQ(values_of(w), (std::vector<double>{0.5, 1, 1.5}));
}

}  // namespace
}  // namespace ofl::actor
