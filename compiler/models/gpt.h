#pragma once
// A GPT-2-style decoder built with the C++ graph API, with data and Megatron-style tensor
// parallelism expressed only as SBP hints: the compiler's SBP inference and boxing insert every
// collective. Used by the end-to-end numerics tests and the compiler benchmarks.
//
//   GraphBuilder b("gpt");
//   const int loss = build_gpt(b, GptConfig{.vocab_size = 16, ...}, GptParallel{.dp = 2, .tp = 2});
//   b.set_loss(loss);
//
// Inputs of the graph: "tokens" and "targets", both (batch, block_size) int64, split S(0) over
// the data-parallel dimension. The causal mask is built inside the graph (arange + greater), so
// the caller feeds nothing else (plus "lr" and "step" once an optimizer is set).

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

/// dp x tp ranks starting at rank 0. With dp > 1 and tp > 1 the placement is 2-D with hierarchy
/// (dp, tp), rows of tp consecutive ranks; otherwise it is 1-d over dp * tp ranks.
struct GptParallel {
  int dp = 1;
  int tp = 1;
  /// The placement described above.
  Placement placement() const;
  /// The NdSbp that is `over_dp` on the data-parallel and `over_tp` on the tensor-parallel
  /// dimension, with only the dimensions the placement has.
  NdSbp sbp(const Sbp& over_dp, const Sbp& over_tp) const;
};

/// Names used by build_gpt, so tests and tools can feed and read the graph.
struct GptNames {
  static constexpr const char* kTokens = "tokens";
  static constexpr const char* kTargets = "targets";
  static constexpr const char* kLoss = "loss";
};

/// Adds the model to `b` (setting b's placement) and returns the scalar loss tensor
/// mean(cross_entropy(logits, targets)). The caller sets the loss and optimizer. Raises
/// InvalidArgument when the config does not fit the layout (n_head % tp, n_embd % n_head, ...).
///
/// Variables (initialisers: normal(0, 0.02) with a distinct seed each, biases zero, layer-norm
/// weights one): "wte" (V, C), "wpe" (T, C), per layer l "h<l>.ln_1.{weight,bias}",
/// "h<l>.attn.c_attn.{weight (C, 3C), bias}", "h<l>.attn.c_proj.{weight (C, C), bias}",
/// "h<l>.ln_2.*", "h<l>.mlp.c_fc.{weight (C, 4C), bias}", "h<l>.mlp.c_proj.{weight (4C, C),
/// bias}", then "ln_f.*" and, unless tied, "lm_head.weight" (C, V).
///
/// Note [GPT qkv layout]: c_attn's 3C output columns are ordered (head, {q, k, v}, head_dim),
/// as in Megatron-LM, not (q | k | v) as in a Hugging Face GPT-2 checkpoint (loading one needs
/// that column permutation). With this order a column split of c_attn over tp ranks gives each
/// rank whole heads, so reshape (B, T, 3C) -> (B, T, H, 3D) and split on the last axis stay
/// local; with (q | k | v) the split along the sharded axis would need an all-gather.
int build_gpt(GraphBuilder& b, const GptConfig& config, const GptParallel& parallel);

}  // namespace ofl::compiler
