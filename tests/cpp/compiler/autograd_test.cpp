// Autograd pass: which backward ops it adds, and that the gradients they compute equal eager
// autograd on the same computation (the graph is run op by op with eager kernels).

#include "oneflowlike/autograd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "compiler/builder.h"
#include "compiler/passes/passes.h"
#include "oneflowlike/eager.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/elementwise.h"
#include "oneflowlike/ops/layer_norm.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/softmax.h"
#include "oneflowlike/ops/unary.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::compiler::graph_eval {

// Shared with optimizer_test.cpp (declared there).

/// Runs every compute op of `graph` with eager kernels, in topological order, except that ops
/// which write their inputs (optimizer updates) run last so that they see the values every other
/// op read. `feeds` holds inputs and variables by op name (variables without a feed start from
/// zeros/ones/constant initializers). Returns the value of every tensor by index.
std::map<int, Tensor> run_graph_eagerly(const Graph& graph,
                                        const std::map<std::string, Tensor>& feeds) {
  NoGradGuard no_grad;
  std::map<int, Tensor> values;
  std::vector<int> updates;
  for (int i : graph.topological_order()) {
    const LogicalOp& op = graph.op(i);
    if (op.kind == OpKind::kInput || op.kind == OpKind::kVariable) {
      const TensorMeta& m = graph.tensor(op.outputs[0]).meta;
      auto it = feeds.find(op.name);
      if (it != feeds.end()) {
        values[op.outputs[0]] = it->second;
        continue;
      }
      const Initializer& init = op.initializer;
      const bool constant = init.kind == Initializer::Kind::kZeros ||
                            init.kind == Initializer::Kind::kOnes ||
                            init.kind == Initializer::Kind::kConstant;
      OFL_CHECK(op.kind == OpKind::kVariable && constant, "test: no feed for ", op.describe());
      const double v = init.kind == Initializer::Kind::kZeros  ? 0.0
                       : init.kind == Initializer::Kind::kOnes ? 1.0
                                                               : init.a;
      values[op.outputs[0]] = functional::fill(m.shape, m.dtype, v);
      continue;
    }
    OFL_CHECK(op.kind == OpKind::kCompute, "test: cannot run ", op.describe());
    if (writes_inputs(*op.schema)) {
      updates.push_back(i);
      continue;
    }
    std::vector<Tensor> args;
    for (int t : op.inputs) args.push_back(values.at(t));
    const std::vector<Tensor> out = apply_op(*op.schema, op.params, args);
    for (size_t k = 0; k < out.size(); ++k) values[op.outputs[k]] = out[k];
  }
  for (int i : updates) {
    const LogicalOp& op = graph.op(i);
    std::vector<Tensor> args;
    for (int t : op.inputs) args.push_back(values.at(t));
    apply_op(*op.schema, op.params, args);
  }
  return values;
}

/// Eager autograd on the forward ops of `graph` (role kForward): trainable variables are leaves
/// that require grad, the loss is back-propagated with gradient 1. Returns variable name ->
/// .grad() (undefined when no gradient reached it).
std::map<std::string, Tensor> eager_variable_grads(const Graph& graph,
                                                   const std::map<std::string, Tensor>& feeds) {
  std::map<int, Tensor> values;
  std::map<std::string, Tensor> leaves;
  for (int i : graph.topological_order()) {
    const LogicalOp& op = graph.op(i);
    if (op.role != OpRole::kForward) continue;
    if (op.kind != OpKind::kCompute) {
      Tensor t = feeds.at(op.name).clone();
      if (op.kind == OpKind::kVariable && op.trainable) {
        t.set_requires_grad(true);
        leaves[op.name] = t;
      }
      values[op.outputs[0]] = t;
      continue;
    }
    std::vector<Tensor> args;
    for (int t : op.inputs) args.push_back(values.at(t));
    const std::vector<Tensor> out = apply_op(*op.schema, op.params, args);
    for (size_t k = 0; k < out.size(); ++k) values[op.outputs[k]] = out[k];
  }
  backward({values.at(graph.train.loss)}, {});
  std::map<std::string, Tensor> grads;
  for (auto& [name, t] : leaves) grads[name] = t.grad();
  return grads;
}

}  // namespace ofl::compiler::graph_eval

namespace ofl::compiler {
namespace {

using graph_eval::eager_variable_grads;
using graph_eval::run_graph_eagerly;
using testing::random_tensor;
using testing::values_of;

constexpr DataType kF64 = DataType::kFloat64;

void differentiate(Graph& g) {
  make_shape_inference_pass()->run(g, {});
  make_autograd_pass()->run(g, {});
}

int op_index(const Graph& g, const std::string& name) {
  for (int i = 0; i < g.num_ops(); ++i) {
    if (g.op(i).name == name) return i;
  }
  ADD_FAILURE() << "no op named " << name;
  return -1;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Random values for every input and variable of the graph (float64), by op name.
std::map<std::string, Tensor> random_feeds(const Graph& g, uint64_t seed) {
  std::map<std::string, Tensor> feeds;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kInput && op.kind != OpKind::kVariable) continue;
    const TensorMeta& m = g.tensor(op.outputs[0]).meta;
    feeds[op.name] = random_tensor(m.shape, m.dtype, seed + i);
  }
  return feeds;
}

// Runs the differentiated graph and expects every variable gradient to equal eager autograd's.
void expect_graph_grads_match_eager(const Graph& g, const std::map<std::string, Tensor>& feeds) {
  const std::map<std::string, Tensor> expected = eager_variable_grads(g, feeds);
  const std::map<int, Tensor> values = run_graph_eagerly(g, feeds);
  int checked = 0;
  for (const auto& [name, grad] : expected) {
    const int var = op_index(g, name);
    ASSERT_TRUE(grad.defined()) << name;
    ASSERT_EQ(g.variable_grads.count(var), 1u) << name << " has no graph gradient";
    const Tensor& actual = values.at(g.variable_grads.at(var));
    std::vector<double> want = values_of(grad);
    testing::expect_close(actual, want, grad.shape(), 1e-10, 1e-12);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// x (8, 4) -> relu(x @ w1 + b1) (8, 16) -> (@ w2 + b2) * scale (8, 3) -> mean.
// A side branch relu(x @ w1) is fetched but does not reach the loss.
Graph mlp(DataType dtype = DataType::kFloat32) {
  GraphBuilder b("mlp");
  b.set_location("mlp.py:1");
  const int x = b.input("x", Shape{8, 4}, dtype);
  const int w1 = b.variable("w1", Shape{4, 16}, Initializer{}, {}, true, dtype);
  const int b1 = b.variable("b1", Shape{16}, Initializer{}, {}, true, dtype);
  const int w2 = b.variable("w2", Shape{16, 3}, Initializer{}, {}, true, dtype);
  const int b2 = b.variable("b2", Shape{3}, Initializer{}, {}, true, dtype);
  const int scale = b.variable("scale", Shape{3}, Initializer{}, {}, /*trainable=*/false, dtype);
  const int h = b.op1(
      "relu", NoParams{},
      {b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}, "fc1"), b1}, "fc1.bias")},
      "act");
  const int y =
      b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, w2}, "fc2"), b2}, "fc2.bias");
  const int scaled = b.op1("mul", NoParams{}, {y, scale}, "scaled");
  b.set_loss(b.op1("reduce_mean", ReduceParams{}, {scaled}, "loss"));
  b.fetch(
      b.op1("relu", NoParams{}, {b.op1("matmul", MatmulParams{}, {x, w1}, "side")}, "side_act"));
  return b.graph();
}

TEST(Autograd, MlpGetsBackwardOpsAndAGradientForEveryTrainableVariable) {
  Graph g = mlp();
  const int num_forward_ops = g.num_ops();
  differentiate(g);
  ASSERT_GT(g.num_ops(), num_forward_ops);
  for (int i = num_forward_ops; i < g.num_ops(); ++i) {
    EXPECT_EQ(g.op(i).role, OpRole::kBackward) << g.op(i).name;
    EXPECT_EQ(g.op(i).kind, OpKind::kCompute) << g.op(i).name;
    EXPECT_EQ(g.op(i).location, "mlp.py:1") << g.op(i).name;
  }
  for (const std::string fwd : {"fc1", "fc1.bias", "act", "fc2", "fc2.bias", "scaled", "loss"}) {
    bool found = false;
    for (int i = num_forward_ops; i < g.num_ops(); ++i) {
      found = found || starts_with(g.op(i).name, fwd + ".grad/");
    }
    EXPECT_TRUE(found) << "no backward op for " << fwd;
  }
  for (const std::string var : {"w1", "b1", "w2", "b2"}) {
    const int v = op_index(g, var);
    ASSERT_EQ(g.variable_grads.count(v), 1u) << var;
    const LogicalTensor& grad = g.tensor(g.variable_grads.at(v));
    EXPECT_EQ(grad.meta, g.tensor(g.op(v).outputs[0]).meta) << var;
    EXPECT_EQ(g.op(grad.producer).role, OpRole::kBackward) << var;
  }
  EXPECT_EQ(g.variable_grads.count(op_index(g, "scale")), 0u);
  EXPECT_EQ(g.variable_grads.size(), 4u);
}

TEST(Autograd, OpsOffTheLossPathGetNoBackwardOps) {
  Graph g = mlp();
  differentiate(g);
  for (int i = 0; i < g.num_ops(); ++i) {
    EXPECT_FALSE(g.op(i).role == OpRole::kBackward && starts_with(g.op(i).name, "side"))
        << g.op(i).name;
    // The input x does not require grad, so nothing differentiates toward it: fc1's backward
    // computes only d(w1).
    EXPECT_FALSE(g.op(i).role == OpRole::kBackward && g.op(i).schema->name() == "matmul" &&
                 starts_with(g.op(i).name, "fc1.grad/") &&
                 g.tensor(g.op(i).outputs[0]).meta.shape == (Shape{8, 4}))
        << g.op(i).name << " computes d(x)";
  }
}

TEST(Autograd, BackwardOpsSitOnTheirForwardOpsPlacementAndStage) {
  GraphBuilder b;
  b.set_placement(Placement::parse("cpu, [0, 1]"));
  const int x = b.input("x", Shape{4, 6});
  const int w1 = b.variable("w1", Shape{6, 6}, Initializer{});
  const int h = b.op1("matmul", MatmulParams{}, {x, w1}, "stage0.fc");
  b.set_placement(Placement::parse("cpu, [2, 3]"));
  b.set_stage(1);
  const int w2 = b.variable("w2", Shape{6, 2}, Initializer{});
  b.set_loss(b.op1("reduce_sum", ReduceParams{},
                   {b.op1("matmul", MatmulParams{}, {h, w2}, "stage1.fc")}, "loss"));
  Graph& g = b.graph();
  differentiate(g);
  int seen = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.role != OpRole::kBackward) continue;
    ++seen;
    const bool first = starts_with(op.name, "stage0.fc.grad/") || starts_with(op.name, "w1.");
    EXPECT_EQ(op.placement, Placement::parse(first ? "cpu, [0, 1]" : "cpu, [2, 3]")) << op.name;
    EXPECT_EQ(op.stage, first ? 0 : 1) << op.name;
  }
  EXPECT_GE(seen, 4);
  // The seed sits with the loss.
  const LogicalOp& seed = g.op(op_index(g, "loss.grad/fill"));
  EXPECT_EQ(seed.placement, Placement::parse("cpu, [2, 3]"));
  EXPECT_EQ(seed.stage, 1);
}

TEST(Autograd, NonDifferentiableOpOnThePathRaisesWithItsName) {
  GraphBuilder b;
  b.set_location("model.py:7");
  const int x = b.input("x", Shape{4, 6});
  const int w = b.variable("w", Shape{6}, Initializer{});
  const int bias = b.variable("bias", Shape{6}, Initializer{});
  const std::vector<int> ln = b.op("layer_norm", LayerNormParams{}, {x, w, bias}, "ln");
  // layer_norm_grad has no FGradient.
  const int dx =
      b.op1("layer_norm_grad", LayerNormParams{}, {x, ln[0], ln[1], ln[2], w}, "ln_backward");
  b.set_loss(b.op1("reduce_mean", ReduceParams{}, {dx}, "loss"));
  Graph& g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'ln_backward'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not differentiable"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.py:7"), std::string::npos) << msg;
  }
}

TEST(Autograd, SiluGradSecondDerivativeInItsInputIsRefusedNamingTheOp) {
  GraphBuilder b;
  const int w = b.variable("w", Shape{4, 6}, Initializer{});
  const int dy = b.input("dy", Shape{4, 6});
  // The gradient through dy is written; the one through x (silu'') is not.
  const int dx = b.op1("silu_grad", NoParams{}, {w, dy}, "silu_backward");
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {dx}, "loss"));
  Graph& g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[silu_grad] the second derivative"), std::string::npos) << msg;
  }
}

TEST(Autograd, NonDifferentiableOpOffThePathIsFine) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 6});
  const int w = b.variable("w", Shape{6}, Initializer{});
  // greater has no gradient, but its bool output carries none: not on the path.
  const int mask = b.op1("greater", NoParams{}, {x, w}, "mask");
  const int y = b.op1("where", NoParams{}, {mask, x, w}, "select");
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {y}, "loss"));
  Graph& g = b.graph();
  differentiate(g);
  ASSERT_EQ(g.variable_grads.count(op_index(g, "w")), 1u);
  std::map<std::string, Tensor> feeds = random_feeds(g, 3);
  expect_graph_grads_match_eager(g, feeds);
}

TEST(Autograd, LossWithMoreThanOneElementRaisesNamingTheLoss) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4, 6});
  const int w = b.variable("w", Shape{6}, Initializer{});
  b.set_loss(b.op1("mul", NoParams{}, {x, w}, "unreduced"));
  Graph& g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unreduced/out0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(4, 6)"), std::string::npos) << msg;
  }
}

TEST(Autograd, IntegerLossRaisesTypeError) {
  GraphBuilder b;
  const int x = b.input("x", Shape{4}, DataType::kInt64);
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {x}, "loss"));
  Graph& g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTypeError);
    EXPECT_NE(std::string(e.what()).find("loss/out0"), std::string::npos) << e.what();
  }
}

TEST(Autograd, GraphWithoutLossIsLeftAlone) {
  Graph g = mlp();
  g.train.loss = -1;
  const int before = g.num_ops();
  differentiate(g);
  EXPECT_EQ(g.num_ops(), before);
  EXPECT_TRUE(g.variable_grads.empty());
}

// Note [Given output gradients]: seeded with dy1 for y1 = w @ x and dy2 for y2 = exp(w), w's
// gradient is dy1 x^T + dy2 exp(w), as eager autograd's backward({y1, y2}, {dy1, dy2}) gives;
// after dead-code elimination the graph keeps exp (its gradient reads its output) but not the
// forward matmul, and no loss, seed or multiply by dy is built.
TEST(Autograd, GivenOutputGradientsSeedTheBackwardWithoutALoss) {
  GraphBuilder b;
  const int w = b.variable("w", Shape{2, 3}, Initializer{}, {}, true, kF64);
  const int x = b.input("x", Shape{3, 4}, kF64);
  const int y1 = b.op1("matmul", MatmulParams{}, {w, x}, "y1");
  const int y2 = b.op1("exp", NoParams{}, {w}, "y2");
  b.set_output_grad(y1, b.input("dy1", Shape{2, 4}, kF64));
  b.set_output_grad(y2, b.input("dy2", Shape{2, 3}, kF64));
  Graph g = b.graph();
  differentiate(g);
  EXPECT_TRUE(g.output_grads.empty());  // consumed
  const std::map<std::string, Tensor> feeds = {
      {"w", testing::make_tensor({0.5, -1, 2, 0.25, 1.5, -0.75}, Shape{2, 3}, kF64)},
      {"x",
       testing::make_tensor({1, 2, -1, 0.5, 0, -2, 3, 1, 1.5, -0.5, 2, -1}, Shape{3, 4}, kF64)},
      {"dy1", testing::make_tensor({1, -1, 2, 0.5, -2, 1, 0.25, 3}, Shape{2, 4}, kF64)},
      {"dy2", testing::make_tensor({2, 1, -1, 0.5, -0.5, 1}, Shape{2, 3}, kF64)}};
  const auto values = run_graph_eagerly(g, feeds);
  Tensor leaf = feeds.at("w").clone();
  leaf.set_requires_grad(true);
  backward({functional::matmul(leaf, feeds.at("x")), functional::exp(leaf)},
           {feeds.at("dy1"), feeds.at("dy2")});
  testing::expect_close(values.at(g.variable_grads.at(op_index(g, "w"))), values_of(leaf.grad()),
                        Shape{2, 3}, 0, 1e-12);
  g.fetches.push_back(g.variable_grads.at(op_index(g, "w")));  // as a VJP graph fetches
  make_dead_code_elimination_pass()->run(g, {});
  int forward_matmuls = 0, exps = 0, reductions = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.kind != OpKind::kCompute) continue;
    forward_matmuls += op.role == OpRole::kForward && op.schema->name() == "matmul";
    exps += op.schema->name() == "exp";
    reductions += op.schema->name() == "reduce_sum";
  }
  EXPECT_EQ(forward_matmuls, 0);
  EXPECT_EQ(exps, 1);
  EXPECT_EQ(reductions, 0);
}

// Note [Saved forward values]: exp's gradient reads its output, which autograd lists; given
// back as an input, the backward reads it there, the forward exp goes, and the gradient is the
// same.
TEST(Autograd, AGivenForwardValueReplacesTheOpItsBackwardReads) {
  const Tensor w_value = testing::make_tensor({0.5, -1, 2, 0.25, 1.5, -0.75}, Shape{2, 3}, kF64);
  const Tensor dy_value = testing::make_tensor({2, 1, -1, 0.5, -0.5, 1}, Shape{2, 3}, kF64);
  auto build = [&](bool give) {
    GraphBuilder b;
    const int w = b.variable("w", Shape{2, 3}, Initializer{}, {}, true, kF64);
    const int y = b.op1("exp", NoParams{}, {w}, "y");
    b.set_output_grad(y, b.input("dy", Shape{2, 3}, kF64));
    Graph g = b.graph();
    if (give) g.given_values["y/out0"] = {"saved0", NdSbp{B()}};
    differentiate(g);
    return g;
  };
  Graph plain = build(false);
  EXPECT_EQ(plain.backward_reads, std::vector<std::string>{"y/out0"});
  Graph given = build(true);
  std::map<std::string, Tensor> feeds = {{"w", w_value}, {"dy", dy_value}};
  const Tensor want =
      run_graph_eagerly(plain, feeds).at(plain.variable_grads.at(op_index(plain, "w")));
  feeds["saved0"] = functional::exp(w_value);
  const Tensor got =
      run_graph_eagerly(given, feeds).at(given.variable_grads.at(op_index(given, "w")));
  EXPECT_EQ(values_of(got), values_of(want));
  given.fetches.push_back(given.variable_grads.at(op_index(given, "w")));
  make_dead_code_elimination_pass()->run(given, {});
  for (int i = 0; i < given.num_ops(); ++i) {
    const LogicalOp& op = given.op(i);
    EXPECT_FALSE(op.kind == OpKind::kCompute && op.schema->name() == "exp") << op.describe();
  }
}

TEST(Autograd, GivenOutputGradientsOfAnotherShapeAreRefusedNamingBoth) {
  GraphBuilder b;
  const int w = b.variable("w", Shape{2, 3}, Initializer{}, {}, true, kF64);
  const int y = b.op1("exp", NoParams{}, {w}, "y");
  b.set_output_grad(y, b.input("dy", Shape{3, 2}, kF64));
  Graph g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'dy' (3, 2)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'y/out0' (2, 3)"), std::string::npos) << msg;
  }
}

TEST(Autograd, ALossAndGivenOutputGradientsTogetherAreRefused) {
  GraphBuilder b;
  const int w = b.variable("w", Shape{2, 3}, Initializer{}, {}, true, kF64);
  const int y = b.op1("exp", NoParams{}, {w}, "y");
  b.set_output_grad(y, b.input("dy", Shape{2, 3}, kF64));
  b.set_loss(b.op1("reduce_sum", ReduceParams{}, {y}, "loss"));
  Graph g = b.graph();
  try {
    differentiate(g);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not both"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'loss/out0'"), std::string::npos) << msg;
  }
}

TEST(Autograd, VariableUsedTwiceSumsItsGradients) {
  // loss = sum(w * w + w): d(w) = 2w + 1.
  GraphBuilder b;
  const int w = b.variable("w", Shape{5}, Initializer{}, {}, true, kF64);
  const int sq = b.op1("mul", NoParams{}, {w, w}, "square");
  b.set_loss(
      b.op1("reduce_sum", ReduceParams{}, {b.op1("add", NoParams{}, {sq, w}, "plus")}, "loss"));
  Graph& g = b.graph();
  differentiate(g);
  int adds = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    adds += g.op(i).role == OpRole::kBackward && g.op(i).schema->name() == "add";
  }
  EXPECT_GE(adds, 2);  // square's two inputs, then square + plus
  const Tensor w_value = testing::make_tensor({1, -2, 0.5, 3, 0}, Shape{5}, kF64);
  const auto values = run_graph_eagerly(g, {{"w", w_value}});
  testing::expect_close(values.at(g.variable_grads.at(op_index(g, "w"))), {3, -3, 2, 7, 1},
                        Shape{5}, 0, 1e-12);
}

TEST(Autograd, MlpGradientsEqualEagerAutograd) {
  Graph g = mlp(kF64);
  differentiate(g);
  expect_graph_grads_match_eager(g, random_feeds(g, 11));
}

TEST(Autograd, AttentionBlockGradientsEqualEagerAutograd) {
  // x (2, 4, 8): single-head self-attention with a residual, layer_norm, then a GELU MLP.
  GraphBuilder b("attention");
  const int x = b.input("x", Shape{2, 4, 8}, kF64);
  auto var = [&](const std::string& name, const Shape& shape) {
    return b.variable(name, shape, Initializer{}, {}, true, kF64);
  };
  const int wq = var("wq", Shape{8, 8}), wk = var("wk", Shape{8, 8}), wv = var("wv", Shape{8, 8});
  const int q = b.op1("matmul", MatmulParams{}, {x, wq}, "q");  // (2, 4, 8)
  const int k = b.op1("matmul", MatmulParams{}, {x, wk}, "k");
  const int v = b.op1("matmul", MatmulParams{}, {x, wv}, "v");
  const int scores = b.op1("batch_matmul", MatmulParams{false, true, 1.0 / std::sqrt(8.0)}, {q, k},
                           "scores");  // (2, 4, 4)
  const int probs = b.op1("softmax", SoftmaxParams{-1}, {scores}, "probs");
  const int attended = b.op1("batch_matmul", MatmulParams{}, {probs, v}, "attended");  // (2, 4, 8)
  const int residual = b.op1("add", NoParams{}, {x, attended}, "residual");
  const std::vector<int> ln =
      b.op("layer_norm", LayerNormParams{-1, 1e-5},
           {residual, var("ln.weight", Shape{8}), var("ln.bias", Shape{8})}, "ln");
  const int hidden =
      b.op1("gelu", GeluParams{},
            {b.op1("matmul", MatmulParams{}, {ln[0], var("w1", Shape{8, 16})}, "fc1")}, "gelu");
  const int out = b.op1("matmul", MatmulParams{}, {hidden, var("w2", Shape{16, 8})}, "fc2");
  const int total = b.op1("add", NoParams{}, {out, ln[0]}, "residual2");
  b.set_loss(
      b.op1("reduce_mean", ReduceParams{}, {b.op1("mul", NoParams{}, {total, total})}, "loss"));
  Graph& g = b.graph();
  differentiate(g);
  EXPECT_EQ(g.variable_grads.size(), 7u);
  expect_graph_grads_match_eager(g, random_feeds(g, 23));
}

TEST(Autograd, LossScaleSeedsWithTheScaleAndUnscalesVariableGradients) {
  Graph g = mlp(kF64);
  g.train.loss_scale = 1024;
  differentiate(g);
  int seeds = 0;
  for (int i = 0; i < g.num_ops(); ++i) {
    const LogicalOp& op = g.op(i);
    if (op.role == OpRole::kBackward && op.schema->name() == "fill" &&
        starts_with(op.name, "loss.grad/")) {
      ++seeds;
      EXPECT_EQ(op.params.as<FillParams>().value, 1024);
    }
  }
  EXPECT_EQ(seeds, 1);
  ASSERT_EQ(g.variable_grads.size(), 4u);
  for (const auto& [var, grad] : g.variable_grads) {
    const LogicalOp& unscale = g.op(g.tensor(grad).producer);
    ASSERT_EQ(unscale.schema->name(), "scalar_mul") << g.op(var).name;
    EXPECT_EQ(unscale.params.as<ScalarParams>().scalar, 1.0 / 1024);
    EXPECT_TRUE(starts_with(unscale.name, g.op(var).name + ".grad/")) << unscale.name;
  }
  // The unscaled gradients are the true ones.
  expect_graph_grads_match_eager(g, random_feeds(g, 5));
}

}  // namespace
}  // namespace ofl::compiler
