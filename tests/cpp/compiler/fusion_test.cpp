#include <gtest/gtest.h>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/ops/fused.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/unary.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

std::vector<const LogicalOp*> ops_of_type(const Graph& g, const std::string& type) {
  std::vector<const LogicalOp*> out;
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).kind == OpKind::kCompute && g.op(i).schema->name() == type) out.push_back(&g.op(i));
  }
  return out;
}

// y = matmul(scalar_add(tanh(scalar_mul(x, 0.5)), 1), w); the three unary ops fuse.
Graph chain_graph(const Placement& placement, const NdSbp& data) {
  GraphBuilder b("fusion");
  b.set_placement(placement);
  const int x = b.input("x", Shape{6, 4}, DataType::kFloat32, data);
  const int w = b.variable("w", Shape{4, 3}, Initializer{Initializer::Kind::kNormal, 0, 0.5, 3});
  const int h = b.op1("scalar_add", ScalarParams{1.0},
                      {b.op1("tanh", NoParams{}, {b.op1("scalar_mul", ScalarParams{0.5}, {x})})});
  b.fetch(b.op1("matmul", MatmulParams{}, {h, w}, "out"));
  return std::move(b.graph());
}

TEST(ElementwiseFusion, FusesAUnaryChainIntoOneOp) {
  Graph g = chain_graph(Placement::parse("cpu, [0]"), {B()});
  run_logical_passes(g);
  const auto fused = ops_of_type(g, "fused_elementwise");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(fused[0]->params.as<FusedElementwiseParams>().steps,
            "scalar_mul(0.5),tanh,scalar_add(1)");
  EXPECT_TRUE(ops_of_type(g, "tanh").empty());
  EXPECT_TRUE(ops_of_type(g, "scalar_mul").empty());
}

TEST(ElementwiseFusion, FusedPlanComputesWhatTheOpsCompute) {
  Tensor x = testing::random_tensor(Shape{6, 4}, DataType::kFloat32, 9);
  for (const char* placement : {"cpu, [0]", "cpu, [0, 1, 2]"}) {
    const Placement p = Placement::parse(placement);
    actor::ReferenceExecutor executor(
        compile_graph(chain_graph(p, {p.num_ranks() > 1 ? S(0) : B()})));
    executor.initialize_variables();
    const Tensor got = executor.run({{"x", x}}).at("out/out0");
    const Tensor h = functional::scalar_add(functional::tanh(functional::scalar_mul(x, 0.5)), 1.0);
    const Tensor want = functional::matmul(h, executor.read_variable("w"));
    testing::expect_close(got, testing::values_of(want), want.shape(), 1e-5, 1e-6);
  }
}

TEST(ElementwiseFusion, KeepsIntermediatesThatOthersRead) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4});
  const int t = b.op1("tanh", NoParams{}, {x}, "t");
  const int y = b.op1("exp", NoParams{}, {t}, "e");
  b.fetch(t);  // t is fetched: the chain cannot swallow it
  b.fetch(y);
  Graph& g = b.graph();
  run_logical_passes(g);
  EXPECT_TRUE(ops_of_type(g, "fused_elementwise").empty());
  EXPECT_EQ(ops_of_type(g, "tanh").size(), 1u);
}

// A chain whose last tensor is both fetched and read by another op is computed once: the fused
// op produces the fetched tensor itself (it keeps its name), rather than the chain being kept
// for the fetch beside a fused copy for the reader.
TEST(ElementwiseFusion, FetchedTailIsComputedOnce) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 3});
  const int w = b.variable("w", Shape{3, 2}, Initializer{Initializer::Kind::kNormal, 0, 0.5, 3});
  const int y = b.op1("exp", NoParams{}, {b.op1("tanh", NoParams{}, {x}, "t")}, "e");
  b.fetch(y);
  b.fetch(b.op1("matmul", MatmulParams{}, {y, w}, "out"));
  Graph g;
  actor::ReferenceExecutor executor(compile_graph(std::move(b.graph()), {}, &g));
  EXPECT_EQ(ops_of_type(g, "fused_elementwise").size(), 1u);
  EXPECT_TRUE(ops_of_type(g, "tanh").empty());
  EXPECT_TRUE(ops_of_type(g, "exp").empty());
  ASSERT_TRUE(g.find_tensor("e/out0").has_value());
  EXPECT_EQ(g.op(g.tensor(*g.find_tensor("e/out0")).producer).schema->name(), "fused_elementwise");
  executor.initialize_variables();
  const Tensor xv = testing::random_tensor(Shape{4, 3}, DataType::kFloat32, 5);
  const auto got = executor.run({{"x", xv}});
  const Tensor want = functional::exp(functional::tanh(xv));
  testing::expect_close(got.at("e/out0"), testing::values_of(want), want.shape(), 1e-6, 1e-7);
}

}  // namespace
}  // namespace ofl::compiler
