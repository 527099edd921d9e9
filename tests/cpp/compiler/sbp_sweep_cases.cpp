// The SBP sweep's table of op cases (sbp_sweep_cases.h).

#include "tests/cpp/compiler/sbp_sweep_cases.h"

#include "oneflowlike/ops/attention.h"
#include "oneflowlike/ops/cached_attention.h"
#include "oneflowlike/ops/creation.h"
#include "oneflowlike/ops/embedding.h"
#include "oneflowlike/ops/fused.h"
#include "oneflowlike/ops/index_ops.h"
#include "oneflowlike/ops/layer_norm.h"
#include "oneflowlike/ops/matmul.h"
#include "oneflowlike/ops/optimizer.h"
#include "oneflowlike/ops/random.h"
#include "oneflowlike/ops/reduce.h"
#include "oneflowlike/ops/reshape.h"
#include "oneflowlike/ops/rotary.h"
#include "oneflowlike/ops/scalar.h"
#include "oneflowlike/ops/scan.h"
#include "oneflowlike/ops/shape_ops.h"
#include "oneflowlike/ops/softmax.h"
#include "oneflowlike/ops/sort.h"
#include "oneflowlike/ops/unary.h"
#include "oneflowlike/ops/where.h"

namespace ofl::compiler::sweep {

InputSpec floats(Shape shape, double lo, double hi) {
  return {std::move(shape), DataType::kFloat32, lo, hi};
}
namespace {

InputSpec positive(Shape shape) { return floats(std::move(shape), 0.5, 2.0); }
InputSpec integers(Shape shape, int64_t end) {
  return {std::move(shape), DataType::kInt64, 0.0, static_cast<double>(end)};
}
InputSpec mask(Shape shape) { return {std::move(shape), DataType::kBool, 0.0, 2.0}; }
InputSpec scalar(double value) { return {Shape{}, DataType::kFloat32, value, value}; }

}  // namespace

std::vector<OpCase> sweep_cases() {
  const Shape m{5, 4};     // (rows, cols)
  const Shape t{4, 5, 6};  // (batch, seq, hidden)
  std::vector<OpCase> cases = {
      {"add_broadcast", "add", NoParams{}, {floats(m), floats(Shape{4})}},
      {"sub", "sub", NoParams{}, {floats(m), floats(m)}},
      {"mul_broadcast", "mul", NoParams{}, {floats(m), floats(Shape{5, 1})}},
      {"div", "div", NoParams{}, {floats(m), positive(m)}},
      {"equal", "equal", NoParams{}, {integers(m, 3), integers(m, 3)}},
      {"greater", "greater", NoParams{}, {floats(m), floats(Shape{4})}},
      {"less", "less", NoParams{}, {floats(m), floats(m)}},
      // (5, 4) -> (5, 2, 2): S(1) -> S(1) is exact only when 2 | 4 pieces and 2 | 2 pieces.
      {"reshape_split_axis", "reshape", ReshapeParams{Shape{5, 2, 2}}, {floats(m)}},
      // (4, 5) -> (20,): S(0) -> S(0) is exact only when the ranks divide the 4 rows evenly.
      {"reshape_merge_axes", "reshape", ReshapeParams{Shape{-1}}, {floats(Shape{4, 5})}},
      {"expand", "expand", ExpandParams{Shape{4, 5, 4}}, {floats(Shape{5, 1})}},
      {"random_normal", "random_normal", RandomParams{m, DataType::kFloat32, 1.0, 2.0, 7, 3}, {}},
      {"random_uniform",
       "random_uniform",
       RandomParams{m, DataType::kFloat32, -2.0, 3.0, 9, 0},
       {}},
      {"dropout", "dropout", DropoutParams{0.3, 11, 5}, {floats(m)}},
      {"where", "where", NoParams{}, {mask(m), floats(m), floats(Shape{4})}},
      {"masked_fill_zero", "masked_fill", MaskedFillParams{0.0}, {floats(m), mask(Shape{5, 1})}},
      {"masked_fill_value", "masked_fill", MaskedFillParams{2.5}, {floats(m), mask(Shape{4})}},
      {"scalar_add", "scalar_add", ScalarParams{1.5}, {floats(m)}},
      {"scalar_mul", "scalar_mul", ScalarParams{-2.5}, {floats(m)}},
      {"scalar_pow", "scalar_pow", ScalarParams{1.5}, {positive(m)}},
      {"scalar_rpow", "scalar_rpow", ScalarParams{2.0}, {floats(m)}},
      {"softmax", "softmax", SoftmaxParams{-1}, {floats(m)}},
      {"log_softmax", "log_softmax", SoftmaxParams{0}, {floats(m)}},
      {"softmax_grad", "softmax_grad", SoftmaxParams{-1}, {floats(m, 0.0, 1.0), floats(m)}},
      {"log_softmax_grad", "log_softmax_grad", SoftmaxParams{0}, {floats(m, -2.0, 0.0), floats(m)}},
      {"layer_norm",
       "layer_norm",
       LayerNormParams{-1, 1e-5},
       {floats(t), floats(Shape{6}), floats(Shape{6})}},
      {"layer_norm_grad",
       "layer_norm_grad",
       LayerNormParams{2, 1e-5},
       {floats(t), floats(t), floats(Shape{4, 5}), positive(Shape{4, 5}), floats(Shape{6})}},
      {"layer_norm_param_grad",
       "layer_norm_param_grad",
       LayerNormParams{1, 1e-5},
       {floats(t), floats(t), floats(Shape{4}), positive(Shape{4})}},
      {"rms_norm", "rms_norm", LayerNormParams{-1, 1e-5}, {floats(t), floats(Shape{6})}},
      {"rms_norm_grad",
       "rms_norm_grad",
       LayerNormParams{2, 1e-5},
       {floats(t), floats(t), positive(Shape{4, 5}), floats(Shape{6})}},
      {"rms_norm_param_grad",
       "rms_norm_param_grad",
       LayerNormParams{1, 1e-5},
       {floats(t), floats(t), positive(Shape{4})}},
      // Rotary embedding of (B 4, T 5, H 6, D 4): cos and sin (T 5, D/2 2).
      {"rotary_embedding",
       "rotary_embedding",
       RotaryParams{1, false, false},
       {floats(Shape{4, 5, 6, 4}), floats(Shape{5, 2}), floats(Shape{5, 2})}},
      {"rotary_embedding_interleaved_inverse",
       "rotary_embedding",
       RotaryParams{-2, true, true},
       {floats(Shape{4, 6, 5, 4}), floats(Shape{5, 2}), floats(Shape{5, 2})}},
      // Fused attention: (B 4, H 2, L 5, E 3), 6 keys; masks per batch and per query row.
      {"scaled_dot_product_attention",
       "scaled_dot_product_attention",
       AttentionParams{0.5, true},
       {floats(Shape{4, 2, 5, 3}), floats(Shape{4, 2, 6, 3}), floats(Shape{4, 2, 6, 2})}},
      // Note [Cached attention]: a step of 2 positions into caches of 8 written in place (the
      // sweep makes them variables), at a drawn position in [0, 6]; 4 query heads over 2
      // key/value heads, and a window of 3.
      {"cached_attention",
       "cached_attention",
       CachedAttentionParams{0.5, 0},
       {floats(Shape{4, 4, 2, 3}), floats(Shape{4, 2, 2, 3}), floats(Shape{4, 2, 2, 2}),
        floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 2}), integers(Shape{1}, 7)}},
      {"cached_attention_window",
       "cached_attention",
       CachedAttentionParams{0.5, 3},
       {floats(Shape{4, 4, 2, 3}), floats(Shape{4, 2, 2, 3}), floats(Shape{4, 2, 2, 2}),
        floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 2}), integers(Shape{1}, 7)}},
      // Grouped-query attention: 4 query heads over 2 key/value heads.
      {"scaled_dot_product_attention_gqa",
       "scaled_dot_product_attention",
       AttentionParams{0.5, true},
       {floats(Shape{4, 4, 5, 3}), floats(Shape{4, 2, 6, 3}), floats(Shape{4, 2, 6, 2})}},
      {"scaled_dot_product_attention_grad_gqa",
       "scaled_dot_product_attention_grad",
       AttentionParams{0.5, true},
       {floats(Shape{4, 4, 5, 2}), floats(Shape{4, 4, 5, 3}), floats(Shape{4, 2, 6, 3}),
        floats(Shape{4, 2, 6, 2}), floats(Shape{4, 4, 5, 2}), positive(Shape{4, 4, 5})}},
      {"scaled_dot_product_attention_masked",
       "scaled_dot_product_attention_masked",
       AttentionParams{0.5, false},
       {floats(Shape{4, 2, 5, 3}), floats(Shape{4, 2, 6, 3}), floats(Shape{4, 2, 6, 2}),
        floats(Shape{4, 1, 5, 6})}},
      {"scaled_dot_product_attention_grad",
       "scaled_dot_product_attention_grad",
       AttentionParams{0.5, true},
       {floats(Shape{4, 2, 5, 2}), floats(Shape{4, 2, 5, 3}), floats(Shape{4, 2, 6, 3}),
        floats(Shape{4, 2, 6, 2}), floats(Shape{4, 2, 5, 2}), positive(Shape{4, 2, 5})}},
      {"scaled_dot_product_attention_masked_grad",
       "scaled_dot_product_attention_masked_grad",
       AttentionParams{0.5, false},
       {floats(Shape{4, 2, 5, 2}), floats(Shape{4, 2, 5, 3}), floats(Shape{4, 2, 6, 3}),
        floats(Shape{4, 2, 6, 2}), floats(Shape{4, 2, 5, 2}), positive(Shape{4, 2, 5}),
        floats(Shape{5, 6})}},
      // The zigzag order over 2 pieces (Note [Zigzag order]): L = S = 8 in 4 chunks of 2, so
      // the sweep's sequence splits cut chunks and take pieces of each order.
      {"scaled_dot_product_attention_zigzag",
       "scaled_dot_product_attention",
       AttentionParams{0.5, true, false, 2},
       {floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 2})}},
      {"scaled_dot_product_attention_grad_zigzag",
       "scaled_dot_product_attention_grad",
       AttentionParams{0.5, true, false, 2},
       {floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}),
        floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 2}), positive(Shape{4, 2, 8})}},
      // A window of 3 keys in the zigzag order (Note [Sliding window]): the sweep's sequence
      // splits cut the windows too.
      {"scaled_dot_product_attention_window",
       "scaled_dot_product_attention",
       AttentionParams{0.5, true, false, 2, 3},
       {floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 2})}},
      {"scaled_dot_product_attention_grad_window",
       "scaled_dot_product_attention_grad",
       AttentionParams{0.5, true, false, 2, 3},
       {floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}),
        floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 2}), positive(Shape{4, 2, 8})}},
      // Document ids (B 4, S 8) of 3 documents (Note [Packed documents]): causal in the zigzag
      // order, and not causal; the ids split with the batch, else whole.
      {"scaled_dot_product_attention_documents",
       "scaled_dot_product_attention_documents",
       AttentionParams{0.5, true, false, 2},
       {floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 2}),
        integers(Shape{4, 8}, 3)}},
      {"scaled_dot_product_attention_documents_grad",
       "scaled_dot_product_attention_documents_grad",
       AttentionParams{0.5, false},
       {floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 3}), floats(Shape{4, 2, 8, 3}),
        floats(Shape{4, 2, 8, 2}), floats(Shape{4, 2, 8, 2}), positive(Shape{4, 2, 8}),
        integers(Shape{4, 8}, 3)}},
      // Sequence-first (Note [Sequence-first attention]): (B 4, L 5, H 4, E 3), heads split on
      // axis 2, lse (B, H, L) on axis 1; grouped-query, masked.
      {"scaled_dot_product_attention_sequence_first",
       "scaled_dot_product_attention",
       AttentionParams{0.5, true, true},
       {floats(Shape{4, 5, 4, 3}), floats(Shape{4, 6, 2, 3}), floats(Shape{4, 6, 2, 2})}},
      {"scaled_dot_product_attention_masked_sequence_first",
       "scaled_dot_product_attention_masked",
       AttentionParams{0.5, false, true},
       {floats(Shape{4, 5, 2, 3}), floats(Shape{4, 6, 2, 3}), floats(Shape{4, 6, 2, 2}),
        floats(Shape{4, 2, 5, 6})}},
      {"scaled_dot_product_attention_grad_sequence_first",
       "scaled_dot_product_attention_grad",
       AttentionParams{0.5, true, true},
       {floats(Shape{4, 5, 4, 2}), floats(Shape{4, 5, 4, 3}), floats(Shape{4, 6, 2, 3}),
        floats(Shape{4, 6, 2, 2}), floats(Shape{4, 5, 4, 2}), positive(Shape{4, 4, 5})}},
      {"scaled_dot_product_attention_masked_grad_sequence_first",
       "scaled_dot_product_attention_masked_grad",
       AttentionParams{0.5, false, true},
       {floats(Shape{4, 5, 2, 2}), floats(Shape{4, 5, 2, 3}), floats(Shape{4, 6, 2, 3}),
        floats(Shape{4, 6, 2, 2}), floats(Shape{4, 5, 2, 2}), positive(Shape{4, 2, 5}),
        floats(Shape{5, 6})}},
      {"assign", "assign", NoParams{}, {floats(m), floats(m)}},
      {"sgd_update",
       "sgd_update",
       SgdParams{0.9, 0.0, 0.01, true},
       {floats(m), floats(m), floats(m), scalar(0.1)}},
      {"adamw_update",
       "adam_update",
       AdamParams{0.9, 0.99, 1e-8, 0.01, true},
       {floats(m), floats(m), floats(m), positive(m), scalar(0.1), scalar(3.0)}},
      // Note [Dynamic loss scaling]: skip 0 updates, skip 1 leaves everything.
      {"sgd_update_skippable",
       "sgd_update_skippable",
       SgdParams{0.9, 0.0, 0.01, false},
       {floats(m), floats(m), floats(m), scalar(0.1), scalar(0.0)}},
      {"adam_update_skippable",
       "adam_update_skippable",
       AdamParams{0.9, 0.99, 1e-8, 0.01, true},
       {floats(m), floats(m), floats(m), positive(m), scalar(0.1), scalar(3.0), scalar(1.0)}},
      // Note [Multi-tensor updates]: tensors of two shapes, scaled, and (Adam) skippable.
      {"multi_tensor_sum_squares",
       "multi_tensor_sum_squares",
       NoParams{},
       {floats(m), floats(Shape{6, 2}), floats(Shape{4, 4, 3})}},
      {"multi_tensor_count_nonfinite",
       "multi_tensor_count_nonfinite",
       NoParams{},
       {floats(m), floats(Shape{6, 2})}},
      {"multi_tensor_sgd_update",
       "multi_tensor_sgd_update",
       MultiSgdParams{0.9, 0.0, 0.01, true, /*scaled=*/true, /*skippable=*/false},
       {scalar(0.1), scalar(0.5), floats(m), floats(m), floats(m), floats(Shape{6, 2}),
        floats(Shape{6, 2}), floats(Shape{6, 2})}},
      {"multi_tensor_adam_update",
       "multi_tensor_adam_update",
       MultiAdamParams{0.9, 0.99, 1e-8, 0.01, true, /*scaled=*/true, /*skippable=*/true},
       {scalar(0.1), scalar(3.0), scalar(0.5), scalar(0.0), floats(m), floats(m), floats(m),
        positive(m), floats(Shape{6, 2}), floats(Shape{6, 2}), floats(Shape{6, 2}),
        positive(Shape{6, 2})}},
      {"count_nonfinite", "count_nonfinite", NoParams{}, {floats(m)}},
      {"loss_scale_update",
       "loss_scale_update",
       LossScaleParams{2.0, 0.5, 3},
       {scalar(1024.0), scalar(2.0), scalar(7.0), scalar(0.0)}},
      {"embedding",
       "embedding",
       EmbeddingParams{},
       {floats(Shape{7, 6}), integers(Shape{4, 5}, 7)}},
      {"embedding_grad",
       "embedding_grad",
       EmbeddingGradParams{7},
       {floats(t), integers(Shape{4, 5}, 7)}},
      {"embedding_grad_padding",
       "embedding_grad",
       EmbeddingGradParams{7, 3},
       {floats(t), integers(Shape{4, 5}, 7)}},
      // Index ops along dim 1 (Note [Index ops SBP]): index is narrower than x on axis 0, so
      // only axis 2 splits x and index together.
      {"gather", "gather", IndexParams{1}, {floats(Shape{5, 6, 4}), integers(Shape{4, 5, 4}, 6)}},
      {"gather_grad",
       "gather_grad",
       IndexGradParams{1, Shape{5, 6, 4}},
       {floats(Shape{4, 5, 4}), integers(Shape{4, 5, 4}, 6)}},
      {"index_select", "index_select", IndexParams{1}, {floats(t), integers(Shape{6}, 5)}},
      {"index_select_grad",
       "index_select_grad",
       IndexGradParams{1, Shape{4, 7, 6}},
       {floats(Shape{4, 5, 6}), integers(Shape{5}, 7)}},
      {"max_dim", "max_dim", DimReduceParams{1, false}, {floats(t)}},
      {"min_dim_keepdim", "min_dim", DimReduceParams{-1, true}, {floats(t)}},
      {"topk", "topk", TopkParams{3, 1, true, true}, {floats(t)}},
      {"sort_descending", "sort", SortParams{-1, true, false}, {floats(t)}},
      {"cumsum", "cumsum", CumsumParams{1, false}, {floats(t)}},
      {"stop_gradient", "stop_gradient", NoParams{}, {floats(t)}},
      {"cumsum_reverse", "cumsum", CumsumParams{-1, true}, {floats(t)}},
      {"fill", "fill", FillParams{m, DataType::kFloat32, 2.5}, {}},
      {"arange", "arange", ArangeParams{1.0, 6.5, 0.5, DataType::kFloat32}, {}},
      {"cast_to_float64", "cast", CastParams{DataType::kFloat64}, {floats(m)}},
      {"cast_to_int64", "cast", CastParams{DataType::kInt64}, {floats(m, -3.0, 3.0)}},
      // In a plan the placement decides devices, so a device copy is a copy (Note [Device
      // copies]).
      {"to_device", "to_device", ToDeviceParams{"cpu:0", "cpu:0"}, {floats(m)}},
      {"sparse_softmax_cross_entropy",
       "sparse_softmax_cross_entropy",
       NoParams{},
       {floats(t), integers(Shape{4, 5}, 6)}},
      {"sparse_softmax_cross_entropy_grad",
       "sparse_softmax_cross_entropy_grad",
       NoParams{},
       {floats(t), integers(Shape{4, 5}, 6), floats(Shape{4, 5})}},
      {"reduce_sum", "reduce_sum", ReduceParams{{1}, false}, {floats(t)}},
      {"reduce_mean", "reduce_mean", ReduceParams{{0}, true}, {floats(m)}},
      {"reduce_max", "reduce_max", ReduceParams{{-1}, false}, {floats(m)}},
      {"reduce_min", "reduce_min", ReduceParams{{0}, false}, {floats(m)}},
      {"matmul", "matmul", MatmulParams{}, {floats(m), floats(Shape{4, 6})}},
      {"matmul_nd_transpose_b",
       "matmul",
       MatmulParams{false, true, 0.5},
       {floats(t), floats(Shape{4, 6})}},
      {"matmul_transpose_a",
       "matmul",
       MatmulParams{true, false, 1.0},
       {floats(Shape{4, 5}), floats(Shape{4, 6})}},
      {"batch_matmul", "batch_matmul", MatmulParams{}, {floats(t), floats(Shape{4, 6, 5})}},
      // A weight gradient over (B 4, T 5) rows: either leading axis splits both into partials.
      {"broadcast_matmul_grad_b",
       "broadcast_matmul_grad_b",
       MatmulParams{false, false, 0.5},
       {floats(Shape{4, 5, 6}), floats(Shape{4, 5, 7})}},
      {"transpose", "transpose", TransposeParams{{2, 0, 1}}, {floats(t)}},
      {"slice", "slice", SliceParams{{0, 1}, {5, 6}, {1, 2}}, {floats(Shape{5, 6})}},
      {"slice_grad",
       "slice_grad",
       SliceGradParams{Shape{5, 6}, {0, 1}, {5, 6}, {1, 2}},
       {floats(Shape{5, 3})}},
      {"concat", "concat", ConcatParams{1}, {floats(m), floats(Shape{5, 6}), floats(m)}},
      {"split", "split", SplitParams{-1, {4, 2, 4}}, {floats(Shape{5, 10})}},
      {"gelu_tanh", "gelu", GeluParams{"tanh"}, {floats(m)}},
      {"gelu", "gelu", GeluParams{"none"}, {floats(m)}},
      {"gelu_grad", "gelu_grad", GeluParams{"none"}, {floats(m), floats(m)}},
      {"fused_elementwise",
       "fused_elementwise",
       FusedElementwiseParams{"scalar_mul(0.5),tanh,scalar_add(1)"},
       {floats(m)}},
      {"fused_elementwise_linear",
       "fused_elementwise",
       FusedElementwiseParams{"scalar_mul(-1.5),neg"},
       {floats(m)}},
  };
  for (const char* op : {"neg", "abs", "exp", "tanh", "sigmoid", "silu", "relu"}) {
    cases.push_back({op, op, NoParams{}, {floats(m)}});
  }
  for (const char* op : {"log", "sqrt", "rsqrt"})
    cases.push_back({op, op, NoParams{}, {positive(m)}});
  for (const char* op : {"tanh_grad", "sigmoid_grad", "relu_grad", "abs_grad", "silu_grad"}) {
    cases.push_back({op, op, NoParams{}, {floats(m), floats(m)}});
  }
  return cases;
}

}  // namespace ofl::compiler::sweep
