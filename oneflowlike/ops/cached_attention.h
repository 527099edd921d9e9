#pragma once
// Attention over a KV cache that the op itself extends in place (flash-attn's
// flash_attn_with_kvcache, vLLM's paged append, in one fixed-shape cache).
//
// Note [Cached attention]: a decoder's step of T new positions, for a StaticKVCache (Note
// [Static KV cache] in python/oneflowlike/nn/modules/static_kv_cache.py). Inputs q (B, H, T, E),
// the step's k (B, Hk, T, E) and v (B, Hk, T, Ev), the caches k_cache (B, Hk, L, E) and v_cache
// (B, Hk, L, Ev), and position (1,) int64, the step's first position p. The op writes k and v
// into the caches' rows [p, p + T) in place (TMutatedInputs: the caches are a graph's variables,
// or a module's buffers eagerly), then out (B, H, T, Ev) is causal attention of each query over
// the cache's rows up to its own position p + t (with `window` w > 0 only the w latest, (p + t -
// w, p + t]), H a multiple of Hk as in fused attention. Only the rows [0, p + T) are read: a step
// costs O((p + T) T), not O(L T), and nothing of the cache is copied but the step's rows (in
// float32, float64, and bfloat16 where the CPU has the tile instructions; float16, and bfloat16
// without them, attend on float32 copies of q and the whole caches, O(L) a step: Note [Widened
// kernels]). A step
// past the cache (p + T > L, or p < 0) raises on the CPU; the CUDA kernel does not read p on
// the host, so it writes no row outside the cache and leaves the check to the caller (the
// Python side checks eagerly). Not differentiable: it is a generation op (a caller that needs
// gradients composes the step from differentiable ops, as StaticKVCache does).
// SBP: split along the batch (every input but the position) or along the heads (q, k, v and
// both caches, whose kv heads go with their query heads: TAlignedSplits), or all broadcast; the
// position is broadcast. The caches are written in place, so they arrive as they are laid out
// (Note [In-place updates wait for readers] orders the rest).
// Under mixed precision the caches keep their dtype and the other floating inputs are cast to
// it (amp_input_dtypes: an op writing a tensor in place takes its operands in that tensor's
// dtype).

#include "oneflowlike/params.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct CachedAttentionParams {
  double scale = 1.0;  // the caller resolves the default 1 / sqrt(E)
  int64_t window = 0;  // Note [Sliding window]: 0, or the latest keys each query sees
  OFL_PARAMS(CachedAttentionParams, scale, window)
};

namespace functional {
/// The attention of `q` over the caches after k and v are written at `position` (Note [Cached
/// attention]); k_cache and v_cache are written in place.
Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                        const Tensor& v_cache, const Tensor& position, double scale,
                        int64_t window);
}  // namespace functional

}  // namespace ofl
