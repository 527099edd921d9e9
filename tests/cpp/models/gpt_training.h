#pragma once
// A tiny GPT (compiler/models/gpt.h) trained for a few AdamW steps: every layout (data, tensor,
// pipeline parallelism and their mixes) must reproduce the 1-rank loss curve and final weights.
// Any executor of the compiled plan can run it (RunnerFactory).

#include <cstdint>
#include <map>
#include <string>

#include "compiler/models/gpt.h"
#include "tests/cpp/compiler/training_util.h"
#include "tests/cpp/models/runner.h"

namespace ofl::testing {

/// vocab 16, block 8, 2 heads, 16 channels, batch 4, with `n_layer` blocks (pp stages need at
/// least one block each).
compiler::GptConfig tiny_gpt_config(int64_t n_layer = 2);

/// The GPT training graph: build_gpt, its loss fetched, AdamW with weight decay 0.01.
compiler::Graph build_gpt_training(const compiler::GptConfig& config,
                                   const compiler::GptParallel& parallel);
/// The feed of training step `step` (1, 2, ...): a deterministic token stream, lr 1e-2 and the
/// step count on every stage.
std::map<std::string, Tensor> gpt_feed(const compiler::GptConfig& config,
                                       const compiler::GptParallel& parallel, int step);

/// Compiles the GPT for `parallel` (AdamW, weight decay 0.01), runs `steps` steps with the
/// runner `runner` makes (lr 1e-2, deterministic token streams) and returns the mean loss of
/// each step and every trainable variable.
TrainingRun train_gpt(const compiler::GptConfig& config, const compiler::GptParallel& parallel,
                      int steps, const RunnerFactory& runner = reference_runner());

/// expect_same_training for the GPT, except for the key bias: Note [Key bias is rounding noise]
/// in gpt_training.cpp.
void expect_same_gpt_training(const TrainingRun& expected, const TrainingRun& actual,
                              const compiler::GptConfig& config, const std::string& layout);

}  // namespace ofl::testing
