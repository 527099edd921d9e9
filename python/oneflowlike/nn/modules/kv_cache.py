"""KVCache: the keys and values an attention layer has computed, for generating token by token.

Note [KV cache]: a decoder generating text computes, for each new token, attention of that
token's query over the keys and values of every earlier position. Without a cache each step
runs the whole context again (O(T) rows through every layer for one new row); with one, each
layer keeps its keys and values and a step runs the new positions only (HF's past_key_values,
torchtune's and gpt-fast's KVCache). The cache is an argument of the attention module, not
part of it: a module serves training and any number of generations at once, and modules stay
stateless for nn.Graph.

Positions: a step's T new queries are the positions [position, position + T); the keys
returned are the cached ones followed by the step's. Each query sees the keys at or before its
position (and, with ``window``, its ``window`` latest: Note [Sliding window]). A step of one
token sees every key it is given, so it runs the fused kernel without a mask; a first step
(nothing cached) is ordinary causal attention, the very call the model makes without a cache;
only several tokens after a cached prefix (a second prompt, speculative drafts) need a mask,
the lower-right causal one. With ``window`` the cache keeps only the window - 1 latest keys
(Mistral's rolling buffer): that is all a later query can see, so memory stays O(window).

Eager only: a cache grows every step, which a compiled graph's fixed shapes cannot follow
(StaticKVCache, Note [Static KV cache], is the cache for graphs). On
one device, or on global tensors (a model laid out over ranks, tensor-parallel: each step's ops
are eager global ops, the cache's keys and values laid out as the compiler chose for them).
"""

import oneflowlike as flow
from oneflowlike import _C
from oneflowlike.nn import functional as F
from oneflowlike.ops.attention import _window_keys
from oneflowlike.ops.inplace import _is_global

__all__ = ["KVCache"]


def _where(t):
    """A tensor's device, or a global tensor's placement."""
    return t.placement if _is_global(t) else t.device


def _arange(start, end, like):
    """arange(start, end) where ``like`` is: on its device, or replicated on its placement."""
    if _is_global(like):
        return flow.arange(start, end, placement=like.placement,
                           sbp=(flow.sbp.broadcast,) * len(like.placement.hierarchy))
    return flow.arange(start, end, device=like.device)


def _positions(caches):
    """The caches' next positions (a set): a StaticKVCache's read eagerly (one element each; in
    a trace they are not known, and the graph's caller keeps count)."""
    if isinstance(caches[0], KVCache):
        return {c.position for c in caches}
    if getattr(caches[0].pos, "is_lazy", False):
        return {None}
    return {c.next_position() for c in caches}


class KVCache:
    """The keys and values (batch, kv_heads, positions, head_dim) of the positions one attention
    layer has seen. ``window`` (0: every position): keep only what a sliding window of that many
    keys can still see."""

    def __init__(self, window=0):
        self.window = _window_keys("KVCache", window)
        self.reset()

    def reset(self):
        """Forgets every position (a new generation)."""
        self.k = self.v = None
        self.position = 0  # the positions seen; the next step's first query is at this one

    def __len__(self):
        """The positions whose keys are held (window - 1 at most under a window)."""
        return 0 if self.k is None else self.k.shape[-2]

    def attend(self, q, k, v, scale=None, enable_gqa=False, dropout_p=0.0):
        """Adds the keys ``k`` and values ``v`` (B, kv_heads, T, D) of the next T positions and
        returns the attention (B, heads, T, D) of their queries ``q`` over every key each may
        see (F.scaled_dot_product_attention's arguments otherwise)."""
        self._check(q, k, v)
        steps = q.shape[-2]
        keys = k if self.k is None else flow.cat([self.k, k], dim=-2)
        values = v if self.v is None else flow.cat([self.v, v], dim=-2)
        held = keys.shape[-2]
        kwargs = {"scale": scale, "enable_gqa": enable_gqa, "dropout_p": dropout_p}
        if held == steps:  # nothing cached: the model's own causal attention
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True,
                                                 window=self.window, **kwargs)
        elif steps == 1:  # one query after the cache: every key held is visible
            out = F.scaled_dot_product_attention(q, keys, values, **kwargs)
        else:  # several after a cached prefix: causal from the lower right, then the window
            query_at = _arange(held - steps, held, q).reshape(steps, 1)
            key_at = _arange(0, held, q).reshape(1, held)
            visible = key_at <= query_at
            if self.window:
                visible = visible & (key_at > query_at - self.window)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, **kwargs)
        if self.window:  # what a later query can still see: its window - 1 latest keys
            keep = min(held, self.window - 1)
            keys, values = keys[:, :, held - keep:], values[:, :, held - keep:]
        self.k, self.v = keys, values
        self.position += steps
        return out

    def _check(self, q, k, v):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not (isinstance(t, _C.Tensor) or _is_global(t)) or getattr(t, "is_lazy", False):
                raise TypeError(f"[KVCache] attend takes eager tensors (a cache grows every "
                                f"step, which a compiled graph cannot follow: use "
                                f"flow.nn.StaticKVCache in a graph). However, {name} is "
                                f"{'a traced value' if getattr(t, 'is_lazy', False) else type(t).__name__}.")
            if t.ndim != 4:
                raise ValueError(f"[KVCache] q, k and v must be 4-d (batch, heads, T, head_dim). "
                                 f"However, {name} has shape {tuple(t.shape)}.")
        if (tuple(k.shape[:3]) != tuple(v.shape[:3]) or q.shape[0] != k.shape[0]
                or q.shape[2] != k.shape[2] or q.shape[3] != k.shape[3]):
            raise ValueError(f"[KVCache] q (B, heads, T, D), k and v (B, kv_heads, T, D) must "
                             f"cover the same T new positions. However, got q "
                             f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}.")
        if self.k is not None and (tuple(self.k.shape[:2]) != tuple(k.shape[:2])
                                   or self.k.shape[-1] != k.shape[-1]
                                   or self.v.shape[-1] != v.shape[-1]
                                   or self.k.dtype != k.dtype or _where(self.k) != _where(k)):
            raise ValueError(f"[KVCache] the new keys {tuple(k.shape)} {k.dtype} on "
                             f"{_where(k)} must match the cached {tuple(self.k.shape)} "
                             f"{self.k.dtype} on {_where(self.k)} but for their positions: "
                             f"reset() the cache for another batch or model.")

    @staticmethod
    def check_layers(model, caches, layers):
        """Refuses ``caches`` (a model's forward(caches=); None: none) unless they are one
        KVCache or one StaticKVCache per layer, all at one position (ValueError naming
        ``model``)."""
        if caches is None:
            return
        from oneflowlike.nn.modules.static_kv_cache import StaticKVCache

        kinds = {type(c) for c in caches}
        if (len(caches) != layers or len(kinds) != 1 or not kinds <= {KVCache, StaticKVCache}
                or len(_positions(caches)) != 1):
            got = [c if isinstance(c, (KVCache, StaticKVCache)) else type(c).__name__
                   for c in caches]
            raise ValueError(f"[{model}] caches must be {layers} flow.nn.KVCache or {layers} "
                             f"flow.nn.StaticKVCache (one per layer) at one position (reset() "
                             f"them together). However, got {got}.")

    def __repr__(self):
        return (f"KVCache(position={self.position}, held={len(self)}"
                + (f", window={self.window})" if self.window else ")"))
