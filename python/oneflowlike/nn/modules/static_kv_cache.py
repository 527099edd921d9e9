"""StaticKVCache: a KV cache of fixed shape, for generating through a compiled nn.Graph.

Note [Static KV cache]: flow.nn.KVCache grows by a step's positions every step (Note [KV
cache]), which an eager call follows and a compiled graph, whose shapes are fixed when it is
traced, cannot. This cache keeps the keys and values of ``max_len`` positions in buffers of one
shape, (B, kv_heads, max_len, D), and the next position in a third buffer, ``pos``: a
tensor, not a Python int, so that a graph traced once runs every later step (gpt-fast's and
HF's StaticCache; torch users compile a decoder so). A step of T new positions writes its
keys and values into the slots [position, position + T), attends each query t over the slots
s <= position + t (and, with ``window``, s > position + t - window), and adds T to
``position``. Two ways:
- in place, one cached_attention op (Note [Cached attention] in
  oneflowlike/ops/cached_attention.h): the kernel copies the step's rows into the caches and
  runs the fused attention over the rows [0, position + T) where they lie. In a graph the
  caches are the variables themselves, written with no copy (Note [Buffers written in place in
  build] in compiler/graph_tracer.cpp); eagerly, the module's tensors. The op has no gradient,
  so this is the way whenever none is needed (generation runs under no_grad);
- composed of differentiable ops, where a gradient must reach q, k or v, with dropout, and on
  eager global tensors (whose ops run in graphs of their own, on copies, so an in-place write
  would be lost): every slot takes where(slot is new, the new key at slot - position, the old
  one), a pass over the cache that is then assigned to the buffer (Note [Buffers written in
  build] in compiler/graph_tracer.h), and attention runs over all max_len slots through a (T,
  max_len) mask that hides the slots not yet written (zeros, or an older generation's keys).
Both give the same values (tested). The position tensor also gives the rotary tables' rows and
the GPT's position embeddings, as ``offset`` (RotaryEmbedding, the examples' Embeddings take an
int or such a tensor); its write is an ordinary buffer write in either way. With ``window`` the
cache still holds max_len slots (no rolling buffer: a slot's place is its position).

Bounds: a step past max_len is refused eagerly (the position is read, one element). In a graph
the position is not known when it is traced: the CPU kernel of the in-place op refuses such a
step when it runs (the run fails, naming it); the CUDA kernel writes nothing outside the cache
and the caller keeps count (the examples' generate() does); and a position past the tables of
a model whose max_len is its block_size makes the rotary or position-embedding lookup fail
rather than attend wrongly.
"""

import oneflowlike as flow
from oneflowlike import _C
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.kv_cache import _arange, _where
from oneflowlike.nn.modules.module import Module
from oneflowlike.ops.attention import _window_keys
from oneflowlike.ops.inplace import _is_global

__all__ = ["StaticKVCache"]


class StaticKVCache(Module):
    """The keys and values (batch, kv_heads, max_len, head_dim) of one attention layer's
    positions, in buffers of fixed shape, with the next position in the buffer ``pos`` (int64,
    shape (1,); read it as ``position``). ``dtype``, ``device``: the buffers' (the keys'
    dtype); ``placement`` and ``sbp`` lay the keys and values out as global tensors (``sbp``
    for them; the position is broadcast), as a tensor-parallel model's keys are laid out
    (split over heads)."""

    def __init__(self, batch, kv_heads, max_len, head_dim, window=0, dtype=flow.float32,
                 device="cpu", placement=None, sbp=None):
        super().__init__()
        for name, n in (("batch", batch), ("kv_heads", kv_heads), ("max_len", max_len),
                        ("head_dim", head_dim)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"[StaticKVCache] {name} must be a positive int. However, got "
                                 f"{n!r}.")
        self.window = _window_keys("StaticKVCache", window)
        self.max_len = max_len
        shape = (batch, kv_heads, max_len, head_dim)
        if placement is None:
            made = [flow.zeros(*shape, dtype=dtype, device=device) for _ in range(2)]
            position = flow.zeros(1, dtype=flow.int64, device=device)
        else:
            broadcast = (flow.sbp.broadcast,) * len(placement.hierarchy)
            made = [flow.zeros(*shape, dtype=dtype, placement=placement,
                               sbp=broadcast if sbp is None else sbp) for _ in range(2)]
            position = flow.zeros(1, dtype=flow.int64, placement=placement, sbp=broadcast)
        # Derived state, as torch's caches: out of checkpoints.
        self.register_buffer("k", made[0], persistent=False)
        self.register_buffer("v", made[1], persistent=False)
        self.register_buffer("pos", position, persistent=False)

    @classmethod
    def for_keys_of(cls, weight, batch, kv_heads, max_len, head_dim, window=0, dtype=None):
        """A cache for the keys a projection ``weight`` (out_features ordered by head) makes:
        on its device, or on its placement, split over heads where the weight is split over
        its output features (tensor parallelism), broadcast elsewhere; ``dtype`` (None: the
        weight's) is the keys' dtype (bfloat16 under autocast)."""
        dtype = weight.dtype if dtype is None else dtype
        if not _is_global(weight):
            return cls(batch, kv_heads, max_len, head_dim, window, dtype, device=weight.device)
        sbp = tuple(flow.sbp.split(1) if s == flow.sbp.split(0) else flow.sbp.broadcast
                    for s in weight.sbp)
        return cls(batch, kv_heads, max_len, head_dim, window, dtype,
                   placement=weight.placement, sbp=sbp)

    @property
    def position(self):
        """The next position (int64, shape (1,)), the buffer ``pos``: its newest value, which a
        graph's step may hold (Note [Graphs sharing modules]; a model reads it before its
        cache's call, for the rotary tables or the position embeddings). Only ``pos`` comes
        back from the graph here, not the keys and values."""
        from oneflowlike.framework.global_tensor import current_tracer
        from oneflowlike.nn import graph_sharing

        if graph_sharing._holders and current_tracer() is None:
            graph_sharing.release([self.pos])
        return self.pos

    def next_position(self):
        """The next position as an int (eagerly: it reads one element)."""
        at = self.position
        return int((at.to_local() if _is_global(at) else at).numpy()[0])

    def reset(self):
        """Forgets every position (a new generation): the next step starts at position 0."""
        self.pos.zero_()

    def attend(self, q, k, v, scale=None, enable_gqa=False, dropout_p=0.0):
        """Writes the keys ``k`` and values ``v`` (B, kv_heads, T, D) of the next T positions
        and returns the attention (B, heads, T, D) of their queries ``q`` over every key each
        may see (F.scaled_dot_product_attention's arguments otherwise). Through the module's
        call, so that values a graph holds of the buffers come first (Note [Graphs sharing
        modules])."""
        return self(q, k, v, scale=scale, enable_gqa=enable_gqa, dropout_p=dropout_p)

    def forward(self, q, k, v, scale=None, enable_gqa=False, dropout_p=0.0):
        self._check(q, k, v)
        if self._in_place(q, k, v, enable_gqa, dropout_p):
            out = _C.cached_attention(q, k, v, self.k, self.v, self.pos,
                                      q.shape[-1] ** -0.5 if scale is None else float(scale),
                                      self.window)
            with flow.no_grad():
                self.pos.add_(q.shape[-2])
            return out
        steps, slots = q.shape[-2], self.max_len
        at = self.pos
        slot = _arange(0, slots, q)  # (max_len,)
        new = slot - at  # the step's position written into each slot
        fresh = ((new >= 0) & (new < steps)).reshape(1, 1, slots, 1)
        if steps > 1:  # each slot's new key, where it takes one
            pick = new.clamp(0, steps - 1)
            k, v = flow.index_select(k, 2, pick), flow.index_select(v, 2, pick)
        keys = flow.where(fresh, k, self.k)
        values = flow.where(fresh, v, self.v)
        query_at = (_arange(0, steps, q) + at).reshape(steps, 1)
        visible = slot.reshape(1, slots) <= query_at
        if self.window:
            visible = visible & (slot.reshape(1, slots) > query_at - self.window)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=scale,
                                             enable_gqa=enable_gqa, dropout_p=dropout_p)
        with flow.no_grad():  # the cache keeps values; this step's output keeps its history
            self.k.copy_(keys)
            self.v.copy_(values)
            self.pos.add_(steps)
        return out

    def _in_place(self, q, k, v, enable_gqa, dropout_p):
        """Whether the step runs as one cached_attention op writing the caches in place (Note
        [Cached attention] in oneflowlike/ops/cached_attention.h): not where a gradient must
        flow into q, k or v (the op has none), with dropout, or on eager global tensors (whose
        ops run on copies in a graph of their own, so an in-place write would be lost)."""
        if dropout_p or (flow.is_grad_enabled()
                         and any(t.requires_grad for t in (q, k, v))):
            return False
        if q.shape[1] != self.k.shape[1] and not enable_gqa:
            return False  # SDPA's error, from the composed path
        return getattr(self.k, "is_lazy", False) or not _is_global(self.k)

    def _check(self, q, k, v):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.ndim != 4:
                raise ValueError(f"[StaticKVCache] q, k and v must be 4-d (batch, heads, T, "
                                 f"head_dim). However, {name} has shape {tuple(t.shape)}.")
        B, Hk, L, D = self.k.shape
        if (tuple(k.shape) != tuple(v.shape) or (k.shape[0], k.shape[1], k.shape[3]) != (B, Hk, D)
                or q.shape[0] != B or q.shape[2] != k.shape[2] or q.shape[3] != D
                or k.dtype != self.k.dtype or _where(k) != _where(self.k)):
            raise ValueError(f"[StaticKVCache] q (B, heads, T, D), k and v (B, kv_heads, T, D) "
                             f"must fit the cache's ({B}, {Hk}, {L}, {D}) {self.k.dtype} on "
                             f"{_where(self.k)}. However, got q {tuple(q.shape)}, k "
                             f"{tuple(k.shape)} {k.dtype} on {_where(k)}, v {tuple(v.shape)}.")
        steps = q.shape[2]
        if getattr(self.pos, "is_lazy", False):
            if steps > L:  # the rest is the caller's count (Note [Static KV cache])
                raise ValueError(f"[StaticKVCache] a step of {steps} positions does not fit "
                                 f"max_len {L}.")
            return
        at = self.next_position()
        if at + steps > L:
            raise ValueError(f"[StaticKVCache] {steps} new positions after the {at} held pass "
                             f"max_len {L}: reset() the cache (a new context) first.")

    def extra_repr(self):
        B, Hk, L, D = self.k.shape
        return (f"batch={B}, kv_heads={Hk}, max_len={L}, head_dim={D}"
                + (f", window={self.window}" if self.window else ""))
