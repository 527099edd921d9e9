#include <gtest/gtest.h>

#include "compiler/builder.h"
#include "compiler/passes/passes.h"

namespace ofl::compiler {
namespace {

TEST(BoxingInsertion, OneBoxingServesEveryConsumerOfTheSameConversion) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 4}, DataType::kFloat32, {S(0)});
  // Three consumers that want x broadcast (their outputs are hinted B).
  const int a = b.op1("relu", NoParams{}, {x}, "a", {B()});
  const int c = b.op1("tanh", NoParams{}, {x}, "c", {B()});
  const int d = b.op1("exp", NoParams{}, {x}, "d", {S(1)});
  Graph& g = b.graph();
  make_shape_inference_pass()->run(g, {});
  make_sbp_inference_pass()->run(g, {});
  make_boxing_insertion_pass()->run(g, {});
  const int ia = g.op(g.tensor(a).producer).inputs[0];
  const int ic = g.op(g.tensor(c).producer).inputs[0];
  const int id = g.op(g.tensor(d).producer).inputs[0];
  EXPECT_EQ(ia, ic);
  EXPECT_NE(ia, id);
  EXPECT_EQ(g.tensor(ia).sbp, (NdSbp{B()}));
  EXPECT_EQ(g.tensor(id).sbp, (NdSbp{S(1)}));
  EXPECT_EQ(g.tensor(ia).meta, g.tensor(x).meta);
  int boxings = 0;
  for (int i = 0; i < g.num_ops(); ++i) boxings += g.op(i).kind == OpKind::kBoxing ? 1 : 0;
  EXPECT_EQ(boxings, 2);
  // Every compute op now reads its inputs exactly as its signature says.
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kCompute) continue;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      EXPECT_EQ(g.tensor(op.inputs[k]).sbp, op.signature.inputs[k]) << op.name;
      EXPECT_EQ(g.op(g.tensor(op.inputs[k]).producer).placement, op.placement) << op.name;
    }
  }
}

}  // namespace
}  // namespace ofl::compiler
