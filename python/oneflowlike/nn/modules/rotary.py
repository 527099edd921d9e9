"""RotaryEmbedding: LLaMA's rotary position embedding with its cos and sin tables."""

import numpy as np

import oneflowlike as flow
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.kv_cache import _arange
from oneflowlike.nn.modules.module import Module
from oneflowlike.ops.inplace import _is_global


def _is_tensor(x):
    return isinstance(x, flow.Tensor) or _is_global(x)


class RotaryEmbedding(Module):
    """Rotates q or k (..., T, ..., head_dim) by position (F.rotary_embedding), with the tables
    angle(t, i) = t * base^(-2i / head_dim) for t < max_seq_len, i < head_dim / 2, made once in
    float64 and held as non-persistent float32 buffers (they are derived, not state, so they stay
    out of checkpoints; laying the module out moves them as any buffer). ``seq_dim`` is the
    position axis of the inputs: -2 for (B, H, T, D), 1 for (B, T, H, D). ``zigzag`` (ours; 0:
    off): the inputs' positions are in F.zigzag's order over that many pieces, and the tables
    are taken in it (Note [Zigzag order] in oneflowlike/ops/attention.h). ``forward(x,
    offset)``: x holds the positions [offset, offset + T) (generation after a KV cache's
    ``position`` ones; Note [KV cache]); ``offset`` may be a one-element integer tensor, a
    StaticKVCache's position (Note [Static KV cache])."""

    def __init__(self, head_dim, max_seq_len, base=10000.0, interleaved=False, seq_dim=-2,
                 zigzag=0):
        super().__init__()
        if head_dim <= 0 or head_dim % 2:
            raise ValueError(f"[RotaryEmbedding] head_dim must be positive and even. However, "
                             f"got {head_dim}.")
        if max_seq_len <= 0:
            raise ValueError(f"[RotaryEmbedding] max_seq_len must be positive. However, got "
                             f"{max_seq_len}.")
        self.head_dim, self.max_seq_len, self.base = head_dim, max_seq_len, base
        self.interleaved, self.seq_dim, self.zigzag = interleaved, seq_dim, zigzag
        inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        angles = np.outer(np.arange(max_seq_len, dtype=np.float64), inv_freq)
        self.register_buffer("cos", flow.tensor(np.cos(angles).astype(np.float32)),
                             persistent=False)
        self.register_buffer("sin", flow.tensor(np.sin(angles).astype(np.float32)),
                             persistent=False)
        if zigzag:  # the tables of whole sequences in their order, made once
            for name in ("cos", "sin"):
                self.register_buffer(f"{name}_zigzag", F.zigzag(getattr(self, name), 0, zigzag),
                                     persistent=False)

    def forward(self, x, offset=0):
        seq = x.shape[self.seq_dim]
        if _is_tensor(offset):  # a StaticKVCache's position (Note [Static KV cache])
            return self._at_tensor(x, seq, offset)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"[RotaryEmbedding] offset (the first position of x) must be an int "
                             f">= 0. However, got {offset!r}.")
        if offset + seq > self.max_seq_len:
            raise ValueError(f"[RotaryEmbedding] the input has {seq} positions along dim "
                             f"{self.seq_dim}"
                             + (f" from position {offset}" if offset else "")
                             + f", more than max_seq_len {self.max_seq_len}.")
        if offset and self.zigzag:
            raise ValueError(f"[RotaryEmbedding] an offset takes positions in the sequence's "
                             f"order, not zigzag={self.zigzag}'s. However, got offset {offset}.")
        cos, sin = self.cos, self.sin
        if offset:
            cos, sin = cos[offset:offset + seq], sin[offset:offset + seq]
        if self.zigzag and seq % (2 * self.zigzag):
            raise ValueError(f"[RotaryEmbedding] zigzag={self.zigzag} orders the positions in "
                             f"{2 * self.zigzag} chunks: the input's {seq} positions along dim "
                             f"{self.seq_dim} must be a multiple of that.")
        if self.zigzag and seq == self.max_seq_len:
            cos, sin = self.cos_zigzag, self.sin_zigzag
        elif seq < self.max_seq_len and not offset:
            cos, sin = cos[:seq], sin[:seq]
        if self.zigzag and seq < self.max_seq_len:
            cos, sin = F.zigzag(cos, 0, self.zigzag), F.zigzag(sin, 0, self.zigzag)
        return self._rotate(x, cos, sin)

    def _at_tensor(self, x, seq, offset):
        """The rows [offset, offset + seq) of the tables, ``offset`` a one-element integer
        tensor (its value is not read: a graph traces this once for every position)."""
        if offset.numel() != 1 or offset.dtype not in (flow.int32, flow.int64):
            raise ValueError(f"[RotaryEmbedding] a tensor offset must hold one int32/int64 "
                             f"position. However, got {offset.dtype} of shape "
                             f"{tuple(offset.shape)}.")
        if self.zigzag:
            raise ValueError(f"[RotaryEmbedding] an offset takes positions in the sequence's "
                             f"order, not zigzag={self.zigzag}'s.")
        if seq > self.max_seq_len:
            raise ValueError(f"[RotaryEmbedding] the input has {seq} positions along dim "
                             f"{self.seq_dim}, more than max_seq_len {self.max_seq_len}.")
        rows = _arange(0, seq, x) + offset.reshape(1).to(flow.int64)
        cos, sin = flow.index_select(self.cos, 0, rows), flow.index_select(self.sin, 0, rows)
        return self._rotate(x, cos, sin)

    def _rotate(self, x, cos, sin):
        if cos.dtype != x.dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return F.rotary_embedding(x, cos, sin, seq_dim=self.seq_dim, interleaved=self.interleaved)

    def extra_repr(self):
        return (f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, base={self.base}, "
                f"interleaved={self.interleaved}"
                + (f", zigzag={self.zigzag}" if self.zigzag else ""))
