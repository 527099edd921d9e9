#pragma once
// The logical passes, in the order compile() runs them. Each lives in its own file.

#include <memory>

#include "compiler/pass_manager.h"

namespace ofl::compiler {

/// Runs meta inference on every op (needs nothing; provides "shapes"). Errors name the op, its
/// source line, the inputs and their shapes.
std::unique_ptr<Pass> make_shape_inference_pass();
/// Mixed precision: casts each op's inputs to the dtypes of the mixed-precision policy
/// (amp_input_dtypes) when TrainConfig::amp_dtype is bfloat16 or float16 (needs "shapes"; run
/// before autograd, whose backward then follows the casts). Note [Mixed precision] in amp.cpp.
std::unique_ptr<Pass> make_amp_pass();
/// Folds the swaps of axes 1 and 2 around fused attention into the op, which then runs
/// sequence-first (needs "shapes"; run before autograd and dead-code elimination after it).
/// Note [Attention layout folding].
std::unique_ptr<Pass> make_attention_layout_pass();
/// Backward ops from each op's FGradient, from the loss to every trainable variable (needs
/// "shapes"; provides "gradients"). Fills Graph::variable_grads.
std::unique_ptr<Pass> make_autograd_pass();
/// Activation checkpointing: for each LogicalOp::checkpoint_group, the backward reads
/// recomputed copies of the group's forward activations, ordered after the gradient of the
/// group's outputs (needs "gradients"; run before CSE). Note [Activation checkpointing].
std::unique_ptr<Pass> make_checkpointing_pass();
/// ZeRO: shards trainable variables (and so their optimizer state and gradients) over the
/// hierarchy dimensions where they are replicated, when zero_stage >= 1 (needs "shapes").
std::unique_ptr<Pass> make_zero_pass();
/// Gradient clipping, optimizer state variables and update ops (needs "gradients"; provides
/// "optimizer").
std::unique_ptr<Pass> make_optimizer_pass();
/// Makes a cast to float32 of a 16-bit product's output the product itself, writing float32
/// (needs "gradients"; run dead-code elimination after it). Note [Casts folded into products].
std::unique_ptr<Pass> make_cast_folding_pass();
/// Removes ops that no fetch, loss or in-place update depends on (needs "shapes").
std::unique_ptr<Pass> make_dead_code_elimination_pass();
/// Merges compute ops with equal type, params, inputs and placement (needs "shapes").
std::unique_ptr<Pass> make_common_subexpression_elimination_pass();
/// Fuses chains of unary elementwise ops into fused_elementwise (needs "shapes"); run
/// dead-code elimination after it.
std::unique_ptr<Pass> make_fusion_pass();
/// Chooses an N-d SBP signature for every op by cost (needs "shapes"; provides "sbp").
std::unique_ptr<Pass> make_sbp_inference_pass();
/// Estimated bytes moved per iteration to turn a tensor's (placement, SBP) into another: the
/// cost SBP inference minimises.
double boxing_cost(const TensorMeta& meta, const Placement& from_placement, const NdSbp& from,
                   const Placement& to_placement, const NdSbp& to);

/// Inserts a boxing op wherever a consumer needs another (placement, SBP) than its producer
/// gives (needs "sbp"; provides "boxing").
std::unique_ptr<Pass> make_boxing_insertion_pass();

}  // namespace ofl::compiler
