// GraphTracer: ops applied to lazy tensors join the logical graph, with the placement of their
// inputs, constants for ordinary tensors, and a pipeline stage per placement.

#include "compiler/graph_tracer.h"

#include <gtest/gtest.h>

#include "compiler/compile.h"
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
  // Its cast (autocast's) follows too: the fill and the cast traced again.
  const Tensor ten32 = apply_op1(op("cast"), CastParams{DataType::kInt32}, {ten});
  const Tensor x32 = apply_op1(op("cast"), CastParams{DataType::kInt32}, {x});
  const Tensor same32 = apply_op1(op("equal"), NoParams{}, {x32, ten32});
  const LogicalOp& eq32 = g.op(g.tensor(t.index_of(same32)).producer);
  const LogicalOp& cast = g.op(g.tensor(eq32.inputs[1]).producer);
  EXPECT_EQ(cast.schema->name(), "cast");
  EXPECT_EQ(cast.placement, first);
  EXPECT_EQ(g.op(g.tensor(cast.inputs[0]).producer).schema->name(), "fill");
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

// Note [Buffers written in build]: a buffer written twice in a trace is read as its newest value
// after each write, and the graph gets one assign of the last value into the variable; writes
// to a parameter or an activation, or of another shape, are refused naming them.
TEST(GraphTracer, ABufferWrittenInTheTraceIsAssignedItsLastValue) {
  const Placement one(DeviceType::kCPU, {0});
  GraphTracer t("g", one);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{3}, DataType::kFloat32, one, {});
  const Tensor w = t.variable("w", Shape{3}, DataType::kFloat32, one, {B()}, /*trainable=*/true);
  const Tensor buf =
      t.variable("buf", Shape{3}, DataType::kFloat32, one, {B()}, /*trainable=*/false);
  const int original = t.index_of(buf);
  const Tensor first = apply_op1(op("add"), NoParams{}, {buf, x});
  t.write_variable(buf, first, "add_");
  EXPECT_EQ(t.index_of(buf), t.index_of(first));  // later reads see the write
  const Tensor second = apply_op1(op("mul"), NoParams{}, {buf, x});
  t.write_variable(buf, second, "mul_");
  EXPECT_EQ(t.written_variables(), (std::vector<std::string>{"buf"}));
  t.finish_writes();
  const Graph& g = t.builder().graph();
  int assigns = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& o = g.op(i);
    if (o.schema == nullptr || o.schema->name() != "assign") continue;
    ++assigns;
    EXPECT_EQ(o.inputs, (std::vector<int>{original, t.index_of(second)}));
  }
  EXPECT_EQ(assigns, 1);
  expect_error([&] { t.write_variable(buf, second, "add_"); }, ErrorCode::kInvalidArgument,
               "is written after build() returned");

  GraphTracer u("h", one);
  TracingScope other(&u);
  const Tensor y = u.input("y", Shape{3}, DataType::kFloat32, one, {});
  const Tensor p = u.variable("p", Shape{3}, DataType::kFloat32, one, {B()}, true);
  const Tensor b = u.variable("b", Shape{3}, DataType::kFloat32, one, {B()}, false);
  expect_error([&] { u.write_variable(y, y, "add_"); }, ErrorCode::kInvalidArgument,
               "[add_] in-place ops inside nn.Graph.build() may change a module's buffers "
               "(running statistics) only. However, got a traced value");
  expect_error([&] { u.write_variable(p, y, "mul_"); }, ErrorCode::kInvalidArgument,
               "However, got parameter 'p', which changes through its optimizer");
  const Tensor wide = u.input("wide", Shape{4}, DataType::kFloat32, one, {});
  expect_error([&] { u.write_variable(b, wide, "copy_"); }, ErrorCode::kInvalidArgument,
               "[copy_] the value written into buffer 'b' must have its shape (3,)");
  (void)w;
}

// A graph whose passes leave no op (an output gradient given for values that do not depend on
// the differentiable input) is refused with a message; it had read the first rank of an empty
// job.
TEST(GraphTracer, AGraphWithNothingToRunIsRefusedNotCrashed) {
  const Placement one(DeviceType::kCPU, {0});
  GraphTracer t("g", one);
  TracingScope scope(&t);
  const Tensor x = t.input("x", Shape{3}, DataType::kFloat32, one, {});
  t.differentiable(x);
  (void)t.input("z", Shape{3}, DataType::kFloat32, one, {});
  CompileOptions options;
  options.ranks = {0};
  expect_error([&] { compile_graph(t.builder().graph(), options); }, ErrorCode::kInvalidArgument,
               "[compile] the job has no ops left to run");
}

}  // namespace
}  // namespace ofl::compiler
