#include <gtest/gtest.h>

#include "compiler/builder.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/softmax.h"

namespace ofl::compiler {
namespace {

Initializer normal() { return Initializer{Initializer::Kind::kNormal, 0.0, 0.1, 1}; }

void infer(Graph& g, const CompileOptions& options = {}) {
  make_shape_inference_pass()->run(g, options);
  make_sbp_inference_pass()->run(g, options);
  make_boxing_insertion_pass()->run(g, options);
}

const LogicalOp& producer(const Graph& g, int t) { return g.op(g.tensor(t).producer); }

int count_boxing(const Graph& g) {
  int n = 0;
  for (int i = 0; i < g.num_ops(); ++i) n += g.op(i).kind == OpKind::kBoxing ? 1 : 0;
  return n;
}

TEST(SbpInference, DataParallelMatmulKeepsTheBatchSplitWithoutBoxing) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
  const int w = b.variable("w", Shape{4, 3}, normal());
  const int y = b.op1("matmul", MatmulParams{}, {x, w});
  infer(b.graph());
  EXPECT_EQ(producer(b.graph(), y).signature.to_string(), "S(0) x B -> S(0)");
  EXPECT_EQ(count_boxing(b.graph()), 0);
}

// Note [Replicate when it costs nothing]: a constant (the position ids of a GPT) could be split
// or whole at no cost; split, the add that broadcasts it over the batch would need it gathered.
TEST(SbpInference, ConstantsThatCostNothingEitherWayAreComputedWhole) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 8}, DataType::kFloat32, {S(0)});
  const int positions = b.op1("arange", ArangeParams{0, 8, 1, DataType::kFloat32}, {});
  const int y = b.op1("add", NoParams{}, {x, positions});
  infer(b.graph());
  EXPECT_EQ(b.graph().tensor(positions).sbp, (NdSbp{B()}));
  EXPECT_EQ(producer(b.graph(), y).signature.to_string(), "S(0) x B -> S(0)");
  EXPECT_EQ(count_boxing(b.graph()), 0);
}

TEST(SbpInference, ColumnThenRowParallelGivesPartialSumWithoutBoxing) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4});
  const int w1 = b.variable("w1", Shape{4, 6}, normal(), {S(1)});
  const int w2 = b.variable("w2", Shape{6, 4}, normal(), {S(0)});
  const int h = b.op1("relu", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1})});
  const int y = b.op1("matmul", MatmulParams{}, {h, w2});
  infer(b.graph());
  const Graph& g = b.graph();
  EXPECT_EQ(g.tensor(h).sbp, (NdSbp{S(1)}));
  EXPECT_EQ(producer(g, y).signature.to_string(), "S(1) x S(0) -> P");
  EXPECT_EQ(count_boxing(g), 0);
}

// x @ w1 @ w2 (w1 column-, w2 row-parallel as `w1_sbp`, `w2_sbp` say), relu, then softmax over
// the last axis, SBP inferred: {the product, the relu}.
std::pair<int, int> row_parallel_then_softmax(GraphBuilder& b, int x, const NdSbp& w1_sbp,
                                              const NdSbp& w2_sbp) {
  const int w1 = b.variable("w1", Shape{4, 6}, normal(), w1_sbp);
  const int w2 = b.variable("w2", Shape{6, 4}, normal(), w2_sbp);
  const int y = b.op1("matmul", MatmulParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}), w2});
  const int r = b.op1("relu", NoParams{}, {y});
  b.op1("softmax", SoftmaxParams{-1}, {r});
  infer(b.graph());
  return {y, r};
}

// Note [Small outputs are gathered later]: an op after a row-parallel product of a decoding
// step's one token (one that cannot take a partial sum) takes it as an all-reduce, not as a
// reduce-scatter that the softmax over the whole row would gather again; a large one keeps its
// rows split.
TEST(SbpInference, ASmallPartialSumIsAllReducedNotScatteredThenGathered) {
  for (int64_t rows : {1, 8192}) {
    GraphBuilder b;
    b.set_placement(Placement::parse("cpu, [0, 1]"));
    const auto [y, r] = row_parallel_then_softmax(b, b.input("x", Shape{rows, 4}), {S(1)}, {S(0)});
    const Graph& g = b.graph();
    SCOPED_TRACE(rows);
    EXPECT_EQ(producer(g, y).signature.to_string(), "S(1) x S(0) -> P");
    if (rows == 1) {
      EXPECT_EQ(g.tensor(r).sbp, (NdSbp{B()}));
      EXPECT_EQ(count_boxing(g), 1);  // the all-reduce
    } else {
      EXPECT_EQ(g.tensor(r).sbp, (NdSbp{S(0)}));  // 128 KiB: reduce-scattered, stays split
    }
  }
}

// The same on a 2 x 2 placement of data x tensor parallelism: the batch stays split along the
// data-parallel dimension (no reduce-scatter made that split), the partial sum of the
// tensor-parallel dimension is all-reduced.
TEST(SbpInference, ASmallPartialSumOfTensorParallelismKeepsTheDataParallelSplit) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [[0, 1], [2, 3]]"));
  const auto [y, r] = row_parallel_then_softmax(
      b, b.input("x", Shape{2, 4}, DataType::kFloat32, {S(0), B()}), {B(), S(1)}, {B(), S(0)});
  const Graph& g = b.graph();
  EXPECT_EQ(g.tensor(y).sbp, (NdSbp{S(0), P()}));
  EXPECT_EQ(g.tensor(r).sbp, (NdSbp{S(0), B()}));
  EXPECT_EQ(count_boxing(g), 1);
}

TEST(SbpInference, OutputHintsAreObeyedByInsertingBoxing) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1, 2]"));
  const int x = b.input("x", Shape{9, 4}, DataType::kFloat32, {S(0)});
  const int w = b.variable("w", Shape{4, 3}, normal());
  const int y = b.op1("matmul", MatmulParams{}, {x, w}, "fc", {B()});
  infer(b.graph());
  const Graph& g = b.graph();
  EXPECT_EQ(g.tensor(y).sbp, (NdSbp{B()}));
  ASSERT_EQ(count_boxing(g), 1);
  const LogicalOp& fc = producer(g, y);
  const LogicalOp& box = producer(g, fc.inputs[0]);
  ASSERT_EQ(box.kind, OpKind::kBoxing);
  EXPECT_EQ(box.boxing.in_sbp, (NdSbp{S(0)}));
  EXPECT_EQ(box.boxing.out_sbp, (NdSbp{B()}));
}

TEST(SbpInference, TwoDimensionalPlacementCombinesDataAndTensorParallel) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [[0, 1], [2, 3]]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0), B()});
  const int w = b.variable("w", Shape{4, 6}, normal(), {B(), S(1)});
  const int y = b.op1("matmul", MatmulParams{}, {x, w});
  infer(b.graph());
  EXPECT_EQ(b.graph().tensor(y).sbp, (NdSbp{S(0), S(1)}));
  EXPECT_EQ(count_boxing(b.graph()), 0);
}

TEST(SbpInference, AddOfPartialSumsStaysPartial) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 6}, DataType::kFloat32, {S(1)});
  const int w = b.variable("w", Shape{6, 4}, normal(), {S(0)});
  const int y = b.op1("matmul", MatmulParams{}, {x, w});
  const int z = b.op1("add", NoParams{}, {y, y});
  infer(b.graph());
  EXPECT_EQ(b.graph().tensor(z).sbp, (NdSbp{P()}));
  EXPECT_EQ(count_boxing(b.graph()), 0);
}

TEST(SbpInference, CrossPlacementInputsGetBoxedToTheConsumersPlacement) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 4}, DataType::kFloat32, {S(0)});
  const int h = b.op1("relu", NoParams{}, {x});
  b.set_placement(Placement::parse("cpu, [2, 3]"));
  const int y = b.op1("tanh", NoParams{}, {h});
  infer(b.graph());
  const Graph& g = b.graph();
  const LogicalOp& box = producer(g, producer(g, y).inputs[0]);
  ASSERT_EQ(box.kind, OpKind::kBoxing);
  EXPECT_EQ(box.boxing.in_placement, Placement::parse("cpu, [0, 1]"));
  EXPECT_EQ(box.boxing.out_placement, Placement::parse("cpu, [2, 3]"));
  EXPECT_EQ(box.placement, Placement::parse("cpu, [2, 3]"));
  EXPECT_EQ(box.boxing.out_sbp, (NdSbp{S(0)}));  // no reason to change the layout
}

TEST(SbpInference, InPlaceUpdatesGetTheirVariableAsItIs) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int w = b.variable("w", Shape{4, 2}, normal(), {S(0)});
  const int g_ = b.input("g", Shape{4, 2}, DataType::kFloat32, {B()});
  const int m = b.variable("m", Shape{4, 2}, Initializer{}, {S(0)}, false);
  const int lr = b.input("lr", Shape{});
  b.op("sgd_update", SgdParams{0.9, 0, 0, false}, {w, g_, m, lr}, "update");
  infer(b.graph());
  const Graph& g = b.graph();
  const LogicalOp& update = g.op(g.num_ops() - 2);  // the boxing of g comes after it
  ASSERT_EQ(update.name, "update");
  EXPECT_EQ(update.signature.inputs[0], (NdSbp{S(0)}));
  EXPECT_EQ(update.signature.inputs[2], (NdSbp{S(0)}));
  EXPECT_EQ(count_boxing(g), 1);  // only the gradient is sliced B -> S(0)
}

TEST(SbpInference, ExplainsItsChoiceOnRequest) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
  const int w = b.variable("w", Shape{4, 3}, normal());
  const int y = b.op1("matmul", MatmulParams{}, {x, w});
  CompileOptions options;
  options.explain_sbp = true;
  infer(b.graph(), options);
  const std::string& why = producer(b.graph(), y).sbp_reason;
  EXPECT_NE(why.find("chose S(0) x B -> S(0) (0 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("B x B -> B"), std::string::npos) << why;
}

TEST(SbpInference, ImpossibleHintIsAnErrorNamingTheOp) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{8, 4}, DataType::kFloat32, {S(0)});
  b.op1("softmax", SoftmaxParams{1}, {x}, "probs", {S(1)});  // cannot split the softmax axis
  try {
    infer(b.graph());
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'probs'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("hint for output 0: S(1)"), std::string::npos) << msg;
  }
}

TEST(BoxingCost, CountsCollectiveBytes) {
  const TensorMeta m{Shape{1024}, DataType::kFloat32};  // 4 KiB
  const Placement p = Placement::parse("cpu, [0, 1, 2, 3]");
  EXPECT_EQ(boxing_cost(m, p, {P()}, p, {B()}), 2 * 3 * 4096.0);
  EXPECT_EQ(boxing_cost(m, p, {P()}, p, {S(0)}), 3 * 4096.0);
  EXPECT_EQ(boxing_cost(m, p, {S(0)}, p, {B()}), 3 * 4096.0);
  EXPECT_EQ(boxing_cost(m, p, {B()}, p, {S(0)}), 0.0);
  EXPECT_EQ(boxing_cost(m, p, {S(0)}, p, {S(0)}), 0.0);
  const Placement q = Placement::parse("cpu, [[0, 1], [2, 3]]");
  // (S(0), P) -> (S(0), B): all-reduce within each row group, on half the tensor.
  EXPECT_EQ(boxing_cost(m, q, {S(0), P()}, q, {S(0), B()}), 2 * (2 * 1 * 2048.0));
}

}  // namespace
}  // namespace ofl::compiler
