#include <gtest/gtest.h>

#include "compiler/builder.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/scalar.h"

namespace ofl::compiler {
namespace {

int count_ops(const Graph& g, const std::string& type) {
  int n = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    n += g.op(i).kind == OpKind::kCompute && g.op(i).schema->name() == type ? 1 : 0;
  }
  return n;
}

TEST(DeadCodeElimination, DropsOpsNothingNeedsAndKeepsVariables) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4});
  b.variable("unused_weight", Shape{4}, Initializer{});
  const int kept = b.op1("relu", NoParams{}, {x}, "kept");
  b.op1("exp", NoParams{}, {b.op1("tanh", NoParams{}, {x}, "dead1")}, "dead2");
  b.fetch(kept);
  Graph& g = b.graph();
  make_dead_code_elimination_pass()->run(g, {});
  EXPECT_EQ(g.num_ops(), 3);  // x, unused_weight, kept
  EXPECT_EQ(count_ops(g, "tanh"), 0);
  EXPECT_EQ(g.tensor(g.fetches[0]).name, "kept/out0");
  EXPECT_EQ(g.op(g.tensor(g.fetches[0]).producer).name, "kept");
  EXPECT_TRUE(g.find_tensor("unused_weight").has_value());
}

TEST(CommonSubexpressionElimination, MergesEqualOpsTransitively) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4});
  const int a1 = b.op1("tanh", NoParams{}, {x});
  const int a2 = b.op1("tanh", NoParams{}, {x});
  const int c1 = b.op1("exp", NoParams{}, {a1});
  const int c2 = b.op1("exp", NoParams{}, {a2});  // equal once a2 is a1
  const int y = b.op1("add", NoParams{}, {c1, c2});
  const int other = b.op1("scalar_mul", ScalarParams{2.0}, {x});
  const int other2 = b.op1("scalar_mul", ScalarParams{3.0}, {x});  // other params: kept
  b.fetch(y);
  b.fetch(other);
  b.fetch(other2);
  Graph& g = b.graph();
  make_common_subexpression_elimination_pass()->run(g, {});
  make_dead_code_elimination_pass()->run(g, {});
  EXPECT_EQ(count_ops(g, "tanh"), 1);
  EXPECT_EQ(count_ops(g, "exp"), 1);
  EXPECT_EQ(count_ops(g, "scalar_mul"), 2);
  const LogicalOp& add = g.op(g.tensor(g.fetches[0]).producer);
  EXPECT_EQ(add.inputs[0], add.inputs[1]);
}

}  // namespace
}  // namespace ofl::compiler
