// GraphTracer: ops applied to lazy tensors join the logical graph, with the placement of their
// inputs, constants for ordinary tensors, and a pipeline stage per placement.

#include "compiler/graph_tracer.h"

#include <gtest/gtest.h>

#include "oneflowlike/eager.h"
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

}  // namespace
}  // namespace ofl::compiler
