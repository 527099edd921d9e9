#pragma once
// Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention) and its
// backward op.
//
// Note [Fused attention]: q (B, H, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev), H a multiple of Hk
// (grouped-query attention: query head h reads key/value head h / (H / Hk)), and optionally an
// additive float mask broadcastable to (B, H, L, S). out (B, H, L, Ev) = softmax(q k^T * scale
// + mask, causal: key j > query i masked as PyTorch's is_causal does) v, and lse (B, H, L) the
// log of each row's softmax denominator, kept for the backward op. The kernels never make the
// L x S matrix: they walk key tiles with the online softmax (kernels/online_softmax.h), and the
// backward op recomputes the probabilities of a tile from lse.

#include <vector>

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct AttentionParams {
  double scale = 1.0;  // the caller resolves PyTorch's default 1 / sqrt(E)
  bool is_causal = false;
  OFL_PARAMS(AttentionParams, scale, is_causal)
};

/// The sizes a fused-attention kernel works with, from q, k, v (the caller's part).
struct AttentionDims {
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, head_dim = 0, value_dim = 0;
  int64_t group() const { return kv_heads == 0 ? 1 : heads / kv_heads; }
};
AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v);
/// The same from the shapes of q (B, H, L, E), k (B, Hkv, S, E) and v (B, Hkv, S, Ev).
AttentionDims attention_dims(const Shape& q, const Shape& k, const Shape& v);

/// Element strides of a mask of `mask_shape` broadcast to (B, H, L, S): 0 along broadcast axes.
struct MaskStrides {
  int64_t batch = 0, head = 0, query = 0, key = 0;
};
MaskStrides attention_mask_strides(const Shape& mask_shape);

namespace functional {
/// {out, lse}; `mask` may be an undefined Tensor (no mask).
std::vector<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& mask, double scale, bool is_causal);
/// {dq, dk, dv} from dout and the forward's inputs and outputs.
std::vector<Tensor> scaled_dot_product_attention_grad(const Tensor& dout, const Tensor& q,
                                                      const Tensor& k, const Tensor& v,
                                                      const Tensor& out, const Tensor& lse,
                                                      const Tensor& mask, double scale,
                                                      bool is_causal);
}  // namespace functional

}  // namespace ofl
