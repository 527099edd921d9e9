// The MLP of the layout tests (see the header).

#include "tests/cpp/models/mlp_training.h"

#include "compiler/compile.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::testing {

namespace {

using compiler::GraphBuilder;
using compiler::Initializer;
using compiler::OptimizerConfig;

Initializer normal(int64_t seed) { return Initializer{Initializer::Kind::kNormal, 0.0, 0.3, seed}; }

}  // namespace

compiler::Graph build_mlp(const MlpLayout& layout, OptimizerConfig::Kind optimizer) {
  GraphBuilder b("mlp_" + layout.name);
  const int stages = layout.num_stages();
  auto on_stage = [&](int stage) {
    b.set_placement(stage == 0 ? layout.placement : layout.later_stages[stage - 1]);
    b.set_stage(stage);
  };
  b.set_placement(layout.placement);
  const int64_t micro = kMlpBatch / layout.micro_batches;
  int h = b.input("x", Shape{micro, kMlpIn}, DataType::kFloat32, layout.data);
  if (stages > 1) on_stage(stages - 1);
  const int labels = b.input("labels", Shape{micro}, DataType::kInt64, layout.data);
  for (int l = 0; l < layout.layers; ++l) {
    on_stage(l * stages / layout.layers);
    const bool odd = l % 2 == 0;  // layers count from 1
    const bool last = l == layout.layers - 1;
    const int64_t in = l == 0 ? kMlpIn : kMlpHidden;
    const int64_t out = last ? kMlpClasses : kMlpHidden;
    // Seeds 1, 2 for w1, b1, 3, 4 for w2, b2, ...; the last bias starts at zero.
    const int w = b.variable(str_cat("w", l + 1), Shape{in, out}, normal(2 * l + 1),
                             odd ? layout.w1 : layout.w2);
    const int bias =
        b.variable(str_cat("b", l + 1), Shape{out}, last ? Initializer{} : normal(2 * l + 2),
                   odd ? layout.b1 : layout.b2);
    h = b.op1("add", NoParams{}, {b.op1("matmul", MatmulParams{}, {h, w}), bias});
    if (!last) h = b.op1("relu", NoParams{}, {h});
  }
  const int per_sample = b.op1("sparse_softmax_cross_entropy", NoParams{}, {h, labels});
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

std::map<std::string, Tensor> mlp_feed(const MlpLayout& layout, OptimizerConfig::Kind optimizer,
                                       int step) {
  std::map<std::string, Tensor> feed;
  feed["x"] = random_tensor(Shape{kMlpBatch, kMlpIn}, DataType::kFloat32, 100 + step);
  std::vector<double> labels(kMlpBatch);
  for (int i = 0; i < kMlpBatch; ++i) labels[i] = (i * 7 + step) % kMlpClasses;
  feed["labels"] = make_tensor(labels, Shape{kMlpBatch}, DataType::kInt64);
  // The optimizer takes lr (and step) on each placement holding variables: "lr", "lr@1", ...
  for (int stage = 0; stage < layout.num_stages(); ++stage) {
    const std::string suffix = stage == 0 ? "" : str_cat("@", stage);
    feed["lr" + suffix] = Tensor::scalar(0.1, DataType::kFloat32);
    if (optimizer != OptimizerConfig::Kind::kSgd) {
      feed["step" + suffix] = Tensor::scalar(step, DataType::kFloat32);
    }
  }
  return feed;
}

TrainingRun train_mlp(const MlpLayout& layout, OptimizerConfig::Kind optimizer, int steps,
                      const RunnerFactory& runner) {
  std::unique_ptr<actor::PlanRunner> executor =
      runner(compiler::compile_graph(build_mlp(layout, optimizer)));
  executor->initialize_variables();
  TrainingRun run;
  for (int step = 1; step <= steps; ++step) {
    auto fetched = executor->run(mlp_feed(layout, optimizer, step));
    // With micro-batches the loss comes back per micro-batch, (m,); their mean is the batch's.
    const Tensor loss = fetched.at("loss/out0");
    double mean = 0;
    for (double v : values_of(loss)) mean += v / static_cast<double>(loss.numel());
    run.losses.push_back(mean);
  }
  for (int l = 1; l <= layout.layers; ++l) {
    for (const char* kind : {"w", "b"}) {
      const std::string name = str_cat(kind, l);
      run.weights[name] = values_of(executor->read_variable(name));
    }
  }
  return run;
}

std::vector<MlpLayout> mlp_layouts() {
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

std::vector<MlpLayout> mlp_pipelined_layouts() {
  const Placement one = Placement::parse("cpu, [0]");
  const Placement other = Placement::parse("cpu, [1]");
  const Placement two = Placement::parse("cpu, [0, 1]");
  const Placement next_two = Placement::parse("cpu, [2, 3]");
  MlpLayout single{"single", one, {B()}, {B()}, {B()}, {B()}, {B()}};
  MlpLayout accumulate4 = single;
  accumulate4.name = "single_accumulate4";
  accumulate4.micro_batches = 4;
  MlpLayout dp2_accumulate2{"dp2_accumulate2", two, {S(0)}, {B()}, {B()}, {B()}, {B()}, 2, 0};
  MlpLayout pp2{"pp2_micro4", one, {B()}, {B()}, {B()}, {B()}, {B()}, 4, 0, {other}};
  MlpLayout dp2_pp2{"dp2_pp2_micro2", two, {S(0)}, {B()}, {B()}, {B()}, {B()}, 2, 0, {next_two}};
  return {single, accumulate4, dp2_accumulate2, pp2, dp2_pp2};
}

std::vector<MlpLayout> mlp_deep_pipelined_layouts() {
  std::vector<Placement> rank;
  for (int r = 0; r < 4; ++r) rank.push_back(Placement::parse(str_cat("cpu, [", r, "]")));
  MlpLayout single{"single4", rank[0], {B()}, {B()}, {B()}, {B()}, {B()}};
  single.layers = 4;
  MlpLayout pp4_micro4 = single;
  pp4_micro4.name = "pp4_micro4";
  pp4_micro4.micro_batches = 4;
  pp4_micro4.later_stages = {rank[1], rank[2], rank[3]};
  MlpLayout pp4_micro8 = pp4_micro4;
  pp4_micro8.name = "pp4_micro8";
  pp4_micro8.micro_batches = 8;
  MlpLayout pp2_micro4 = pp4_micro4;
  pp2_micro4.name = "pp2_micro4";
  pp2_micro4.later_stages = {rank[1]};
  return {single, pp4_micro4, pp4_micro8, pp2_micro4};
}

}  // namespace ofl::testing
