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
//
// Note [Sequence-first attention]: with AttentionParams::sequence_first, q, k, v and out (and
// dout, dq, dk, dv) are (B, L, H, E) instead of (B, H, L, E): flash-attn's layout, and what a
// model has before it moves the heads forward (q = qkv.reshape(B, T, H, 3D).split(...)
// .transpose(1, 2)). The kernels read and write rows at a stride of H * E (AttentionStrides),
// so the transposes into heads and back are not made at all; lse stays (B, H, L). On CPU
// placements nn.Graph folds those transposes into the op (compiler/passes/attention_layout.cpp);
// eager calls keep PyTorch's layout. Results are the same bits in either layout (the same sums in
// one order).
//
// Note [Sequence-split attention]: context parallelism in SBP terms. q, out and lse may be split
// along the sequence (the queries) while k and v are whole (broadcast): each rank's queries
// attend to every key, so the ranks of a sequence-split model gather k and v (the compiler's
// all-gather, Llama 3's context parallelism) and their gradients come back as partial sums (dk
// and dv P, reduced onto the keys' layout by the compiler). Under is_causal a piece's rows are
// queries [o, o + L) of the logical sequence, so query i sees keys up to o + i: the kernels read
// o from the region of their output 0 (out, or dq) along the sequence (the ops are
// TPositionDependent), through attention_dims(ctx, q_at), into AttentionDims::query_offset. The
// split is contiguous, so with is_causal the ranks of later pieces do more of the work (their
// queries see more keys): Note [Zigzag order] balances it.
//
// Note [Zigzag order]: with AttentionParams::zigzag = n > 0 the sequence of q, k, v (and out,
// lse and the gradients) is stored in the order that balances causal attention over n sequence
// pieces (Megatron's and Llama 3's context parallelism): cut in 2n chunks of T / 2n, stored as
// chunks 0, 2n-1, 1, 2n-2, ..., n-1, n, so the i-th of n contiguous pieces holds chunks i and
// 2n-1-i, and every piece's queries see about as many keys. The op's signatures are the same
// (the queries split along the stored sequence with k and v whole); a row's place in the sequence
// is AttentionDims::position of its stored index, and everything causal asks it. The CPU kernels
// walk the keys in the sequence's order, in tiles cut at chunk edges, so that each key tile is
// rows of one chunk read where they are stored (AttentionDims::key_row) and what a query sees of
// it is still a prefix; the key tiles a query tile reads end at the largest position among its
// rows (positions rise within a chunk only), and the backward skips the query tiles that see none
// of a key tile. The CUDA kernel, which makes whole score rows, hides key j from query i where
// position(j) > position(i). Only is_causal attention without a mask has an order (without
// causality the order of the rows does not matter; a mask would have to come in one order or the
// other), over sequences of one length that 2n divides. n = 1 is the sequence's own order.
//
// Note [Sliding window]: with AttentionParams::window = w > 0 (is_causal only) each query sees
// the w latest keys, itself included: query i sees the keys at positions (position(i) - w,
// position(i)], Mistral's and Gemma's local attention (flash-attn's window_size (w - 1, 0)). A
// row's keys are then an interval, not a prefix: AttentionDims::first_key gives its start. The
// CPU kernels skip the key tiles wholly before a query tile's first key (forward) and the query
// tiles that see none of a key tile (backward), so a step costs O(L w), not O(L^2); the tiles
// they still read are the ones a plain causal call reads, cut in the same places, so a row's sums
// run in the same order and a window covering the sequence gives causal attention's bits. The
// window is by position, so it composes with the sequence split and the zigzag order unchanged,
// and the SBP signatures are those of causal attention.
//
// Note [Packed documents]: pretraining packs several documents into one sequence, and a token
// should not attend to the documents before its own (Llama 3; flash-attn's varlen cu_seqlens,
// FlexAttention's document mask). The ops named *_documents take document_ids (B, S) of int32 or
// int64, self-attention's (L = S), in the order q, k and v are stored (the zigzag order too):
// query i sees key j only where their ids are equal, with is_causal (and a window) on top. The
// ids need not rise along the sequence; where they do (packing), the CPU kernels skip each pair
// of a query tile and a key tile whose ranges of ids do not meet, so the keys a row reads are
// its own document's plus those of the tiles it straddles. Under the query split the ids are
// whole, as k and v (every row needs its keys' ids), and split with the batch otherwise. Every
// row sees at least its own key, so none attends to nothing.

#include <vector>

#include "oneflowlike/common/host_device.h"
#include "oneflowlike/params.h"
#include "oneflowlike/sbp.h"
#include "oneflowlike/tensor.h"

namespace ofl {

struct KernelContext;

struct AttentionParams {
  double scale = 1.0;  // the caller resolves PyTorch's default 1 / sqrt(E)
  bool is_causal = false;
  bool sequence_first = false;  // Note [Sequence-first attention]
  int64_t zigzag = 0;           // Note [Zigzag order]: n > 0, the queries in its order
  int64_t window = 0;           // Note [Sliding window]: w > 0, the keys each query sees
  OFL_PARAMS(AttentionParams, scale, is_causal, sequence_first, zigzag, window)
};

/// Where row i of head h of batch b of one attention tensor starts: b * batch + h * head +
/// i * row elements (its last axis contiguous).
struct AttentionStrides {
  int64_t batch = 0, head = 0, row = 0;
  int64_t at(int64_t b, int64_t h, int64_t i) const { return b * batch + h * head + i * row; }
};

/// The sizes a fused-attention kernel works with, from q, k, v (the caller's part), and the
/// strides of q (and dq), k (dk), v (dv) and out (dout) in the op's layout.
struct AttentionDims {
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, head_dim = 0, value_dim = 0;
  // Where the queries start in the stored sequence (Note [Sequence-split attention]), and the
  // order it is stored in (Note [Zigzag order]; 0: the sequence's own). Under is_causal query i
  // sees the keys at positions [0, query_position(i)].
  int64_t query_offset = 0;
  int64_t zigzag = 0;
  int64_t window = 0;  // Note [Sliding window]: 0, or the keys each query sees
  bool sequence_first = false;
  AttentionStrides q, k, v, out;
  OFL_HOST_DEVICE int64_t group() const { return kv_heads == 0 ? 1 : heads / kv_heads; }
  // The zigzag order's chunk (its sequences are as long as the keys).
  OFL_HOST_DEVICE int64_t chunk() const { return keys / (2 * zigzag); }
  // The position in the sequence of stored row `stored` (of the whole sequence).
  OFL_HOST_DEVICE int64_t position(int64_t stored) const {
    if (zigzag == 0) return stored;
    const int64_t c = stored / chunk();
    return (c % 2 == 0 ? c / 2 : 2 * zigzag - 1 - c / 2) * chunk() + stored % chunk();
  }
  OFL_HOST_DEVICE int64_t query_position(int64_t i) const { return position(query_offset + i); }
  // The position of the first key query i may see under is_causal: 0, or with a window the
  // start of its w latest (Note [Sliding window]).
  OFL_HOST_DEVICE int64_t first_key(int64_t i) const {
    const int64_t first = window > 0 ? query_position(i) - window + 1 : 0;
    return first > 0 ? first : 0;
  }
  // Where the key at `position` is stored: position's inverse.
  OFL_HOST_DEVICE int64_t key_row(int64_t at) const {
    if (zigzag == 0) return at;
    const int64_t c = at / chunk();
    return (c < zigzag ? 2 * c : 2 * (2 * zigzag - 1 - c) + 1) * chunk() + at % chunk();
  }
  // The largest position among queries [i0, i1) (i0 < i1): the last row of each chunk they
  // cross, positions rising within a chunk.
  int64_t last_query_position(int64_t i0, int64_t i1) const;
};
AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v,
                             bool sequence_first = false);
/// The same from the shapes of q (B, H, L, E), k (B, Hkv, S, E) and v (B, Hkv, S, Ev), or with
/// `sequence_first` q (B, L, H, E), k (B, S, Hkv, E) and v (B, S, Hkv, Ev).
AttentionDims attention_dims(const Shape& q, const Shape& k, const Shape& v,
                             bool sequence_first = false);

/// The same for a kernel whose q, k and v are inputs q_at..q_at + 2, with its queries placed
/// by place_queries.
AttentionDims attention_dims(const KernelContext& ctx, int q_at);
/// Tells `d` where its queries are in the sequence: the piece whose output 0 covers `region` of
/// the logical tensor (empty: all of it) starts at the start of its sequence axis (Note
/// [Sequence-split attention]), in the order `params` gives (Note [Zigzag order]).
void place_queries(AttentionDims* d, const AttentionParams& params,
                   const std::vector<Range>& region);

/// The document ids of Note [Packed documents] as a kernel reads them (host or device memory).
struct DocumentIds {
  const void* data = nullptr;  // (B, S) int32 or int64; null: none (every key may be seen)
  bool wide = false;           // int64
  int64_t keys = 0;            // S
  OFL_HOST_DEVICE bool present() const { return data != nullptr; }
  // The document of stored row `row` of sequence b.
  OFL_HOST_DEVICE int64_t of(int64_t b, int64_t row) const {
    const int64_t at = b * keys + row;
    return wide ? static_cast<const int64_t*>(data)[at] : static_cast<const int32_t*>(data)[at];
  }
};
/// The ids of the input `at` of a kernel whose op is one of the *_documents ops (an integer
/// input there; a float one is a mask): none otherwise.
DocumentIds document_ids_of(const KernelContext& ctx, int at);

/// Element strides of a mask of `mask_shape` broadcast to (B, H, L, S): 0 along broadcast axes.
struct MaskStrides {
  int64_t batch = 0, head = 0, query = 0, key = 0;
};
MaskStrides attention_mask_strides(const Shape& mask_shape);

namespace functional {
/// {out, lse}; `mask` and `document_ids` (Note [Packed documents]) may be undefined Tensors
/// (none), and at most one is defined.
std::vector<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& mask, double scale, bool is_causal,
                                                 bool sequence_first = false, int64_t zigzag = 0,
                                                 int64_t window = 0,
                                                 const Tensor& document_ids = Tensor());
/// {dq, dk, dv} from dout and the forward's inputs and outputs.
std::vector<Tensor> scaled_dot_product_attention_grad(const Tensor& dout, const Tensor& q,
                                                      const Tensor& k, const Tensor& v,
                                                      const Tensor& out, const Tensor& lse,
                                                      const Tensor& mask, double scale,
                                                      bool is_causal, bool sequence_first = false,
                                                      int64_t zigzag = 0, int64_t window = 0,
                                                      const Tensor& document_ids = Tensor());
}  // namespace functional

}  // namespace ofl
