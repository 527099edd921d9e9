// Trains a tiny GPT for a few AdamW steps under data, tensor, pipeline and mixed layouts with the
// reference executor (tests/cpp/models/gpt_training.h): every layout must reproduce the 1-rank
// loss curve and final weights. Also checks how build_gpt places and splits the model.

#include "compiler/models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/compile.h"
#include "tests/cpp/models/gpt_training.h"

namespace ofl::compiler {
namespace {

using testing::expect_same_gpt_training;
using testing::tiny_gpt_config;
using testing::train_gpt;
using testing::TrainingRun;

TEST(GptModel, TrainsTheSameUnderDataTensorAndTwoDimensionalParallelism) {
  const GptConfig config = tiny_gpt_config();
  const TrainingRun reference = train_gpt(config, GptParallel{}, 3);
  ASSERT_EQ(reference.weights.size(), 2u + 2u * 12u + 2u + 1u);
  EXPECT_LT(reference.losses.back(), reference.losses.front());
  const std::vector<std::pair<std::string, GptParallel>> layouts = {
      {"dp2", {2, 1}}, {"tp2", {1, 2}}, {"dp2xtp2", {2, 2}}, {"dp4", {4, 1}}};
  for (const auto& [name, parallel] : layouts) {
    expect_same_gpt_training(reference, train_gpt(config, parallel, 3), config, name);
  }
}

// Pipeline stages with micro-batches (GPipe-style: gradients accumulated over the micro-batches,
// one update per step) must train exactly like one device taking the whole batch at once.
TEST(GptModel, PipelineStagesWithMicroBatchesTrainTheSameAsOneDevice) {
  const GptConfig config = tiny_gpt_config();
  const TrainingRun reference = train_gpt(config, GptParallel{}, 3);
  const std::vector<std::pair<std::string, GptParallel>> layouts = {
      {"pp2_micro4", {.pp = 2, .micro_batches = 4}},
      {"dp2xpp2_micro2", {.dp = 2, .pp = 2, .micro_batches = 2}},
      {"dp2xtp2xpp2_micro2", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}}};
  for (const auto& [name, parallel] : layouts) {
    expect_same_gpt_training(reference, train_gpt(config, parallel, 3), config, name);
  }
}

TEST(GptModel, TiedHeadTrainsTheSameUnderTwoDimensionalParallelismAndPipelineStages) {
  GptConfig config = tiny_gpt_config();
  config.tied_head = true;
  const TrainingRun reference = train_gpt(config, GptParallel{}, 2);
  EXPECT_EQ(reference.weights.count("lm_head.weight"), 0u);
  expect_same_gpt_training(reference, train_gpt(config, GptParallel{2, 2}, 2), config,
                           "tied dp2xtp2");
  // Across stages the last stage reads wte from stage 0 and sends its gradient back.
  expect_same_gpt_training(
      reference, train_gpt(config, GptParallel{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2}, 2),
      config, "tied dp2xtp2xpp2");
}

// Megatron's forward: with the hints alone, SBP inference all-reduces the output of each
// row-parallel projection (attn.c_proj, mlp.c_proj) and communicates nothing else.
TEST(GptModel, TensorParallelForwardAllReducesOnlyTheRowParallelOutputs) {
  GraphBuilder b("gpt");
  const int loss = build_gpt(b, tiny_gpt_config(), GptParallel{.dp = 1, .tp = 2});
  b.set_loss(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  Graph graph = std::move(b.graph());
  run_logical_passes(graph);
  const auto consumers = graph.consumers();
  std::vector<std::string> forward_boxing;
  for (int i = 0; i < graph.num_ops(); ++i) {
    const LogicalOp& op = graph.op(i);
    if (op.kind != OpKind::kBoxing) continue;
    for (int consumer : consumers[op.outputs[0]]) {
      if (graph.op(consumer).role != OpRole::kForward) continue;
      forward_boxing.push_back(graph.tensor(op.inputs[0]).name + " " +
                               nd_sbp_to_string(op.boxing.in_sbp) + "->" +
                               nd_sbp_to_string(op.boxing.out_sbp));
      break;
    }
  }
  std::sort(forward_boxing.begin(), forward_boxing.end());
  std::vector<std::string> expected;
  for (const char* layer : {"h0", "h1"}) {
    for (const char* proj : {".attn.c_proj", ".mlp.c_proj"}) {
      const std::string name = std::string(layer) + proj;
      expected.push_back(name + ".add_bias/out0 P->B");  // the all-reduce
      expected.push_back(name + ".bias B->P");           // bias added on one rank: no transfer
    }
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(forward_boxing, expected);
}

TEST(GptModel, PlacesTwoDimensionalLayoutsOnADpByTpGrid) {
  const GptParallel dp2_tp4{.dp = 2, .tp = 4}, tp4{.dp = 1, .tp = 4}, dp4{.dp = 4, .tp = 1};
  const Placement grid = dp2_tp4.placement();
  EXPECT_EQ(grid.hierarchy(), Shape({2, 4}));
  EXPECT_EQ(grid.rank(5), 5);
  EXPECT_EQ(tp4.placement().hierarchy(), Shape({4}));
  EXPECT_EQ(dp2_tp4.sbp(S(0), B()), NdSbp({S(0), B()}));
  EXPECT_EQ(tp4.sbp(S(0), S(1)), NdSbp({S(1)}));
  EXPECT_EQ(dp4.sbp(S(0), S(1)), NdSbp({S(0)}));
}

TEST(GptModel, PutsEachPipelineStageOnItsOwnDpByTpRanks) {
  const GptParallel p{.dp = 2, .tp = 2, .pp = 3};
  EXPECT_EQ(p.num_ranks(), 12);
  EXPECT_EQ(p.placement(0), Placement::parse("cpu, [[0, 1], [2, 3]]"));
  EXPECT_EQ(p.placement(2), Placement::parse("cpu, [[8, 9], [10, 11]]"));
  EXPECT_EQ((GptParallel{.dp = 2, .pp = 2}).placement(1), Placement::parse("cpu, [2, 3]"));
  EXPECT_THROW(p.placement(3), Error);
}

// Stages split the blocks contiguously (3 blocks on 2 stages: 2 + 1), the embeddings are on the
// first stage and the head on the last, the graph has one micro-batch of rows, and the only
// tensors crossing stages are the residual stream and its gradient (send/recv, no collective).
TEST(GptModel, PipelineStagesSplitBlocksAndPassOnlyTheResidualStream) {
  GptConfig config = tiny_gpt_config();
  config.n_layer = 3;
  const GptParallel parallel{.dp = 2, .pp = 2, .micro_batches = 2};
  const auto build = [&] {
    GraphBuilder b("gpt");
    const int loss = build_gpt(b, config, parallel);
    b.fetch(loss);
    b.set_loss(loss);
    b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
    return std::move(b.graph());
  };
  Graph graph = build();
  EXPECT_EQ(graph.train.gradient_accumulation_steps, 2);
  std::map<std::string, int> stage_of;
  for (int i = 0; i < graph.num_ops(); ++i) {
    const LogicalOp& op = graph.op(i);
    stage_of[op.name] = op.stage;
    EXPECT_EQ(op.placement, parallel.placement(op.stage)) << op.describe();
  }
  EXPECT_EQ(stage_of.at("tokens"), 0);
  EXPECT_EQ(stage_of.at("wte"), 0);
  EXPECT_EQ(stage_of.at("h1.mlp.c_fc.weight"), 0);
  EXPECT_EQ(stage_of.at("h2.ln_1.weight"), 1);
  EXPECT_EQ(stage_of.at("stage1.input"), 1);
  EXPECT_EQ(stage_of.at("stage1.causal_mask"), 1);
  EXPECT_EQ(stage_of.at("targets"), 1);
  EXPECT_EQ(stage_of.at("lm_head.weight"), 1);
  EXPECT_EQ(stage_of.at(GptNames::kLoss), 1);
  EXPECT_EQ(graph.tensor(graph.op(0).outputs[0]).meta.shape, Shape({2, config.block_size}));

  run_logical_passes(graph);
  std::vector<std::string> crossing;
  for (int i = 0; i < graph.num_ops(); ++i) {
    const LogicalOp& op = graph.op(i);
    if (op.kind == OpKind::kBoxing && op.boxing.in_placement != op.boxing.out_placement) {
      crossing.push_back(graph.tensor(op.inputs[0]).name + " " +
                         nd_sbp_to_string(op.boxing.in_sbp) + "->" +
                         nd_sbp_to_string(op.boxing.out_sbp));
    }
  }
  ASSERT_EQ(crossing.size(), 2u) << ::testing::PrintToString(crossing);
  std::sort(crossing.begin(), crossing.end());
  EXPECT_EQ(crossing[0], "h1.residual_2/out0 S(0)->S(0)");
  EXPECT_EQ(crossing[1], "stage1.input.grad/reshape/out0 S(0)->S(0)");  // its gradient, summed

  const proto::PlanProto plan = compile_graph(build());
  EXPECT_EQ(plan.ranks_size(), 4);
  EXPECT_EQ(plan.micro_batches(), 2);
  EXPECT_EQ(plan.pipeline_depth(), 2);
}

TEST(GptModel, RejectsBatchesThatMicroBatchesAndDataParallelRanksCannotShare) {
  GptConfig config = tiny_gpt_config();  // batch_size 4
  GraphBuilder b("gpt");
  try {
    build_gpt(b, config, GptParallel{.dp = 2, .pp = 2, .micro_batches = 4});
    FAIL() << "build_gpt accepted batch_size = 4 with micro_batches = 4 and dp = 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string message = e.what();
    for (const char* part : {"batch_size = 4", "micro_batches = 4", "dp = 2"}) {
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }
}

TEST(GptModel, RejectsMorePipelineStagesThanBlocks) {
  GraphBuilder b("gpt");
  try {
    build_gpt(b, tiny_gpt_config(), GptParallel{.pp = 3});  // n_layer 2
    FAIL() << "build_gpt accepted n_layer = 2 with pp = 3";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string message = e.what();
    EXPECT_NE(message.find("n_layer = 2, pp = 3"), std::string::npos) << message;
  }
}

TEST(GptModel, RejectsHeadCountsThatTensorParallelRanksCannotShare) {
  GptConfig config = tiny_gpt_config();
  config.n_head = 2;
  GraphBuilder b("gpt");
  try {
    build_gpt(b, config, GptParallel{1, 4});
    FAIL() << "build_gpt accepted n_head = 2 with tp = 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string message = e.what();
    EXPECT_NE(message.find("n_head = 2"), std::string::npos) << message;
    EXPECT_NE(message.find("tp = 4"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ofl::compiler

namespace ofl::compiler {
namespace {

// What one process compiles (CompileOptions::ranks) is exactly its rank's part of the whole
// plan, for a 3-D parallel GPT with micro-batches (rings, stage boundaries, ZeRO sharding).
// ZeRO adds gathers whose tasks wait on control inputs (Note [ZeRO-3 gathers twice], Note
// [ZeRO stages 1 and 2]): those must agree between the two ways of compiling too.
TEST(GptModel, EachRanksOwnCompileEqualsItsPartOfTheWholePlan) {
  for (const int stage : {1, 3}) {
    auto graph = [stage] {
      GraphBuilder b("gpt_parts");
      const int loss = build_gpt(b, tiny_gpt_config(),
                                 GptParallel{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2});
      b.set_loss(loss);
      b.fetch(loss);
      b.train().optimizer.kind = OptimizerConfig::Kind::kAdamW;
      b.train().zero_stage = stage;
      return std::move(b.graph());
    };
    const proto::PlanProto whole = compile_graph(graph());
    ASSERT_EQ(whole.ranks_size(), 8);
    int gathers_waiting = 0;
    for (const auto& part : whole.ranks()) {
      for (const auto& task : part.tasks()) {
        if (task.kind() == proto::TaskProto::COLLECTIVE && task.control_inputs_size() > 0) {
          ++gathers_waiting;
        }
      }
      CompileOptions options;
      options.ranks = {part.rank()};
      const proto::PlanProto one = compile_graph(graph(), options);
      ASSERT_EQ(one.ranks_size(), 1);
      EXPECT_EQ(one.world_size(), whole.world_size());
      EXPECT_EQ(one.ranks(0).SerializeAsString(), part.SerializeAsString())
          << "stage " << stage << " rank " << part.rank();
      // The params its tasks index (Note [Implicit plan fields] in oneflowlike/plan_task.h).
      ASSERT_EQ(one.op_params_size(), whole.op_params_size());
      for (int i = 0; i < whole.op_params_size(); ++i) {
        EXPECT_EQ(one.op_params(i).SerializeAsString(), whole.op_params(i).SerializeAsString());
      }
    }
    // Stage 3: the gathers placed next to their readers; stage 1: the gathers of updated
    // shards, after the update (Note [ZeRO stages 1 and 2]).
    EXPECT_GT(gathers_waiting, 0) << "stage " << stage;
  }
}

}  // namespace
}  // namespace ofl::compiler
