// Golden-file tests: small plans are pinned as text (tests/cpp/compiler/golden/*.txt), so any
// change in what the compiler emits shows up as a readable diff. After an intended change,
// regenerate with OFL_UPDATE_GOLDEN=1 build/tests/cpp/compiler_tests --gtest_filter='GoldenPlan*'
// and review the diff.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "compiler/builder.h"
#include "compiler/compile.h"
#include "compiler/plan_dump.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"

namespace ofl::compiler {
namespace {

Initializer normal() { return Initializer{Initializer::Kind::kNormal, 0.0, 0.1, 1}; }

void expect_matches_golden(const proto::PlanProto& plan, const std::string& name) {
  const std::string path =
      std::string(OFL_SOURCE_DIR) + "/tests/cpp/compiler/golden/" + name + ".txt";
  const std::string text = plan_to_text(plan) + "\n" + summary_to_text(summarize_plan(plan));
  if (std::getenv("OFL_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path
                         << " (generate it with OFL_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  if (text == expected.str()) return;
  // Report the first differing line rather than two whole plans.
  std::istringstream got_lines(text), want_lines(expected.str());
  std::string got, want;
  for (int line = 1;; ++line) {
    const bool more_got = static_cast<bool>(std::getline(got_lines, got));
    const bool more_want = static_cast<bool>(std::getline(want_lines, want));
    if (!more_got && !more_want) break;
    if (got != want || more_got != more_want) {
      ADD_FAILURE() << "plan differs from " << path << " at line " << line
                    << ":\n  golden:   " << (more_want ? want : "<end>")
                    << "\n  compiled: " << (more_got ? got : "<end>")
                    << "\nIf the change is intended, regenerate with OFL_UPDATE_GOLDEN=1.";
      return;
    }
  }
}

TEST(GoldenPlan, MlpDataParallelOnTwoRanks) {
  GraphBuilder b("mlp_dp2");
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 3}, DataType::kFloat32, {S(0)});
  const int w1 = b.variable("w1", Shape{3, 5}, normal());
  const int w2 = b.variable("w2", Shape{5, 2}, normal());
  const int h = b.op1("relu", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}, "fc1")}, "act");
  const int y = b.op1("matmul", MatmulParams{}, {h, w2}, "fc2");
  const int loss = b.op1("reduce_sum", ReduceParams{}, {y}, "loss");
  b.set_loss(loss);
  b.fetch(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  expect_matches_golden(compile_graph(std::move(b.graph())), "mlp_dp2");
}

TEST(GoldenPlan, MatmulUnderEachSignatureOnTwoRanks) {
  struct Case {
    const char* name;
    NdSbp a, w;
  };
  for (const Case& c : {Case{"matmul_s0_b", {S(0)}, {B()}}, Case{"matmul_b_s1", {B()}, {S(1)}},
                        Case{"matmul_s1_s0", {S(1)}, {S(0)}}}) {
    GraphBuilder b(c.name);
    b.set_placement(Placement::parse("cpu, [0, 1]"));
    const int a = b.input("a", Shape{4, 6}, DataType::kFloat32, c.a);
    const int w = b.variable("w", Shape{6, 2}, normal(), c.w);
    b.fetch(b.op1("matmul", MatmulParams{}, {a, w}, "mm"));
    expect_matches_golden(compile_graph(std::move(b.graph())), c.name);
  }
}

TEST(GoldenPlan, TwoStagePipelineSendsActivationsAcrossPlacements) {
  GraphBuilder b("pipeline2");
  b.set_placement(Placement::parse("cpu, [0]"));
  const int x = b.input("x", Shape{4, 3});
  const int w1 = b.variable("w1", Shape{3, 3}, normal());
  const int h = b.op1("tanh", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}, "stage0.fc")},
                      "stage0.act");
  b.set_placement(Placement::parse("cpu, [1]"));
  b.set_stage(1);
  const int w2 = b.variable("w2", Shape{3, 2}, normal());
  const int loss = b.op1("reduce_sum", ReduceParams{},
                         {b.op1("matmul", MatmulParams{}, {h, w2}, "stage1.fc")}, "loss");
  b.set_loss(loss);
  b.fetch(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  expect_matches_golden(compile_graph(std::move(b.graph())), "pipeline2");
}

}  // namespace
}  // namespace ofl::compiler
