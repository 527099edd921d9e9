#pragma once
// A GPT-2-style decoder built with the C++ graph API, with data and Megatron-style tensor
// parallelism expressed only as SBP hints: the compiler's SBP inference and boxing insert every
// collective. Used by the end-to-end numerics tests and the compiler benchmarks.
//
//   GraphBuilder b("gpt");
//   const int loss = build_gpt(b, GptConfig{.vocab_size = 16, ...}, GptParallel{.dp = 2, .tp = 2});
//   b.set_loss(loss);
//
// Inputs of the graph: "tokens" (on the first pipeline stage) and "targets" (on the last), both
// int64 and split S(0) over the data-parallel dimension. The graph is written for one
// micro-batch, (batch_size / micro_batches, block_size); the caller feeds the whole batch
// (batch_size, block_size) and the plan cuts it into micro-batches. The causal mask is built
// inside the graph (arange + greater), so the caller feeds nothing else, except "lr" and "step"
// once an optimizer is set: one pair per stage, named by GptNames::lr / GptNames::step.
// The fetched loss is a scalar with one micro-batch and (micro_batches,) otherwise, one loss per
// micro-batch; their mean is the batch's loss.

#include <cstdint>
#include <string>

#include "compiler/builder.h"

namespace ofl::compiler {

struct GptConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // T: every sequence fed has exactly this length
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t batch_size = 8;  // global batch
  bool tied_head = false;  // lm head = token embedding (V, C) used transposed
};

/// dp x tp x pp ranks starting at rank 0. The n_layer blocks are cut into pp contiguous pipeline
/// stages (the first n_layer % pp stages get one block more); the embeddings are on stage 0, the
/// final layer norm, head and loss on stage pp - 1. Stage s lives on its own dp * tp ranks
/// [s * dp * tp, (s + 1) * dp * tp): with dp > 1 and tp > 1 the placement is 2-D with hierarchy
/// (dp, tp), rows of tp consecutive ranks; otherwise it is 1-d over dp * tp ranks.
///
/// The graph is written for one micro-batch of batch_size / micro_batches sequences, and
/// build_gpt sets TrainConfig::gradient_accumulation_steps = micro_batches: the plan runs the
/// micro-batches through the stages in turn (so stages overlap) and updates the weights once.
struct GptParallel {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int micro_batches = 1;
  /// Where every stage computes (Note [Devices in a plan] in compiler/physical/expansion.h).
  DeviceType device = DeviceType::kCPU;
  /// The placement of pipeline stage `stage` described above.
  Placement placement(int stage = 0) const;
  /// dp * tp * pp.
  int64_t num_ranks() const { return int64_t{dp} * tp * pp; }
  /// The NdSbp that is `over_dp` on the data-parallel and `over_tp` on the tensor-parallel
  /// dimension, with only the dimensions the placement has.
  NdSbp sbp(const Sbp& over_dp, const Sbp& over_tp) const;
};

/// Names used by build_gpt, so tests and tools can feed and read the graph.
struct GptNames {
  static constexpr const char* kTokens = "tokens";
  static constexpr const char* kTargets = "targets";
  static constexpr const char* kLoss = "loss";
  /// The learning-rate and step inputs the optimizer pass creates for the variables of pipeline
  /// stage `stage` ("lr", "lr@1", ...: one pair per placement holding variables, numbered in the
  /// order of the variables, which build_gpt creates stage by stage).
  static std::string lr(int stage) { return stage == 0 ? "lr" : "lr@" + std::to_string(stage); }
  static std::string step(int stage) {
    return stage == 0 ? "step" : "step@" + std::to_string(stage);
  }
};

/// Adds the model to `b` (setting b's placement) and returns the scalar loss tensor
/// mean(cross_entropy(logits, targets)) of one micro-batch. The caller sets the loss and
/// optimizer. Raises InvalidArgument when the config does not fit the layout (n_head % tp,
/// n_embd % n_head, batch_size % (micro_batches * dp), fewer blocks than stages, ...).
///
/// Variables (initialisers: normal(0, 0.02) with a distinct seed each, biases zero, layer-norm
/// weights one): "wte" (V, C), "wpe" (T, C), per layer l "h<l>.ln_1.{weight,bias}",
/// "h<l>.attn.c_attn.{weight (C, 3C), bias}", "h<l>.attn.c_proj.{weight (C, C), bias}",
/// "h<l>.ln_2.*", "h<l>.mlp.c_fc.{weight (C, 4C), bias}", "h<l>.mlp.c_proj.{weight (4C, C),
/// bias}", then "ln_f.*" and, unless tied, "lm_head.weight" (C, V).
///
/// Tied head with pp > 1: "wte" lives on stage 0 and the last stage reads it. The compiler sends
/// it there (boxing across placements) and sends the head's gradient back, where autograd adds it
/// to the embedding's, so the one variable gets one update, as in the single-stage model.
///
/// Note [GPT qkv layout]: c_attn's 3C output columns are ordered (head, {q, k, v}, head_dim),
/// as in Megatron-LM, not (q | k | v) as in a Hugging Face GPT-2 checkpoint (loading one needs
/// that column permutation). With this order a column split of c_attn over tp ranks gives each
/// rank whole heads, so reshape (B, T, 3C) -> (B, T, H, 3D) and split on the last axis stay
/// local; with (q | k | v) the split along the sharded axis would need an all-gather.
int build_gpt(GraphBuilder& b, const GptConfig& config, const GptParallel& parallel);

/// The GPT training job the compiler benchmarks and `oneflowlike-plan --gpt` compile: build_gpt,
/// the loss fetched and minimised with AdamW (weight decay 0.1).
Graph gpt_training_graph(const GptConfig& config, const GptParallel& parallel);

}  // namespace ofl::compiler
