"""CausalSelfAttention: GPT-2's masked multi-head self-attention."""

import math

from oneflowlike.nn import functional as F
from oneflowlike.ops.attention import _window_keys
from oneflowlike.nn.modules.dropout import Dropout
from oneflowlike.nn.modules.kv_cache import KVCache
from oneflowlike.nn.modules.linear import Linear
from oneflowlike.nn.modules.module import Module


class CausalSelfAttention(Module):
    """Multi-head self-attention where position t attends to positions <= t (GPT-2).

    ``c_attn`` (n_embd -> 3 n_embd) makes queries, keys and values; its output columns are
    ordered (head, q/k/v, head_dim), so splitting them by head gives each shard whole heads
    (tensor parallelism). ``c_proj`` (n_embd -> n_embd) mixes the heads' outputs. ``dropout``
    applies to the attention weights and to the output. Input and output: (B, T, n_embd) with
    T <= block_size. ``zigzag`` (ours; 0: off): T is in F.zigzag's order over that many pieces
    (Note [Zigzag order] in oneflowlike/ops/attention.h). ``window`` (ours; 0: off): position t
    attends to its ``window`` latest positions only, t - window < s <= t (sliding-window
    attention, Note [Sliding window]). ``forward(x, document_ids=None)``: with (B, T) integer
    ids of each position's document (sequences packed from several documents), a position
    attends within its own document only (Note [Packed documents]). ``forward(x,
    cache=kv_cache)``: x holds the next T positions after those a flow.nn.KVCache (or
    StaticKVCache) has seen, and attends over the cached keys too (generation; Note [KV cache]).
    """

    def __init__(self, n_embd, n_head, block_size, dropout=0.0, bias=True, device=None,
                 dtype=None, zigzag=0, window=0):
        super().__init__()
        if n_head <= 0 or n_embd % n_head != 0:
            raise ValueError(f"[CausalSelfAttention] n_embd must be a multiple of n_head. "
                             f"However, got n_embd={n_embd}, n_head={n_head}.")
        self.n_embd = n_embd
        self.n_head = n_head
        self.head_dim = n_embd // n_head
        self.block_size = block_size
        self.zigzag = zigzag
        self.window = _window_keys("CausalSelfAttention", window)
        self.c_attn = Linear(n_embd, 3 * n_embd, bias=bias, device=device, dtype=dtype)
        self.c_proj = Linear(n_embd, n_embd, bias=bias, device=device, dtype=dtype)
        self.attn_dropout = Dropout(dropout)
        self.resid_dropout = Dropout(dropout)

    def forward(self, x, document_ids=None, cache=None):
        # A StaticKVCache's position is a tensor: its own attend() checks it against max_len.
        seen = cache.position if isinstance(cache, KVCache) else 0
        if x.ndim != 3 or x.shape[2] != self.n_embd or seen + x.shape[1] > self.block_size:
            raise ValueError(
                f"[CausalSelfAttention] input must be (B, T, {self.n_embd}) with T <= "
                f"block_size {self.block_size}"
                + (f" - the {seen} positions cached" if cache is not None else "")
                + f". However, got {tuple(x.shape)}.")
        if cache is not None and (document_ids is not None or self.zigzag):
            raise ValueError("[CausalSelfAttention] a KV cache generates in the sequence's "
                             "order, one document: it takes no document_ids and no zigzag "
                             f"order. However, got document_ids {document_ids is not None}, "
                             f"zigzag {self.zigzag}.")
        if cache is not None and cache.window != self.window:
            raise ValueError(f"[CausalSelfAttention] the KV cache keeps a window of "
                             f"{cache.window} keys, the layer attends over {self.window} (0: "
                             f"all): make it with window={self.window}.")
        B, T, C = x.shape
        H, D = self.n_head, self.head_dim
        qkv = self.c_attn(x).reshape(B, T, H, 3 * D)  # (B, T, H, 3D): per head q | k | v
        q, k, v = (t.transpose(1, 2) for t in qkv.split(D, dim=-1))  # (B, H, T, D) each
        # Fused causal attention: query t sees keys s <= t, no (T, T) matrix is made. Dropout
        # on the attention weights (training with dropout > 0) writes the attention out.
        dropout_p = self.attn_dropout.p if self.training else 0.0
        if cache is not None:
            y = cache.attend(q, k, v, scale=1.0 / math.sqrt(D), dropout_p=dropout_p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True,
                                               scale=1.0 / math.sqrt(D),
                                               zigzag=self.zigzag, window=self.window,
                                               document_ids=document_ids)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # heads side by side again
        return self.resid_dropout(self.c_proj(y))

    def extra_repr(self):
        return (f"n_embd={self.n_embd}, n_head={self.n_head}, block_size={self.block_size}"
                + (f", window={self.window}" if self.window else ""))
