// Compiles training jobs for several parallel layouts and runs their plans with the reference
// executor: every layout of the MLP (tests/cpp/models/mlp_training.h) must give the loss curve and
// the final weights of the 1-rank run.

#include <gtest/gtest.h>

#include <algorithm>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/plan_task.h"
#include "tests/cpp/models/mlp_training.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::build_mlp;
using testing::expect_same_training;
using testing::kMlpIn;
using testing::mlp_deep_pipelined_layouts;
using testing::mlp_layouts;
using testing::mlp_pipelined_layouts;
using testing::MlpLayout;
using testing::train_mlp;
using testing::TrainingRun;
using testing::values_of;

// Trains every layout and compares it with the first (the 1-rank run), which it returns.
TrainingRun expect_layouts_train_like_the_first(const std::vector<MlpLayout>& layouts,
                                                OptimizerConfig::Kind optimizer) {
  const TrainingRun reference = train_mlp(layouts[0], optimizer, 3);
  for (size_t i = 1; i < layouts.size(); ++i) {
    expect_same_training(reference, train_mlp(layouts[i], optimizer, 3), layouts[i].name);
  }
  return reference;
}

TEST(EndToEnd, MlpTrainsTheSameUnderEveryLayoutWithSgd) {
  const TrainingRun reference =
      expect_layouts_train_like_the_first(mlp_layouts(), OptimizerConfig::Kind::kSgd);
  EXPECT_LT(reference.losses.back(), reference.losses.front());
}

TEST(EndToEnd, MlpTrainsTheSameUnderEveryLayoutWithAdamW) {
  expect_layouts_train_like_the_first(mlp_layouts(), OptimizerConfig::Kind::kAdamW);
}

TEST(EndToEnd, MicroBatchesAndPipelineStagesTrainLikeOneBatch) {
  expect_layouts_train_like_the_first(mlp_pipelined_layouts(), OptimizerConfig::Kind::kAdamW);
}

// A 4-layer MLP with one layer per stage on 4 ranks (and two per stage on 2): the layouts the
// actor runtime's pipeline tests use, checked here against the 1-rank run.
TEST(EndToEnd, DeeperMlpOnFourAndTwoPipelineStagesTrainsLikeOneRank) {
  const TrainingRun reference = expect_layouts_train_like_the_first(mlp_deep_pipelined_layouts(),
                                                                    OptimizerConfig::Kind::kAdamW);
  EXPECT_EQ(reference.weights.size(), 8u);  // w1 .. w4, b1 .. b4
}

TEST(EndToEnd, ZeroShardsStateAndTrainsLikeOneRank) {
  const auto all = mlp_layouts();
  const TrainingRun reference = train_mlp(all[0], OptimizerConfig::Kind::kAdamW, 3);
  for (const int stage : {1, 2, 3}) {
    for (const char* name : {"dp2", "dp3_uneven", "dp2_tp2"}) {
      MlpLayout layout =
          *std::find_if(all.begin(), all.end(), [&](const MlpLayout& l) { return l.name == name; });
      layout.zero_stage = stage;
      layout.name += str_cat("_zero", stage);
      expect_same_training(reference, train_mlp(layout, OptimizerConfig::Kind::kAdamW, 3),
                           layout.name);
      // Under gradient accumulation the shards' gradients are reduce-scattered every
      // micro-batch and accumulate as shards (Note [Sharded gradients under accumulation]).
      layout.micro_batches = 4;
      layout.name += "_micro4";
      expect_same_training(reference, train_mlp(layout, OptimizerConfig::Kind::kAdamW, 3),
                           layout.name);
    }
  }
  // Each rank keeps a shard of every trainable variable's state; stages 1 and 2 keep the
  // variable whole (Note [ZeRO stages 1 and 2]), stage 3 its shard too.
  for (const int stage : {1, 2, 3}) {
    MlpLayout dp2 = all[1];
    dp2.zero_stage = stage;
    const proto::PlanProto plan = compile_graph(build_mlp(dp2, OptimizerConfig::Kind::kAdamW));
    int seen = 0;
    for (const auto& reg : plan.ranks(0).registers()) {
      const std::string name = register_name_of(plan.ranks(0), reg);
      if (name == "w1") {
        EXPECT_EQ(reg.shape().dims(0), stage == 3 ? kMlpIn / 2 : kMlpIn) << "stage " << stage;
        ++seen;
      }
      if (name == "w1.exp_avg" || name == "w1.exp_avg_sq") {
        EXPECT_EQ(reg.shape().dims(0), kMlpIn / 2) << name << " stage " << stage;
        ++seen;
      }
    }
    EXPECT_EQ(seen, 3) << "stage " << stage;
  }
}

// Dropout in a plan: a fresh mask every iteration and every micro-batch, the same mask whatever
// the layout (the counters are logical).
std::vector<Tensor> dropout_outputs(const Placement& placement, const NdSbp& sbp, int micro) {
  GraphBuilder b("dropout");
  b.set_placement(placement);
  const int x = b.input("x", Shape{8 / micro, 16}, DataType::kFloat32, sbp);
  b.fetch(b.op1("dropout", DropoutParams{0.5, 11, 0}, {x}, "drop"));
  b.train().gradient_accumulation_steps = micro;
  actor::ReferenceExecutor executor(compile_graph(std::move(b.graph())));
  std::vector<Tensor> out;
  for (int step = 0; step < 2; ++step) {
    out.push_back(executor.run({{"x", functional::fill(Shape{8, 16}, DataType::kFloat32, 1)}})
                      .at("drop/out0"));
  }
  return out;
}

TEST(EndToEnd, DropoutDrawsAFreshMaskEachIterationAndMicroBatch) {
  const auto single = dropout_outputs(Placement::parse("cpu, [0]"), {B()}, 1);
  EXPECT_NE(values_of(single[0]), values_of(single[1]));  // a new mask each iteration
  const auto dp2 = dropout_outputs(Placement::parse("cpu, [0, 1]"), {S(0)}, 1);
  EXPECT_EQ(values_of(dp2[0]), values_of(single[0]));  // the layout does not change the mask
  EXPECT_EQ(values_of(dp2[1]), values_of(single[1]));
  const auto micro = dropout_outputs(Placement::parse("cpu, [0]"), {B()}, 2);  // (2, 4, 16)
  const std::vector<double> v = values_of(micro[0]);
  EXPECT_NE(std::vector<double>(v.begin(), v.begin() + 64),
            std::vector<double>(v.begin() + 64, v.end()));
}

// Each process compiles only its own ranks: every part equals that rank's part of the whole
// job's plan, so parts compiled in different processes fit together.
TEST(EndToEnd, CompilingOneRankGivesThatRanksPartOfTheWholePlan) {
  std::vector<MlpLayout> all = mlp_layouts();
  const auto piped = mlp_pipelined_layouts();
  all.insert(all.end(), piped.begin(), piped.end());
  for (const MlpLayout& layout : all) {
    const proto::PlanProto whole = compile_graph(build_mlp(layout, OptimizerConfig::Kind::kAdamW));
    for (const auto& part : whole.ranks()) {
      CompileOptions options;
      options.ranks = {part.rank()};
      const proto::PlanProto one =
          compile_graph(build_mlp(layout, OptimizerConfig::Kind::kAdamW), options);
      ASSERT_EQ(one.ranks_size(), 1) << layout.name;
      EXPECT_EQ(one.ranks(0).SerializeAsString(), part.SerializeAsString())
          << layout.name << " rank " << part.rank();
      // The params its tasks index (Note [Implicit plan fields] in oneflowlike/plan_task.h).
      ASSERT_EQ(one.op_params_size(), whole.op_params_size()) << layout.name;
      for (int i = 0; i < whole.op_params_size(); ++i) {
        EXPECT_EQ(one.op_params(i).SerializeAsString(), whole.op_params(i).SerializeAsString());
      }
    }
  }
  CompileOptions bad;
  bad.ranks = {9};
  EXPECT_THROW(compile_graph(build_mlp(mlp_layouts()[1], OptimizerConfig::Kind::kSgd), bad), Error);
}

TEST(EndToEnd, CompileReportsUserErrorsAsStatus) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 4});
  b.op1("relu", NoParams{}, {x}, "act", {S(0)});
  proto::JobProto job;
  b.to_job(&job);
  // An SBP hint with two dimensions on a 1-d placement.
  job.mutable_ops(1)->mutable_output_sbp_hints(0)->add_sbp();
  const auto result = compile(job);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("'act'"), std::string::npos)
      << result.status().message();
}

}  // namespace
}  // namespace ofl::compiler
