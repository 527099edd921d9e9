// Compiles training jobs for several parallel layouts and runs their plans with the reference
// executor: every layout must give the loss curve and the final weights of the 1-rank run.

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/compiler/training_util.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::random_tensor;
using testing::values_of;

// How one layout places the MLP: the placement and the SBP of each tensor it declares.
struct Layout {
  std::string name;
  Placement placement;
  NdSbp data;  // x and labels
  NdSbp w1, b1, w2, b2;
  int micro_batches = 1;
  int zero_stage = 0;
  // When set, the second layer and the loss form pipeline stage 1 on this placement.
  std::optional<Placement> stage1 = std::nullopt;
};

Initializer normal(int64_t seed) { return Initializer{Initializer::Kind::kNormal, 0.0, 0.3, seed}; }

constexpr int64_t kBatch = 8, kIn = 6, kHidden = 10, kClasses = 4;

// logits = relu(x @ w1 + b1) @ w2 + b2; loss = mean(cross_entropy(logits, labels)).
// The graph is written for one micro-batch (kBatch / micro_batches rows); the caller feeds
// the whole batch and the plan runs the micro-batches in turn.
Graph build_mlp(const Layout& layout, OptimizerConfig::Kind optimizer) {
  GraphBuilder b("mlp_" + layout.name);
  b.set_placement(layout.placement);
  const int64_t micro = kBatch / layout.micro_batches;
  const int x = b.input("x", Shape{micro, kIn}, DataType::kFloat32, layout.data);
  if (layout.stage1) {
    b.set_placement(*layout.stage1);
    b.set_stage(1);
  }
  const int labels = b.input("labels", Shape{micro}, DataType::kInt64, layout.data);
  b.set_placement(layout.placement);
  b.set_stage(0);
  const int w1 = b.variable("w1", Shape{kIn, kHidden}, normal(1), layout.w1);
  const int b1 = b.variable("b1", Shape{kHidden}, normal(2), layout.b1);
  const int h = b.op1("relu", NoParams{},
                      {b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}), b1})});
  if (layout.stage1) {
    b.set_placement(*layout.stage1);
    b.set_stage(1);
  }
  const int w2 = b.variable("w2", Shape{kHidden, kClasses}, normal(3), layout.w2);
  const int b2 = b.variable("b2", Shape{kClasses}, Initializer{}, layout.b2);
  const int logits = b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, w2}), b2});
  const int per_sample = b.op1("sparse_softmax_cross_entropy", NoParams{}, {logits, labels});
  const int loss = b.op1("reduce_mean", ReduceParams{}, {per_sample}, "loss");
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = optimizer;
  b.train().optimizer.momentum = 0.9;
  b.train().optimizer.weight_decay = 0.01;
  b.train().gradient_accumulation_steps = layout.micro_batches;
  b.train().zero_stage = layout.zero_stage;
  return std::move(b.graph());
}

using testing::TrainingRun;

TrainingRun train(const Layout& layout, OptimizerConfig::Kind optimizer, int steps) {
  actor::ReferenceExecutor executor(compile_graph(build_mlp(layout, optimizer)));
  executor.use_planned_memory();  // registers that share memory really do: checks the plan
  executor.initialize_variables();
  TrainingRun run;
  for (int step = 1; step <= steps; ++step) {
    std::map<std::string, Tensor> feed;
    feed["x"] = random_tensor(Shape{kBatch, kIn}, DataType::kFloat32, 100 + step);
    std::vector<double> labels(kBatch);
    for (int i = 0; i < kBatch; ++i) labels[i] = (i * 7 + step) % kClasses;
    feed["labels"] = testing::make_tensor(labels, Shape{kBatch}, DataType::kInt64);
    // The optimizer takes lr (and step) on each placement holding variables: "lr", "lr@1", ...
    for (const char* suffix : {"", "@1"}) {
      if (*suffix && !layout.stage1) continue;
      feed[str_cat("lr", suffix)] = Tensor::scalar(0.1, DataType::kFloat32);
      if (optimizer != OptimizerConfig::Kind::kSgd) {
        feed[str_cat("step", suffix)] = Tensor::scalar(step, DataType::kFloat32);
      }
    }
    auto fetched = executor.run(feed);
    // With micro-batches the loss comes back per micro-batch, (m,); their mean is the batch's.
    const Tensor loss = fetched.at("loss/out0");
    double mean = 0;
    for (double v : values_of(loss)) mean += v / static_cast<double>(loss.numel());
    run.losses.push_back(mean);
  }
  for (const char* w : {"w1", "b1", "w2", "b2"})
    run.weights[w] = values_of(executor.read_variable(w));
  return run;
}

using testing::expect_same_training;

std::vector<Layout> layouts() {
  const Placement one = Placement::parse("cpu, [0]");
  const Placement two = Placement::parse("cpu, [0, 1]");
  const Placement three = Placement::parse("cpu, [0, 1, 2]");
  const Placement four = Placement::parse("cpu, [0, 1, 2, 3]");
  const Placement grid = Placement::parse("cpu, [[0, 1], [2, 3]]");
  return {
      {"single", one, {B()}, {B()}, {B()}, {B()}, {B()}},
      {"dp2", two, {S(0)}, {B()}, {B()}, {B()}, {B()}},
      {"dp3_uneven", three, {S(0)}, {B()}, {B()}, {B()}, {B()}},
      {"dp4", four, {S(0)}, {B()}, {B()}, {B()}, {B()}},
      {"tp2", two, {B()}, {S(1)}, {S(0)}, {S(0)}, {B()}},
      {"dp2_tp2", grid, {S(0), B()}, {B(), S(1)}, {B(), S(0)}, {B(), S(0)}, {B(), B()}},
  };
}

TEST(EndToEnd, MlpTrainsTheSameUnderEveryLayoutWithSgd) {
  const auto all = layouts();
  const TrainingRun reference = train(all[0], OptimizerConfig::Kind::kSgd, 3);
  ASSERT_LT(reference.losses.back(), reference.losses.front());
  for (size_t i = 1; i < all.size(); ++i) {
    expect_same_training(reference, train(all[i], OptimizerConfig::Kind::kSgd, 3), all[i].name);
  }
}

TEST(EndToEnd, MlpTrainsTheSameUnderEveryLayoutWithAdamW) {
  const auto all = layouts();
  const TrainingRun reference = train(all[0], OptimizerConfig::Kind::kAdamW, 3);
  for (size_t i = 1; i < all.size(); ++i) {
    expect_same_training(reference, train(all[i], OptimizerConfig::Kind::kAdamW, 3), all[i].name);
  }
}

std::vector<Layout> pipelined_layouts() {
  const Placement one = Placement::parse("cpu, [0]");
  const Placement other = Placement::parse("cpu, [1]");
  const Placement two = Placement::parse("cpu, [0, 1]");
  const Placement next_two = Placement::parse("cpu, [2, 3]");
  Layout single{"single", one, {B()}, {B()}, {B()}, {B()}, {B()}};
  Layout accumulate4 = single;
  accumulate4.name = "single_accumulate4";
  accumulate4.micro_batches = 4;
  Layout dp2_accumulate2{"dp2_accumulate2", two, {S(0)}, {B()}, {B()}, {B()}, {B()}, 2, 0};
  Layout pp2{"pp2_micro4", one, {B()}, {B()}, {B()}, {B()}, {B()}, 4, 0, other};
  Layout dp2_pp2{"dp2_pp2_micro2", two, {S(0)}, {B()}, {B()}, {B()}, {B()}, 2, 0, next_two};
  return {single, accumulate4, dp2_accumulate2, pp2, dp2_pp2};
}

TEST(EndToEnd, MicroBatchesAndPipelineStagesTrainLikeOneBatch) {
  const auto all = pipelined_layouts();
  const TrainingRun reference = train(all[0], OptimizerConfig::Kind::kAdamW, 3);
  for (size_t i = 1; i < all.size(); ++i) {
    expect_same_training(reference, train(all[i], OptimizerConfig::Kind::kAdamW, 3), all[i].name);
  }
}

TEST(EndToEnd, ZeroShardsStateAndTrainsLikeOneRank) {
  const auto all = layouts();
  const TrainingRun reference = train(all[0], OptimizerConfig::Kind::kAdamW, 3);
  for (const char* name : {"dp2", "dp3_uneven", "dp2_tp2"}) {
    Layout layout =
        *std::find_if(all.begin(), all.end(), [&](const Layout& l) { return l.name == name; });
    layout.zero_stage = 1;
    layout.name += "_zero";
    expect_same_training(reference, train(layout, OptimizerConfig::Kind::kAdamW, 3), layout.name);
  }
  // The plan keeps a shard of every trainable variable and of its state per rank, reduces
  // gradients by reduce-scatter, and sends less than plain data parallelism would store.
  Layout dp2 = all[1];
  dp2.zero_stage = 1;
  const proto::PlanProto plan = compile_graph(build_mlp(dp2, OptimizerConfig::Kind::kAdamW));
  for (const auto& reg : plan.ranks(0).registers()) {
    if (reg.name() == "w1" || reg.name() == "w1.exp_avg" || reg.name() == "w1.exp_avg_sq") {
      EXPECT_EQ(reg.shape().dims(0), kIn / 2) << reg.name();
    }
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
  std::vector<Layout> all = layouts();
  const auto piped = pipelined_layouts();
  all.insert(all.end(), piped.begin(), piped.end());
  for (const Layout& layout : all) {
    const proto::PlanProto whole = compile_graph(build_mlp(layout, OptimizerConfig::Kind::kAdamW));
    for (const auto& part : whole.ranks()) {
      CompileOptions options;
      options.ranks = {part.rank()};
      const proto::PlanProto one =
          compile_graph(build_mlp(layout, OptimizerConfig::Kind::kAdamW), options);
      ASSERT_EQ(one.ranks_size(), 1) << layout.name;
      EXPECT_EQ(one.ranks(0).SerializeAsString(), part.SerializeAsString())
          << layout.name << " rank " << part.rank();
    }
  }
  CompileOptions bad;
  bad.ranks = {9};
  EXPECT_THROW(compile_graph(build_mlp(layouts()[1], OptimizerConfig::Kind::kSgd), bad), Error);
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
