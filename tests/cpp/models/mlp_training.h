#pragma once
// A small MLP trained under many parallel layouts: every layout must give the loss curve and the
// final weights of the 1-rank run. The layouts cover data, tensor and 2-D parallelism, ZeRO,
// gradient accumulation and pipeline stages, with 2 linear layers or more; any executor of the
// compiled plan can run them (RunnerFactory), so the same check covers the reference executor
// and the actor runtime.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/builder.h"
#include "tests/cpp/compiler/training_util.h"
#include "tests/cpp/models/runner.h"

namespace ofl::testing {

/// Sizes of the MLP: kMlpBatch rows of kMlpIn features, kMlpHidden units per hidden layer,
/// kMlpClasses classes.
constexpr int64_t kMlpBatch = 8, kMlpIn = 6, kMlpHidden = 10, kMlpClasses = 4;

/// How one layout places the MLP: the placements and the SBP of each tensor it declares.
struct MlpLayout {
  std::string name;
  Placement placement;  // of pipeline stage 0 (of every layer without later stages)
  NdSbp data;           // x and labels
  // Weight and bias of the odd layers (1, 3, ...) and of the even layers (2, 4, ...), so a
  // tensor-parallel layout alternates column- and row-parallel layers as Megatron does.
  NdSbp w1, b1, w2, b2;
  int micro_batches = 1;
  int zero_stage = 0;
  /// Placements of pipeline stages 1, 2, ...: the layers are cut into 1 + later_stages.size()
  /// contiguous stages of equal size (layer l of L on stage l * stages / L); x is on stage 0,
  /// labels and the loss on the last.
  std::vector<Placement> later_stages = {};
  /// Linear layers: kMlpIn -> kMlpHidden (-> kMlpHidden ...) -> kMlpClasses, relu between.
  int layers = 2;

  int num_stages() const { return 1 + static_cast<int>(later_stages.size()); }
};

/// logits = relu(x @ w1 + b1) @ w2 + b2 (more layers: relu(... @ w2 + b2) @ w3 + b3, ...);
/// loss = mean(cross_entropy(logits, labels)), fetched as "loss/out0". Variables "w<l>" and
/// "b<l>" for l = 1 .. layers. The graph is written for one micro-batch (kMlpBatch /
/// micro_batches rows); the caller feeds the whole batch and the plan runs the micro-batches
/// in turn.
compiler::Graph build_mlp(const MlpLayout& layout, compiler::OptimizerConfig::Kind optimizer);

/// The feed of training step `step` (1, 2, ...): a deterministic batch, lr 0.1 (and the step
/// count for Adam) on every stage's placement.
std::map<std::string, Tensor> mlp_feed(const MlpLayout& layout,
                                       compiler::OptimizerConfig::Kind optimizer, int step);

/// Compiles build_mlp, runs `steps` training steps with the runner `runner` makes (lr 0.1,
/// deterministic batches) and returns the mean loss of each step and the final weights.
TrainingRun train_mlp(const MlpLayout& layout, compiler::OptimizerConfig::Kind optimizer, int steps,
                      const RunnerFactory& runner = reference_runner());

/// The 2-layer MLP on one rank ("single", first) and under dp2, dp3_uneven, dp4, tp2, dp2_tp2.
std::vector<MlpLayout> mlp_layouts();
/// The 2-layer MLP on one rank ("single", first), with gradient accumulation (single_accumulate4,
/// dp2_accumulate2) and on two pipeline stages (pp2_micro4, dp2_pp2_micro2).
std::vector<MlpLayout> mlp_pipelined_layouts();
/// The 4-layer MLP on one rank ("single4", first), on 4 pipeline stages of one rank each
/// (pp4_micro4, pp4_micro8) and on 2 stages of two layers each (pp2_micro4).
std::vector<MlpLayout> mlp_deep_pipelined_layouts();

}  // namespace ofl::testing
