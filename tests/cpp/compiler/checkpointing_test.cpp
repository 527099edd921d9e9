// Activation checkpointing (Note [Activation checkpointing] in compiler/passes/checkpointing.cpp)
// and the logical control inputs it relies on: checkpointed models train exactly like the
// uncheckpointed 1-rank run, the backward reads recomputed tensors, and peak memory drops.

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include "actor/reference_executor.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/unary.h"
#include "oneflowlike/proto/job.pb.h"
#include "tests/cpp/compiler/training_util.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler {
namespace {

using testing::random_tensor;
using testing::values_of;

struct Model {
  int64_t batch = 8;
  int64_t width = 10;  // of the activations inside a block
  int64_t io = 6;      // of a block's input and output
  int blocks = 2;
  bool checkpoint = true;
  Placement placement = Placement::parse("cpu, [0]");
  NdSbp data = {B()};
  // When set, labels, the head and the loss form pipeline stage 1 on this placement.
  std::optional<Placement> head = std::nullopt;
};

constexpr int64_t kClasses = 4;

Initializer normal(int64_t seed) { return Initializer{Initializer::Kind::kNormal, 0.0, 0.3, seed}; }

// blocks x [y = tanh(dropout(gelu(x @ wa + ba)) @ wb)] with x, y (batch, io) and the rest
// (batch, width), then logits = y @ w_out and a mean cross-entropy. With `checkpoint`, each
// block is checkpoint group "block<l>".
Graph build(const Model& m) {
  GraphBuilder b("checkpointed_mlp");
  b.set_placement(m.placement);
  int x = b.input("x", Shape{m.batch, m.io}, DataType::kFloat32, m.data);
  if (m.head) b.set_placement(*m.head);
  const int labels = b.input("labels", Shape{m.batch}, DataType::kInt64, m.data);
  b.set_placement(m.placement);
  for (int l = 0; l < m.blocks; ++l) {
    const std::string p = str_cat("block", l);
    const int wa = b.variable(p + ".wa", Shape{m.io, m.width}, normal(10 * l + 1), {B()});
    const int ba = b.variable(p + ".ba", Shape{m.width}, normal(10 * l + 2), {B()});
    const int wb = b.variable(p + ".wb", Shape{m.width, m.io}, normal(10 * l + 3), {B()});
    if (m.checkpoint) b.set_checkpoint_group(p);
    int h = b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, wa}, p + ".fc1"), ba});
    h = b.op1("gelu", GeluParams{}, {h}, p + ".gelu");
    h = b.op1("dropout", DropoutParams{0.25, 7, 1000 * l}, {h}, p + ".dropout");
    x = b.op1("tanh", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, wb}, p + ".fc2")},
              p + ".tanh");
    b.set_checkpoint_group("");
  }
  if (m.head) {
    b.set_placement(*m.head);
    b.set_stage(1);
  }
  const int w_out = b.variable("w_out", Shape{m.io, kClasses}, normal(99), {B()});
  const int logits = b.op1("matmul", MatmulParams{}, {x, w_out}, "head");
  const int per_sample = b.op1("sparse_softmax_cross_entropy", NoParams{}, {logits, labels});
  const int loss = b.op1("reduce_mean", ReduceParams{}, {per_sample}, "loss");
  b.fetch(loss);
  b.set_loss(loss);
  b.train().optimizer.kind = OptimizerConfig::Kind::kSgd;
  b.train().optimizer.momentum = 0.9;
  return std::move(b.graph());
}

using testing::TrainingRun;

TrainingRun train(const Model& m, int steps) {
  actor::ReferenceExecutor executor(compile_graph(build(m)));
  executor.use_planned_memory();  // shared registers really share: checks the memory plan
  executor.initialize_variables();
  TrainingRun run;
  for (int step = 1; step <= steps; ++step) {  // one fixed batch: the loss must fall
    std::map<std::string, Tensor> feed;
    feed["x"] = random_tensor(Shape{m.batch, m.io}, DataType::kFloat32, 100);
    std::vector<double> labels(m.batch);
    for (int64_t i = 0; i < m.batch; ++i) labels[i] = (i * 7) % kClasses;
    feed["labels"] = testing::make_tensor(labels, Shape{m.batch}, DataType::kInt64);
    feed["lr"] = Tensor::scalar(0.1, DataType::kFloat32);
    if (m.head) feed["lr@1"] = Tensor::scalar(0.1, DataType::kFloat32);
    run.losses.push_back(values_of(executor.run(feed).at("loss/out0")).at(0));
  }
  for (int l = 0; l < m.blocks; ++l) {
    for (const char* w : {".wa", ".ba", ".wb"}) {
      const std::string name = str_cat("block", l, w);
      run.weights[name] = values_of(executor.read_variable(name));
    }
  }
  run.weights["w_out"] = values_of(executor.read_variable("w_out"));
  return run;
}

using testing::expect_same_training;

TEST(Checkpointing, CheckpointedBlocksTrainExactlyLikeTheUncheckpointedOneRankRun) {
  Model plain;
  plain.checkpoint = false;
  // Dropout draws a fresh mask every iteration, so the loss need not fall every step; what
  // matters is that the recomputation draws the same mask as the original forward.
  const TrainingRun reference = train(plain, 3);

  Model one_rank;
  expect_same_training(reference, train(one_rank, 3), "checkpointed, 1 rank");

  Model dp2;
  dp2.placement = Placement::parse("cpu, [0, 1]");
  dp2.data = {S(0)};
  expect_same_training(reference, train(dp2, 3), "checkpointed, DP2");
}

// Index of the op whose name is `name`, or -1.
int find_op(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name == name) return i;
  }
  return -1;
}

TEST(Checkpointing, AGroupWhoseOutputGradientComesFromAnotherStageTrainsTheSame) {
  Model plain;
  plain.checkpoint = false;
  const TrainingRun reference = train(plain, 3);
  Model pipelined;
  pipelined.head = Placement::parse("cpu, [1]");
  expect_same_training(reference, train(pipelined, 3), "checkpointed, head on stage 1");

  // The gradient of block1's output is made on rank 1; a copy on rank 0 orders the recompute.
  Graph g = build(pipelined);
  run_logical_passes(g);
  const int root = find_op(g, "block1.fc1.recompute");
  ASSERT_GE(root, 0);
  bool after_relay = false;
  for (int c : g.op(root).control_inputs) {
    EXPECT_EQ(g.op(c).placement, g.op(root).placement) << g.op(c).name;
    after_relay = after_relay || g.op(c).name.find(".to_group") != std::string::npos;
  }
  EXPECT_TRUE(after_relay);
}

TEST(Checkpointing, BackwardOpsOfAGroupReadTheRecomputedTensorsNotTheOriginals) {
  Graph g = build(Model{});
  run_logical_passes(g);

  std::set<std::string> recomputed;
  int group_backward_reads_of_recomputed = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.recompute) {
      recomputed.insert(op.name);
      EXPECT_EQ(op.role, OpRole::kForward) << op.name;
      EXPECT_FALSE(op.checkpoint_group.empty()) << op.name;
    }
    if (op.role != OpRole::kBackward || op.checkpoint_group.empty()) continue;
    for (int t : op.inputs) {
      int p = g.tensor(t).producer;
      // Look through boxing ops (none on one rank, but keep the check layout-independent).
      while (g.op(p).kind == OpKind::kBoxing) p = g.tensor(g.op(p).inputs[0]).producer;
      const LogicalOp& producer = g.op(p);
      // Reading an activation of its own group: only through a recomputed copy.
      if (producer.role == OpRole::kForward && producer.kind == OpKind::kCompute &&
          producer.checkpoint_group == op.checkpoint_group) {
        EXPECT_TRUE(producer.recompute)
            << op.name << " reads '" << g.tensor(t).name << "' from the original " << producer.name;
        ++group_backward_reads_of_recomputed;
      }
    }
  }
  EXPECT_GT(group_backward_reads_of_recomputed, 0);
  // Every forward op of both blocks is recomputed: each one's output is read by a backward op
  // or feeds one that is (dropout has no fused step, so no chain here is fused).
  for (int l = 0; l < 2; ++l) {
    for (const char* op : {".fc1", ".gelu", ".dropout", ".tanh"}) {
      EXPECT_TRUE(recomputed.count(str_cat("block", l, op, ".recompute")))
          << "block" << l << op << " is not recomputed";
    }
  }

  // The recomputation of block1 waits for the gradient of block1's output (from the head's
  // backward); block0's waits for the gradient coming out of block1's backward.
  for (int l = 0; l < 2; ++l) {
    const int fc1 = find_op(g, str_cat("block", l, ".fc1.recompute"));
    ASSERT_GE(fc1, 0);
    const LogicalOp& root = g.op(fc1);
    ASSERT_FALSE(root.control_inputs.empty()) << root.name;
    std::set<std::string> after;
    for (int c : root.control_inputs) {
      EXPECT_EQ(g.op(c).role, OpRole::kBackward) << g.op(c).name;
      EXPECT_NE(g.op(c).checkpoint_group, root.checkpoint_group) << g.op(c).name;
      after.insert(g.op(c).name);
    }
    // Block0 also waits for block1's weight gradients, so that they do not wait until the end
    // of the backward with block0's recomputed activations alive.
    if (l == 0) {
      EXPECT_TRUE(after.count("block1.fc1.grad/matmul_1") &&
                  after.count("block1.fc2.grad/matmul_1"))
          << root.name << " does not wait for block1's weight gradients";
    }
    // Its originals are no longer read by any backward op.
    const int original = find_op(g, str_cat("block", l, ".dropout"));
    ASSERT_GE(original, 0);
    const auto consumers = g.consumers();
    for (int c : consumers[g.op(original).outputs[0]]) {
      EXPECT_NE(g.op(c).role, OpRole::kBackward) << g.op(c).name;
    }
  }
  // The recomputation comes after that gradient in the topological order (so in plan order).
  const std::vector<int> order = g.topological_order();
  auto position = [&](int op) { return std::find(order.begin(), order.end(), op) - order.begin(); };
  const int root = find_op(g, "block0.fc1.recompute");
  for (int c : g.op(root).control_inputs) EXPECT_LT(position(c), position(root));
  EXPECT_GT(position(root), position(find_op(g, "block1.fc1.recompute")));
}

TEST(Checkpointing, WithoutGroupsTheBackwardReadsTheForwardActivations) {
  Model m;
  m.checkpoint = false;
  Graph g = build(m);
  run_logical_passes(g);
  for (int i = 0; i < g.num_ops(); ++i) EXPECT_FALSE(g.op(i).recompute) << g.op(i).name;
  const int dropout = find_op(g, "block0.dropout");  // fc2's weight gradient reads its output
  ASSERT_GE(dropout, 0);
  bool read_by_backward = false;
  const auto consumers = g.consumers();
  for (int c : consumers[g.op(dropout).outputs[0]]) {
    read_by_backward = read_by_backward || g.op(c).role == OpRole::kBackward;
  }
  EXPECT_TRUE(read_by_backward);
}

int64_t peak_bytes(const Model& m) {
  const proto::PlanProto plan = compile_graph(build(m));
  int64_t peak = 0;
  for (const auto& rank : plan.ranks()) peak = std::max(peak, rank.peak_bytes());
  return peak;
}

TEST(Checkpointing, PeakMemoryPerRankDropsForLargeActivationsInSeveralGroups) {
  Model m;  // (64, 256) activations inside the blocks, (64, 16) between them
  m.batch = 64;
  m.width = 256;
  m.io = 16;
  m.blocks = 4;
  m.checkpoint = false;
  const int64_t without = peak_bytes(m);
  m.checkpoint = true;
  const int64_t with = peak_bytes(m);
  // One (64, 256) float activation is 64 KiB.
  EXPECT_LT(with, without) << "with checkpointing " << with << " bytes, without " << without;
  EXPECT_LE(with + 4 * 65536, without) << "with " << with << ", without " << without;

  // DP2: each rank's activations halve, while its gradients and their all-reduces' buffers
  // (Note [Collective scratch]) do not; a larger batch keeps the activations the largest part.
  m.placement = Placement::parse("cpu, [0, 1]");
  m.data = {S(0)};
  m.batch = 256;
  const int64_t dp_with = peak_bytes(m);
  m.checkpoint = false;
  const int64_t dp_without = peak_bytes(m);
  EXPECT_LT(dp_with, dp_without) << "DP2: with " << dp_with << ", without " << dp_without;
}

TEST(Checkpointing, AGroupThatLeavesAndReentersIsRejected) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 4});
  const int w = b.variable("w", Shape{4, 4}, normal(1));
  b.set_checkpoint_group("g");
  const int a = b.op1("matmul", MatmulParams{}, {x, w}, "inside1");
  b.set_checkpoint_group("");
  const int c = b.op1("tanh", NoParams{}, {a}, "outside");
  b.set_checkpoint_group("g");
  const int d = b.op1("add", NoParams{}, {c, a}, "inside2");
  b.set_checkpoint_group("");
  b.set_loss(b.op1("reduce_mean", ReduceParams{}, {d}));
  testing::expect_error([&] { run_logical_passes(b.graph()); }, ErrorCode::kInvalidArgument,
                        "checkpoint group 'g' must form one segment");
}

TEST(Checkpointing, TheGroupIsReadFromAndWrittenToTheJob) {
  Graph g = build(Model{});
  proto::JobProto job;
  graph_to_job(g, &job);
  int in_groups = 0;
  for (const auto& op : job.ops()) in_groups += op.checkpoint_group().empty() ? 0 : 1;
  EXPECT_EQ(in_groups, 2 * 6);  // per block: fc1, add, gelu, dropout, fc2, tanh
  const Graph back = graph_from_job(job);
  EXPECT_EQ(back.op(find_op(back, "block1.gelu")).checkpoint_group, "block1");
  EXPECT_EQ(back.op(find_op(back, "head")).checkpoint_group, "");
}

TEST(ControlInputs, BecomeTaskControlInputsOnEveryRankOfThePlacement) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 2}, DataType::kFloat32, {S(0)});
  const int first = b.op1("tanh", NoParams{}, {x}, "first");
  const int second = b.op1("relu", NoParams{}, {x}, "second");
  b.fetch(first);
  b.fetch(second);
  Graph& g = b.graph();
  // "first" must act after "second" although it is listed (and would be planned) before it.
  g.op(g.tensor(first).producer).control_inputs.push_back(g.tensor(second).producer);
  const proto::PlanProto plan = compile_graph(g);
  for (const auto& rank : plan.ranks()) {
    std::map<std::string, const proto::TaskProto*> tasks;
    std::vector<std::string> order;
    for (const auto& t : rank.tasks()) {
      tasks[t.name()] = &t;
      order.push_back(t.name());
    }
    ASSERT_TRUE(tasks.count("first") && tasks.count("second"));
    const auto& control = tasks["first"]->control_inputs();
    EXPECT_NE(std::find(control.begin(), control.end(), tasks["second"]->id()), control.end())
        << "rank " << rank.rank();
    EXPECT_LT(std::find(order.begin(), order.end(), "second"),
              std::find(order.begin(), order.end(), "first"))
        << "rank " << rank.rank();
  }
}

TEST(ControlInputs, BetweenDifferentPlacementsAreRejected) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 2});
  const int first = b.op1("tanh", NoParams{}, {x}, "first");
  b.set_placement(Placement::parse("cpu, [1]"));
  const int second = b.op1("relu", NoParams{}, {x}, "second");
  b.fetch(first);
  b.fetch(second);
  Graph& g = b.graph();
  g.op(g.tensor(first).producer).control_inputs.push_back(g.tensor(second).producer);
  testing::expect_error([&] { compile_graph(g); }, ErrorCode::kFailedPrecondition,
                        "needs both on one placement");
}

TEST(ControlInputs, SurviveDeadCodeEliminationRenumbering) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4});
  b.op1("neg", NoParams{}, {x}, "dead");  // removed, so every later op index shifts
  const int first = b.op1("tanh", NoParams{}, {x}, "first");
  const int second = b.op1("relu", NoParams{}, {x}, "second");
  b.fetch(first);
  b.fetch(second);
  Graph& g = b.graph();
  g.op(g.tensor(first).producer).control_inputs.push_back(g.tensor(second).producer);
  make_dead_code_elimination_pass()->run(g, CompileOptions{});
  const int f = find_op(g, "first");
  ASSERT_GE(f, 0);
  ASSERT_EQ(g.op(f).control_inputs.size(), 1u);
  EXPECT_EQ(g.op(g.op(f).control_inputs[0]).name, "second");
  EXPECT_EQ(find_op(g, "dead"), -1);
}

}  // namespace
}  // namespace ofl::compiler
