"""A GPT-2-style language model written once with flow.nn; how it is laid out over ranks is
decided elsewhere (common/layout.py), only with placements and SBP."""

from dataclasses import dataclass

import oneflowlike as flow
import oneflowlike.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 256  # bytes
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    bias: bool = False  # in Linear and LayerNorm, as nanoGPT's default
    tied_head: bool = False  # the output head reuses the token embedding
    # > 0: sequences come in F.zigzag's order over this many context-parallel pieces (Note
    # [Zigzag order] in oneflowlike/ops/attention.h; common/layout.py sets it)
    zigzag: int = 0


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.attn = nn.CausalSelfAttention(c.n_embd, c.n_head, c.block_size, bias=c.bias,
                                           zigzag=c.zigzag)
        self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = MLP(c)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache=cache)
        return x + self.mlp(self.ln_2(x))


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block_size, self.zigzag = c.block_size, c.zigzag
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)

    def forward(self, idx, offset=0):
        """The embeddings of tokens ``idx`` at positions [offset, offset + T)."""
        t = idx.shape[-1]  # block_size in training; shorter when sampling from a prompt
        # A StaticKVCache's position is a tensor, which its cache checks against max_len.
        at = offset if isinstance(offset, int) else 0
        if at + t > self.block_size:
            raise ValueError(f"[GPT] takes at most block_size = {self.block_size} tokens. "
                             f"However, got {t}" + (f" after {at} cached" if at else "") + ".")
        pos = self._positions(idx, at, t)
        if not isinstance(offset, int):
            pos = pos + offset
        if self.zigzag:  # the positions in the order the tokens come in
            if t % (2 * self.zigzag):
                raise ValueError(f"[GPT] zigzag={self.zigzag} orders the positions in "
                                 f"{2 * self.zigzag} chunks: the {t} tokens must be a multiple "
                                 "of that.")
            pos = flow.nn.functional.zigzag(pos, 0, self.zigzag)
        return self.wte(idx) + self.wpe(pos)

    @staticmethod
    def _positions(idx, offset, t):
        if idx.is_global:  # trained eagerly on global tensors: the positions are global too
            return flow.arange(offset, offset + t, placement=idx.placement,
                               sbp=(flow.sbp.broadcast,) * len(idx.placement.hierarchy))
        return flow.arange(offset, offset + t, device=idx.device)


class Head(nn.Module):
    """Final LayerNorm, the output projection and the loss."""

    def __init__(self, c):
        super().__init__()
        self.vocab_size = c.vocab_size
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        object.__setattr__(self, "tied_to", None)

    def forward(self, x, targets=None):
        x = self.ln_f(x)
        if self.tied_to is not None:
            logits = flow.nn.functional.linear(x, self.tied_to.weight)
        else:
            logits = self.lm_head(x)
        if targets is None:
            return logits
        # The mean cross-entropy over the vocabulary axis as it lies (OneFlow's
        # sparse_softmax_cross_entropy): cross_entropy's value on the flattened (B * T, V),
        # without the flattening, which a layout splitting the sequence could not keep (Note
        # [Context parallelism as SBP] in common/layout.py).
        return flow.nn.functional.sparse_softmax_cross_entropy(logits, targets).mean()


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed = Embeddings(c)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.head = Head(c)
        if c.tied_head:
            # Shared, not a second registration: state dicts hold the weight once.
            object.__setattr__(self.head, "tied_to", self.embed.wte)
            del self.head.lm_head
        self._init_weights()

    def _init_weights(self):
        # GPT-2: normal(0, 0.02) weights, zero biases, residual projections scaled by depth.
        for name, p in self.named_parameters():
            if p.ndim == 2:
                std = 0.02
                if name.endswith("c_proj.weight"):
                    std = 0.02 / (2 * self.config.n_layer) ** 0.5
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None, caches=None):
        """The mean loss against ``targets``; without them, the logits (B, T, vocab_size).
        ``caches`` (make_caches()): idx continues the positions they hold, and they take its
        keys and values (generation, Note [KV cache])."""
        nn.KVCache.check_layers("GPT", caches, self.config.n_layer)
        x = self.embed(idx, caches[0].position if caches else 0)
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches else None)
        return self.head(x, targets)

    def make_caches(self, batch_size=None, max_len=None, dtype=None):
        """One empty flow.nn.KVCache per block, for forward(caches=); with ``batch_size``, one
        flow.nn.StaticKVCache of ``max_len`` positions (None: block_size) per block instead,
        laid out as the block's keys (a graph's caches, Note [Static KV cache]); ``dtype``
        (None: the weights') is the keys' dtype."""
        c = self.config
        if c.zigzag:
            raise ValueError(f"[GPT] a KV cache generates in the sequence's order, not "
                             f"zigzag={c.zigzag}'s: generate without caches.")
        if batch_size is None:
            return [nn.KVCache() for _ in self.blocks]
        return [nn.StaticKVCache.for_keys_of(b.attn.c_attn.weight, batch_size, c.n_head,
                                             max_len or c.block_size, c.n_embd // c.n_head,
                                             dtype=dtype) for b in self.blocks]

    def num_parameters(self):
        return sum(int(p.numel()) for p in self.parameters())
