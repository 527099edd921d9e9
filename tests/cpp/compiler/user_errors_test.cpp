// Mistakes a user can make in a job, each a typed error naming what is wrong, and the
// regressions found in review (each a small job that once compiled to a wrong plan).

#include <gtest/gtest.h>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::expect_error;
using testing::values_of;

TEST(CompilerUserErrors, TwoInPlaceWritersOfOneTensorNameBothOps) {
  GraphBuilder b;
  const int w = b.variable("w", Shape{4}, Initializer{});
  const int g = b.input("g", Shape{4});
  const int m = b.variable("m", Shape{4}, Initializer{}, {}, false);
  const int lr = b.input("lr", Shape{});
  b.op("sgd_update", SgdParams{}, {w, g, m, lr}, "u1");
  b.op("sgd_update", SgdParams{}, {w, g, m, lr}, "u2");
  expect_error([&] { compile_graph(std::move(b.graph())); }, ErrorCode::kInvalidArgument,
               "both write tensor 'w' in place");
}

TEST(CompilerUserErrors, DuplicateNamesAndFetchesAreRejected) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4});
  b.op1("relu", NoParams{}, {x}, "act");
  expect_error([&] { b.op1("tanh", NoParams{}, {x}, "act"); }, ErrorCode::kInvalidArgument,
               "op name 'act' is used twice");
  const int y = b.op1("exp", NoParams{}, {x}, "e");
  b.fetch(y);
  expect_error([&] { b.fetch(y); }, ErrorCode::kInvalidArgument, "fetched already");
}

TEST(CompilerUserErrors, PartialSumVariablesAndExtraHintsAreRejected) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  expect_error([&] { b.variable("w", Shape{4}, Initializer{}, {P()}); },
               ErrorCode::kInvalidArgument, "cannot be partial-sum");
  const int x = b.input("x", Shape{4});
  expect_error(
      [&] {
        b.op("relu", NoParams{}, {x}, "r", {{B()}, {B()}});
      },
      ErrorCode::kInvalidArgument, "2 SBP hints for 1 outputs");
  EXPECT_EQ(b.graph().num_ops(), 1);  // the rejected op was not added
}

TEST(CompilerUserErrors, SourceOpsInAJobNeedOneTypedOutput) {
  GraphBuilder b;
  b.input("x", Shape{4});
  proto::JobProto job;
  b.to_job(&job);
  job.mutable_ops(0)->add_outputs()->set_name("x2");
  const auto result = compile(job);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("exactly one output"), std::string::npos)
      << result.status().message();
}

// Two identical ops whose outputs are both fetched: each fetch returns its own value.
TEST(CompilerRegressions, EqualOpsThatAreBothFetchedStayApart) {
  GraphBuilder b;
  const int x = b.input("x", Shape{3});
  b.fetch(b.op1("relu", NoParams{}, {x}, "r1"));
  b.fetch(b.op1("relu", NoParams{}, {x}, "r2"));
  actor::ReferenceExecutor executor(compile_graph(std::move(b.graph())));
  const auto out = executor.run({{"x", testing::make_tensor({-1, 2, 3}, Shape{3})}});
  EXPECT_EQ(values_of(out.at("r1/out0")), (std::vector<double>{0, 2, 3}));
  EXPECT_EQ(values_of(out.at("r2/out0")), (std::vector<double>{0, 2, 3}));
}

// A gradient that depends on no fed value (the bias of a linear loss) is summed over the
// micro-batches like every other one.
TEST(CompilerRegressions, DataIndependentGradientsAccumulateOverMicroBatches) {
  auto train = [](int micro) {
    GraphBuilder b;
    const int x = b.input("x", Shape{8 / micro, 3});
    const int w = b.variable("w", Shape{3, 2}, Initializer{Initializer::Kind::kNormal, 0, 1, 5});
    const int bias = b.variable("bias", Shape{2}, Initializer{});
    const int y = b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w}), bias});
    b.set_loss(b.op1("reduce_mean", ReduceParams{}, {y}, "loss"));
    b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
    b.train().gradient_accumulation_steps = micro;
    actor::ReferenceExecutor executor(compile_graph(std::move(b.graph())));
    executor.initialize_variables();
    executor.run({{"x", testing::random_tensor(Shape{8, 3}, DataType::kFloat32, 1)},
                  {"lr", Tensor::scalar(0.5, DataType::kFloat32)}});
    return values_of(executor.read_variable("bias"));
  };
  const std::vector<double> one = train(1), two = train(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 1e-6) << i;
  EXPECT_NEAR(one[0], -0.5 * 0.5, 1e-6);  // d(mean)/d(bias) = 1/2 per column, lr 0.5
}

}  // namespace
}  // namespace ofl::compiler
