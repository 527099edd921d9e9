// GraphTracer: ops applied to lazy tensors join the logical graph, with the placement of their
// inputs, constants for ordinary tensors, and a pipeline stage per placement.

#include "compiler/graph_tracer.h"

#include <gtest/gtest.h>

#include "oneflowlike/eager.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::expect_error;
using testing::make_tensor;

const OpSchema& op(const char* name) { return OpRegistry::global().find(name); }

TEST(GraphTracer, RecordsOpsOnLazyTensorsInsteadOfRunningThem) {
  const Placement two(DeviceType::kCPU, {0, 1});
  GraphTracer t("g", two);
  t.set_location_provider([] { return std::string("model.py:7"); });
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{4, 3}, DataType::kFloat32, two, {S(0)});
  const Tensor w = t.variable("w", Shape{3, 2}, DataType::kFloat32, two, {B()}, true);
  const Tensor y = apply_op1(op("matmul"), MatmulParams{}, {x, w});
  EXPECT_TRUE(y.is_lazy());
  EXPECT_EQ(y.shape(), (Shape{4, 2}));
  expect_error([&] { (void)y.raw_data(); }, ErrorCode::kFailedPrecondition, "no data until");
  // An ordinary tensor becomes a constant: a non-trainable variable written after load.
  const Tensor bias = make_tensor({1, 2}, Shape{2}, DataType::kFloat32);
  const Tensor z = apply_op1(op("add"), NoParams{}, {y, bias});
  ASSERT_EQ(t.constants().size(), 1u);
  EXPECT_EQ(t.constants().begin()->second.shape(), (Shape{2}));
  EXPECT_EQ(t.placement_of(z), two);
  const Graph& g = t.builder().graph();
  const LogicalOp& add = g.op(g.tensor(t.index_of(z)).producer);
  EXPECT_EQ(add.schema->name(), "add");
  EXPECT_EQ(add.location, "model.py:7");
  EXPECT_EQ(add.stage, 0);
}

TEST(GraphTracer, EachPlacementIsAStageAndInputsMustAgree) {
  const Placement first(DeviceType::kCPU, {0});
  const Placement second(DeviceType::kCPU, {1});
  GraphTracer t("g", first);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{2}, DataType::kFloat32, first, {});
  const Tensor moved = t.to_global(x, second, {B()});
  EXPECT_EQ(t.sbp_hint_of(moved), (NdSbp{B()}));
  const Tensor y = apply_op1(op("relu"), NoParams{}, {moved});
  const Graph& g = t.builder().graph();
  EXPECT_EQ(g.op(g.tensor(t.index_of(y)).producer).stage, 1);
  expect_error(
      [&] {
        apply_op1(op("add"), NoParams{}, {x, y});
      },
      ErrorCode::kInvalidArgument,
      "all inputs must be on one placement. However, input 0 is on cpu, [0] and input 1 "
      "on cpu, [1]");
  GraphTracer other("h", first);
  expect_error([&] { other.index_of(x); }, ErrorCode::kInvalidArgument,
               "is a value of another graph's build()");
}

// Note [Fills follow their users]: a number operand traced while another stage was current (a
// fill op without inputs) is traced again on the placement of the op that reads it, so x == 10
// works on any stage; lazy inputs that are not fills must still agree.
TEST(GraphTracer, ANumberOperandFollowsTheTensorItMeets) {
  const Placement first(DeviceType::kCPU, {0});
  const Placement second(DeviceType::kCPU, {1});
  GraphTracer t("g", first);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{3}, DataType::kInt64, first, {});
  const Tensor y = t.input("y", Shape{3}, DataType::kInt64, second, {});  // current: second
  const Tensor ten = apply_op1(op("fill"), FillParams{Shape{}, DataType::kInt64, 10.0}, {});
  EXPECT_EQ(t.placement_of(ten), second);
  const Tensor same = apply_op1(op("equal"), NoParams{}, {x, ten});
  EXPECT_EQ(t.placement_of(same), first);
  const Graph& g = t.builder().graph();
  const LogicalOp& eq = g.op(g.tensor(t.index_of(same)).producer);
  const LogicalOp& fill = g.op(g.tensor(eq.inputs[1]).producer);
  EXPECT_EQ(fill.schema->name(), "fill");
  EXPECT_EQ(fill.placement, first);
  EXPECT_EQ(fill.params.as<FillParams>().value, 10.0);
  // The fill where it was serves its own stage as it is.
  const Tensor there = apply_op1(op("equal"), NoParams{}, {ten, y});
  EXPECT_EQ(g.tensor(t.index_of(there)).producer, g.num_ops() - 1);
  EXPECT_EQ(g.op(g.tensor(t.index_of(there)).producer).inputs[0], t.index_of(ten));
  expect_error(
      [&] {
        apply_op1(op("equal"), NoParams{}, {x, y});
      },
      ErrorCode::kInvalidArgument, "all inputs must be on one placement");
}

}  // namespace
}  // namespace ofl::compiler
