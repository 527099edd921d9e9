// Optimizer pass: state variables, update ops, lr/step inputs, gradient clipping, and one
// training step run op by op with eager kernels against the eager optimizer math.

#include "oneflowlike/ops/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/builder.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/shape_ops.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler::graph_eval {
// Defined in autograd_test.cpp (the two suites share one evaluator).
std::map<int, Tensor> run_graph_eagerly(const Graph& graph,
                                        const std::map<std::string, Tensor>& feeds);
std::map<std::string, Tensor> eager_variable_grads(const Graph& graph,
                                                   const std::map<std::string, Tensor>& feeds);
}  // namespace ofl::compiler::graph_eval

namespace ofl::compiler {
namespace {

using graph_eval::eager_variable_grads;
using graph_eval::run_graph_eagerly;
using testing::expect_close;
using testing::random_tensor;
using testing::values_of;
using Kind = OptimizerConfig::Kind;

constexpr DataType kF64 = DataType::kFloat64;

int op_index(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name == name) return i;
  }
  ADD_FAILURE() << "no op named " << name;
  return 0;
}

bool has_op(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name == name) return true;
  }
  return false;
}

// Note [Multi-tensor updates]: the update op holding variable `name`'s parameter (or its
// shard) and where that parameter's inputs are in it.
struct UpdateSlot {
  const LogicalOp* op = nullptr;
  MultiUpdateInputs m;
  int j = -1;  // the tensor's index in the op
  int input(int k) const { return op->inputs.at(m.tensor(j, k)); }
  int scalar(int index) const { return op->inputs.at(index); }
};

UpdateSlot update_of(const Graph& g, const std::string& name) {
  const int param = g.op(op_index(g, name)).outputs.at(0);
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kCompute) continue;
    UpdateSlot slot;
    slot.op = &op;
    if (op.schema->name() == "multi_tensor_sgd_update") {
      slot.m = MultiUpdateInputs::of(op.params.as<MultiSgdParams>());
    } else if (op.schema->name() == "multi_tensor_adam_update") {
      slot.m = MultiUpdateInputs::of(op.params.as<MultiAdamParams>());
    } else {
      continue;
    }
    for (int j = 0; j < slot.m.num_tensors(static_cast<int>(op.inputs.size())); ++j) {
      if (op.inputs[slot.m.tensor(j, 0)] == param) {
        slot.j = j;
        return slot;
      }
    }
  }
  ADD_FAILURE() << "no update of " << name;
  return {};
}

bool has_update(const Graph& g, const std::string& name) {
  const int param = g.op(op_index(g, name)).outputs.at(0);
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind == OpKind::kCompute && writes_inputs(*op.schema) &&
        std::count(op.inputs.begin(), op.inputs.end(), param) > 0) {
      return true;
    }
  }
  return false;
}

int output_of(const Graph& g, const std::string& op_name) {
  return g.op(op_index(g, op_name)).outputs.at(0);
}

void compile_training(Graph& g) {
  make_shape_inference_pass()->run(g, {});
  make_autograd_pass()->run(g, {});
  make_optimizer_pass()->run(g, {});
}

// x (6, 4) -> tanh(x @ w1 + b1) (6, 5) -> (@ w2) * frozen (6, 2) -> mean of squares.
Graph two_layer(const OptimizerConfig& config, DataType dtype = DataType::kFloat32) {
  GraphBuilder b("two_layer");
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{6, 4}, dtype, {S(0)});
  const int w1 = b.variable("w1", Shape{4, 5}, Initializer{}, {B()}, true, dtype);
  const int b1 = b.variable("b1", Shape{5}, Initializer{}, {B()}, true, dtype);
  const int w2 = b.variable("w2", Shape{5, 2}, Initializer{}, {S(1)}, true, dtype);
  const int frozen = b.variable("frozen", Shape{2}, Initializer{}, {}, /*trainable=*/false, dtype);
  const int h = b.op1(
      "tanh", NoParams{},
      {b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}, "fc1"), b1}, "bias")},
      "act");
  const int y =
      b.op1("mul", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, w2}, "fc2"), frozen}, "scaled");
  b.set_loss(
      b.op1("reduce_mean", ReduceParams{}, {b.op1("mul", NoParams{}, {y, y}, "square")}, "loss"));
  b.train().optimizer = config;
  return b.graph();
}

const std::vector<std::string> kTrainable = {"w1", "b1", "w2"};

// Random inputs and variables, lr and (for Adam) step = 1, all float64.
std::map<std::string, Tensor> feeds_for(const Graph& g, double lr) {
  std::map<std::string, Tensor> feeds;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.role != OpRole::kForward) continue;
    if (op.kind != OpKind::kInput && op.kind != OpKind::kVariable) continue;
    const TensorMeta& m = g.tensor(op.outputs[0]).meta;
    feeds[op.name] = random_tensor(m.shape, m.dtype, 100 + i, -1.0, 1.0);
  }
  feeds["lr"] = Tensor::scalar(lr, kF64);
  feeds["step"] = Tensor::scalar(1, kF64);
  return feeds;
}

std::map<std::string, Tensor> clones(const std::map<std::string, Tensor>& feeds) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : feeds) out[name] = t.clone();
  return out;
}

TEST(Optimizer, SgdAddsMomentumStateAndAnUpdateReadingVarGradMomentumAndLr) {
  OptimizerConfig config;
  config.kind = Kind::kSgd;
  config.momentum = 0.9;
  config.weight_decay = 0.01;
  config.nesterov = true;
  Graph g = two_layer(config);
  compile_training(g);
  const int lr = output_of(g, "lr");
  const LogicalOp& lr_op = g.op(op_index(g, "lr"));
  EXPECT_EQ(lr_op.kind, OpKind::kInput);
  EXPECT_EQ(g.tensor(lr).meta, (TensorMeta{Shape{}, DataType::kFloat32}));
  EXPECT_EQ(lr_op.output_sbp_hints, std::vector<NdSbp>{NdSbp{B()}});
  EXPECT_EQ(lr_op.placement, Placement::parse("cpu, [0, 1]"));
  EXPECT_FALSE(g.find_tensor("step").has_value());
  for (const std::string& name : kTrainable) {
    const int v = op_index(g, name);
    const LogicalOp& var = g.op(v);
    const LogicalOp& momentum = g.op(op_index(g, name + ".momentum"));
    EXPECT_EQ(momentum.kind, OpKind::kVariable);
    EXPECT_FALSE(momentum.trainable);
    EXPECT_EQ(momentum.initializer.kind, Initializer::Kind::kZeros);
    EXPECT_EQ(momentum.placement, var.placement);
    EXPECT_EQ(momentum.output_sbp_hints, var.output_sbp_hints);
    EXPECT_EQ(g.tensor(momentum.outputs[0]).meta, g.tensor(var.outputs[0]).meta);
    const UpdateSlot slot = update_of(g, name);
    ASSERT_NE(slot.op, nullptr) << name;
    const LogicalOp& update = *slot.op;
    EXPECT_EQ(update.schema->name(), "multi_tensor_sgd_update");
    EXPECT_EQ(update.role, OpRole::kOptimizer);
    EXPECT_EQ(update.placement, var.placement);
    EXPECT_EQ(update.stage, var.stage);
    EXPECT_TRUE(update.outputs.empty());
    EXPECT_EQ(slot.input(1), g.variable_grads.at(v));
    EXPECT_EQ(slot.input(2), momentum.outputs[0]);
    EXPECT_EQ(slot.scalar(slot.m.lr), lr);
    EXPECT_EQ(slot.m.grad_scale, -1);
    EXPECT_EQ(slot.m.skip, -1);
    const auto& p = update.params.as<MultiSgdParams>();
    EXPECT_EQ(p.momentum, 0.9);
    EXPECT_EQ(p.weight_decay, 0.01);
    EXPECT_TRUE(p.nesterov);
  }
  // Note [Multi-tensor updates]: w1 and b1 (both B) in one op, w2 (S(1)) in its own.
  EXPECT_EQ(update_of(g, "w1").op, update_of(g, "b1").op);
  EXPECT_NE(update_of(g, "w1").op, update_of(g, "w2").op);
  EXPECT_EQ(update_of(g, "w2").op->inputs.size(), 4u);
  EXPECT_FALSE(has_op(g, "frozen.momentum"));
  EXPECT_FALSE(has_update(g, "frozen"));
  // w2 is S(1): its state is laid out like it.
  EXPECT_EQ(g.op(op_index(g, "w2.momentum")).output_sbp_hints, std::vector<NdSbp>{NdSbp{S(1)}});
}

TEST(Optimizer, AdamAndAdamWAddTwoMomentsAndReadLrAndStep) {
  for (Kind kind : {Kind::kAdam, Kind::kAdamW}) {
    OptimizerConfig config;
    config.kind = kind;
    config.beta1 = 0.8;
    config.beta2 = 0.99;
    config.epsilon = 1e-6;
    config.weight_decay = 0.1;
    Graph g = two_layer(config);
    compile_training(g);
    const int lr = output_of(g, "lr"), step = output_of(g, "step");
    EXPECT_EQ(g.op(op_index(g, "step")).kind, OpKind::kInput);
    EXPECT_EQ(g.tensor(step).meta, (TensorMeta{Shape{}, DataType::kFloat32}));
    EXPECT_EQ(g.op(op_index(g, "step")).output_sbp_hints, std::vector<NdSbp>{NdSbp{B()}});
    for (const std::string& name : kTrainable) {
      const int v = op_index(g, name);
      const int exp_avg = output_of(g, name + ".exp_avg");
      const int exp_avg_sq = output_of(g, name + ".exp_avg_sq");
      for (int state : {exp_avg, exp_avg_sq}) {
        const LogicalOp& op = g.op(g.tensor(state).producer);
        EXPECT_EQ(op.kind, OpKind::kVariable);
        EXPECT_FALSE(op.trainable);
        EXPECT_EQ(op.output_sbp_hints, g.op(v).output_sbp_hints);
        EXPECT_EQ(g.tensor(state).meta, g.tensor(g.op(v).outputs[0]).meta);
      }
      const UpdateSlot slot = update_of(g, name);
      ASSERT_NE(slot.op, nullptr) << name;
      const LogicalOp& update = *slot.op;
      EXPECT_EQ(update.role, OpRole::kOptimizer);
      EXPECT_EQ(slot.input(1), g.variable_grads.at(v));
      EXPECT_EQ(slot.input(2), exp_avg);
      EXPECT_EQ(slot.input(3), exp_avg_sq);
      EXPECT_EQ(slot.scalar(slot.m.lr), lr);
      EXPECT_EQ(slot.scalar(slot.m.step), step);
      const auto& p = update.params.as<MultiAdamParams>();
      EXPECT_EQ(p.beta1, 0.8);
      EXPECT_EQ(p.beta2, 0.99);
      EXPECT_EQ(p.epsilon, 1e-6);
      EXPECT_EQ(p.weight_decay, 0.1);
      EXPECT_EQ(p.decoupled_weight_decay, kind == Kind::kAdamW);
    }
    EXPECT_FALSE(has_op(g, "w1.momentum"));
  }
}

TEST(Optimizer, NoOptimizerAddsNothing) {
  Graph g = two_layer(OptimizerConfig{});
  make_shape_inference_pass()->run(g, {});
  make_autograd_pass()->run(g, {});
  const int before = g.num_ops();
  make_optimizer_pass()->run(g, {});
  EXPECT_EQ(g.num_ops(), before);
  EXPECT_FALSE(g.find_tensor("lr").has_value());
}

TEST(Optimizer, VariablesOnSeveralPlacementsGetOneLrAndStepPerPlacement) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 6}, DataType::kFloat32, {S(0)});
  const int h = b.op1("matmul", MatmulParams{}, {x, b.variable("w1", Shape{6, 6}, Initializer{})},
                      "stage0.fc");
  b.set_placement(Placement::parse("cpu, [[2, 3], [4, 5]]"));
  b.set_stage(1);
  const int w2 = b.variable("w2", Shape{6, 4}, Initializer{}, {B(), S(1)});
  const int w3 = b.variable("w3", Shape{4}, Initializer{}, {B(), S(0)});
  const int y = b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, w2}, "fc2"), w3});
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {y}, "loss"));
  b.train().optimizer.kind = Kind::kAdamW;
  Graph& g = b.graph();
  compile_training(g);
  const LogicalOp& lr0 = g.op(op_index(g, "lr"));
  const LogicalOp& lr1 = g.op(op_index(g, "lr@1"));
  const LogicalOp& step1 = g.op(op_index(g, "step@1"));
  EXPECT_EQ(lr0.placement, Placement::parse("cpu, [0, 1]"));
  EXPECT_EQ(lr0.stage, 0);
  EXPECT_EQ(lr1.placement, Placement::parse("cpu, [[2, 3], [4, 5]]"));
  EXPECT_EQ(lr1.stage, 1);
  EXPECT_EQ(lr1.output_sbp_hints, (std::vector<NdSbp>{NdSbp{B(), B()}}));
  EXPECT_EQ(step1.output_sbp_hints, (std::vector<NdSbp>{NdSbp{B(), B()}}));
  EXPECT_FALSE(g.find_tensor("lr@2").has_value());
  const UpdateSlot w1 = update_of(g, "w1");
  EXPECT_EQ(w1.scalar(w1.m.lr), lr0.outputs[0]);
  for (const std::string name : {"w2", "w3"}) {
    const UpdateSlot slot = update_of(g, name);
    ASSERT_NE(slot.op, nullptr) << name;
    EXPECT_EQ(slot.scalar(slot.m.lr), lr1.outputs[0]) << name;
    EXPECT_EQ(slot.scalar(slot.m.step), step1.outputs[0]) << name;
    EXPECT_EQ(slot.op->placement, Placement::parse("cpu, [[2, 3], [4, 5]]")) << name;
    EXPECT_EQ(slot.op->stage, 1) << name;
  }
  // Different layouts: different updates.
  EXPECT_NE(update_of(g, "w2").op, update_of(g, "w3").op);
}

TEST(Optimizer, ClippingComputesOneGlobalNormAndScalesEveryGradient) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 6});
  const int h = b.op1("matmul", MatmulParams{}, {x, b.variable("w1", Shape{6, 6}, Initializer{})});
  b.set_placement(Placement::parse("cpu, [2, 3]"));
  b.set_stage(1);
  const int w2 = b.variable("w2", Shape{6, 2}, Initializer{}, {S(0)});
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {b.op1("matmul", MatmulParams{}, {h, w2})}));
  b.train().optimizer.kind = Kind::kSgd;
  b.train().optimizer.clip_grad_max_norm = 1.0;
  Graph& g = b.graph();
  compile_training(g);
  for (const std::string type : {"sqrt", "greater", "where", "div", "scalar_add"}) {
    int found = 0;
    for (int i = 0; i < g.num_ops(); ++i) {
      const LogicalOp& op = g.op(i);
      if (op.kind != OpKind::kCompute || op.schema->name() != type) continue;
      ++found;
      EXPECT_EQ(op.role, OpRole::kOptimizer) << op.name;
      EXPECT_EQ(op.placement, Placement::parse("cpu, [0, 1]")) << op.name;  // the first variable's
    }
    EXPECT_EQ(found, 1) << type;
  }
  // One sum of squares per group of gradients where they live (w1 and w2 differ in placement).
  int sums = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kCompute || op.schema->name() != "multi_tensor_sum_squares") continue;
    ++sums;
    ASSERT_EQ(op.inputs.size(), 1u) << op.name;
    EXPECT_EQ(op.placement, g.op(g.tensor(op.inputs[0]).producer).placement) << op.name;
  }
  EXPECT_EQ(sums, 2);
  for (const std::string name : {"w1", "w2"}) {
    const int v = op_index(g, name);
    // Note [Multi-tensor updates]: the update reads the unclipped gradient and the coefficient.
    const UpdateSlot slot = update_of(g, name);
    ASSERT_NE(slot.op, nullptr) << name;
    ASSERT_GE(slot.m.grad_scale, 0) << name;
    EXPECT_EQ(g.op(g.tensor(slot.scalar(slot.m.grad_scale)).producer).schema->name(), "where")
        << name;
    // Note [Reduce gradients before clipping]: the gradient, laid out as its variable first.
    const LogicalOp& reduced = g.op(g.tensor(slot.input(1)).producer);
    EXPECT_EQ(reduced.schema->name(), "reshape") << name;
    EXPECT_EQ(reduced.inputs[0], g.variable_grads.at(v)) << name;
    EXPECT_EQ(reduced.output_sbp_hints, g.op(v).output_sbp_hints) << name;
    EXPECT_EQ(slot.op->placement, g.op(v).placement) << name;
    EXPECT_EQ(slot.op->stage, g.op(v).stage) << name;
  }
}

// Note [Gradient buckets]: w1 and b1 (replicated) are reduced as one bucket; w2 (split) alone.
TEST(Optimizer, ReplicatedGradientsAreReducedInBuckets) {
  OptimizerConfig config;
  config.kind = Kind::kSgd;
  Graph g = two_layer(config);
  g.train.gradient_bucket_bytes = 1 << 20;
  compile_training(g);
  const LogicalOp& concat = g.op(op_index(g, "grad_bucket0/concat"));
  ASSERT_EQ(concat.inputs.size(), 2u);
  const LogicalOp& reduced = g.op(op_index(g, "grad_bucket0/reduced"));
  EXPECT_EQ(reduced.output_sbp_hints, std::vector<NdSbp>{NdSbp{B()}});
  EXPECT_EQ(g.tensor(reduced.outputs[0]).meta.shape, (Shape{4 * 5 + 5}));
  // Each gradient is its run of the reduced bucket (a slice: a view in the plan, Note [Slices
  // in a plan]); the runs tile the bucket.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (const std::string name : {"w1", "b1"}) {
    const LogicalOp& unflat = g.op(g.tensor(update_of(g, name).input(1)).producer);
    EXPECT_EQ(unflat.schema->name(), "reshape") << name;
    EXPECT_EQ(g.tensor(unflat.outputs[0]).meta, g.tensor(g.op(op_index(g, name)).outputs[0]).meta);
    const LogicalOp& slice = g.op(g.tensor(unflat.inputs[0]).producer);
    ASSERT_EQ(slice.schema->name(), "slice") << name;
    EXPECT_EQ(g.op(g.tensor(slice.inputs[0]).producer).name, "grad_bucket0/reduced") << name;
    const auto& p = slice.params.as<SliceParams>();
    EXPECT_EQ(p.stop[0] - p.start[0],
              g.tensor(g.op(op_index(g, name)).outputs[0]).meta.shape.numel())
        << name;
    runs.emplace_back(p.start[0], p.stop[0]);
  }
  std::sort(runs.begin(), runs.end());
  EXPECT_EQ(runs[0].first, 0);
  EXPECT_EQ(runs[0].second, runs[1].first);
  EXPECT_EQ(runs[1].second, 4 * 5 + 5);
  const int w2 = op_index(g, "w2");
  EXPECT_EQ(update_of(g, "w2").input(1), g.variable_grads.at(w2));
  EXPECT_FALSE(has_op(g, "grad_bucket1/concat"));
}

TEST(Optimizer, ReservedLrNameTakenByTheUserRaises) {
  GraphBuilder b;
  const int lr = b.input("lr", Shape{4});
  const int w = b.variable("w", Shape{4}, Initializer{});
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {b.op1("mul", NoParams{}, {lr, w})}));
  b.train().optimizer.kind = Kind::kSgd;
  Graph& g = b.graph();
  try {
    compile_training(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'lr' is reserved"), std::string::npos) << e.what();
  }
}

// One step of the compiled graph against the eager update ops applied to eager-autograd grads.
void expect_step_matches_eager(const OptimizerConfig& config) {
  Graph g = two_layer(config, kF64);
  compile_training(g);
  const double lr = 0.05;
  const std::map<std::string, Tensor> initial = feeds_for(g, lr);
  const std::map<std::string, Tensor> grads = eager_variable_grads(g, initial);
  std::map<std::string, Tensor> feeds = clones(initial);
  const std::map<int, Tensor> values = run_graph_eagerly(g, feeds);
  for (const std::string& name : kTrainable) {
    const Tensor param = initial.at(name).clone();
    const Tensor lr_t = Tensor::scalar(lr, kF64);
    if (config.kind == Kind::kSgd) {
      const Tensor buffer = Tensor::zeros(param.shape(), kF64);
      functional::sgd_update(param, grads.at(name), buffer, lr_t, config.momentum, config.dampening,
                             config.weight_decay, config.nesterov);
      expect_close(values.at(output_of(g, name + ".momentum")), values_of(buffer), param.shape(),
                   1e-12, 1e-14);
    } else {
      const Tensor m = Tensor::zeros(param.shape(), kF64), v = Tensor::zeros(param.shape(), kF64);
      functional::adam_update(param, grads.at(name), m, v, lr_t, Tensor::scalar(1, kF64),
                              config.beta1, config.beta2, config.epsilon, config.weight_decay,
                              config.kind == Kind::kAdamW);
      expect_close(values.at(output_of(g, name + ".exp_avg")), values_of(m), param.shape(), 1e-12,
                   1e-14);
      expect_close(values.at(output_of(g, name + ".exp_avg_sq")), values_of(v), param.shape(),
                   1e-12, 1e-14);
    }
    // The fed variable was updated in place.
    expect_close(feeds.at(name), values_of(param), param.shape(), 1e-12, 1e-14);
    EXPECT_GT(std::abs(values_of(param)[0] - values_of(initial.at(name))[0]), 0.0) << name;
  }
}

TEST(Optimizer, SgdStepWithMomentumAndWeightDecayMatchesEagerUpdate) {
  OptimizerConfig config;
  config.kind = Kind::kSgd;
  config.momentum = 0.9;
  config.weight_decay = 0.01;
  expect_step_matches_eager(config);
  config.nesterov = true;
  expect_step_matches_eager(config);
}

TEST(Optimizer, AdamStepMatchesEagerUpdate) {
  OptimizerConfig config;
  config.kind = Kind::kAdam;
  config.weight_decay = 0.1;
  expect_step_matches_eager(config);
}

TEST(Optimizer, AdamWStepMatchesEagerUpdate) {
  OptimizerConfig config;
  config.kind = Kind::kAdamW;
  config.beta1 = 0.8;
  config.weight_decay = 0.1;
  expect_step_matches_eager(config);
}

TEST(Optimizer, AdamFirstStepMovesEachWeightByLrTimesTheGradientSign) {
  // With zero moments, step 1 gives m_hat = g and v_hat = g^2, so the step is lr * g / |g|.
  OptimizerConfig config;
  config.kind = Kind::kAdam;
  Graph g = two_layer(config, kF64);
  compile_training(g);
  const std::map<std::string, Tensor> initial = feeds_for(g, 0.01);
  const std::map<std::string, Tensor> grads = eager_variable_grads(g, initial);
  std::map<std::string, Tensor> feeds = clones(initial);
  run_graph_eagerly(g, feeds);
  for (const std::string& name : kTrainable) {
    std::vector<double> expected = values_of(initial.at(name));
    const std::vector<double> grad = values_of(grads.at(name));
    for (size_t k = 0; k < expected.size(); ++k) {
      expected[k] -= 0.01 * grad[k] / (std::abs(grad[k]) + 1e-8);
    }
    expect_close(feeds.at(name), expected, initial.at(name).shape(), 1e-9, 1e-9);
  }
}

// Plain SGD (lr 0.5) with clipping: each weight moves by -lr * c * g, where c comes from the
// global norm computed here by hand from eager gradients.
void expect_clipped_step(double max_norm_over_norm) {
  OptimizerConfig config;
  config.kind = Kind::kSgd;
  Graph probe = two_layer(config, kF64);
  make_shape_inference_pass()->run(probe, {});
  const std::map<std::string, Tensor> initial = feeds_for(probe, 0.5);
  const std::map<std::string, Tensor> grads = eager_variable_grads(probe, initial);
  double sum_sq = 0;
  for (const std::string& name : kTrainable) {
    for (double v : values_of(grads.at(name))) sum_sq += v * v;
  }
  const double norm = std::sqrt(sum_sq);
  ASSERT_GT(norm, 0.0);
  config.clip_grad_max_norm = max_norm_over_norm * norm;
  const double coefficient =
      norm > config.clip_grad_max_norm ? config.clip_grad_max_norm / (norm + 1e-6) : 1.0;
  Graph g = two_layer(config, kF64);
  compile_training(g);
  std::map<std::string, Tensor> feeds = clones(initial);
  run_graph_eagerly(g, feeds);
  for (const std::string& name : kTrainable) {
    std::vector<double> expected = values_of(initial.at(name));
    const std::vector<double> grad = values_of(grads.at(name));
    for (size_t k = 0; k < expected.size(); ++k) expected[k] -= 0.5 * coefficient * grad[k];
    expect_close(feeds.at(name), expected, initial.at(name).shape(), 1e-10, 1e-12);
  }
}

TEST(Optimizer, ClippingScalesGradientsByTheHandComputedGlobalNorm) {
  expect_clipped_step(/*max_norm_over_norm=*/0.25);
}

TEST(Optimizer, ClippingLeavesGradientsBelowTheMaxNormUnchanged) {
  expect_clipped_step(/*max_norm_over_norm=*/4.0);
}

TEST(Optimizer, SgdWithDampeningDampensTheFirstStepUnlikeTorch) {
  // Known limitation (Note [Compiled SGD first step] in compiler/passes/optimizer.cpp): the plan
  // runs one op for every step, so the first momentum buffer is (1 - dampening) * g, where
  // torch.optim.SGD stores g.
  OptimizerConfig config;
  config.kind = Kind::kSgd;
  config.momentum = 0.9;
  config.dampening = 0.5;
  Graph g = two_layer(config, kF64);
  compile_training(g);
  const std::map<std::string, Tensor> initial = feeds_for(g, 0.1);
  const std::map<std::string, Tensor> grads = eager_variable_grads(g, initial);
  std::map<std::string, Tensor> feeds = clones(initial);
  const std::map<int, Tensor> values = run_graph_eagerly(g, feeds);
  std::vector<double> expected = values_of(grads.at("w1"));
  for (double& v : expected) v *= 0.5;
  expect_close(values.at(output_of(g, "w1.momentum")), expected, Shape{4, 5}, 1e-12, 1e-14);
}

}  // namespace
}  // namespace ofl::compiler
