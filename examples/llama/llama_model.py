"""A LLaMA-style decoder written once with flow.nn: RMSNorm, rotary position embedding,
grouped-query attention through the fused SDPA, a SwiGLU MLP (or, with n_experts, Mixtral's
mixture of SwiGLU experts, moe.py), no biases. How it is laid out over ranks is decided
elsewhere (train.py's Megatron splits and expert parallelism, common/layout.py), only with
placements and SBP."""

import math
from dataclasses import dataclass

import oneflowlike as flow
import oneflowlike.nn as nn
import oneflowlike.nn.functional as F
from moe import MoEFeedForward


@dataclass
class LlamaConfig:
    vocab_size: int = 256  # bytes
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2  # grouped-query attention: n_head / n_kv_head query heads per key head
    n_embd: int = 64
    multiple_of: int = 32  # the SwiGLU hidden size is rounded up to a multiple of this
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    tied_head: bool = False  # the output head reuses the token embedding
    n_experts: int = 0  # > 0: Mixtral's mixture of experts instead of the SwiGLU MLP (moe.py)
    top_k: int = 2  # experts per token
    capacity_factor: float = 1.25  # Note [Expert capacity]
    aux_loss_coef: float = 0.01  # Note [Load-balancing loss]
    router_z_loss_coef: float = 0.0  # ST-MoE's router z-loss (0: off)
    # > 0: sequences come in F.zigzag's order over this many context-parallel pieces (Note
    # [Zigzag order] in oneflowlike/ops/attention.h; common/layout.py sets it)
    zigzag: int = 0
    # > 0: sliding-window attention, each position sees its `window` latest (Mistral; Note
    # [Sliding window]); with global_every = K, every K-th layer sees the whole prefix instead
    # (Gemma 2's alternation is K = 2, Gemma 3's five local layers to one global K = 6).
    window: int = 0
    global_every: int = 0
    # >= 0: the token that ends each document of the packed sequences; a position then attends
    # within its own document only (Llama 3's document mask; Note [Packed documents]).
    doc_sep: int = -1

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def layer_window(self, layer):
        """The window of layer `layer` (0: it attends to the whole prefix)."""
        if self.global_every and (layer + 1) % self.global_every == 0:
            return 0
        return self.window

    @property
    def ffn_hidden(self):
        """LLaMA's: 2/3 of 4 n_embd, rounded up to a multiple of multiple_of."""
        hidden = int(2 * 4 * self.n_embd / 3)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)

    def check(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"--n-embd {self.n_embd} must be a multiple of --n-head "
                             f"{self.n_head}.")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"--n-head {self.n_head} must be a multiple of --n-kv-head "
                             f"{self.n_kv_head}.")
        if self.head_dim % 2:
            raise ValueError(f"the head size (--n-embd / --n-head = {self.head_dim}) must be even "
                             f"for rotary embeddings.")
        if self.window < 0 or self.global_every < 0 or (self.global_every and not self.window):
            raise ValueError(f"--window must be >= 0 (0: whole prefix) and --global-every >= 0, "
                             f"and only with a window. However, got --window {self.window}, "
                             f"--global-every {self.global_every}.")
        if not -1 <= self.doc_sep < self.vocab_size:
            raise ValueError(f"--doc-sep must be a token id in [0, {self.vocab_size}) (or -1: "
                             f"no documents). However, got {self.doc_sep}.")
        if self.n_experts < 0 or self.n_experts == 1:
            raise ValueError(f"--n-experts must be 0 (a dense MLP) or at least 2. However, got "
                             f"{self.n_experts}.")
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"--top-k must lie in [1, --n-experts {self.n_experts}]. However, "
                             f"got {self.top_k}.")
        if self.n_experts and self.capacity_factor <= 0:
            raise ValueError(f"--capacity-factor must be positive. However, got "
                             f"{self.capacity_factor}.")


def config_from_flags(flags):
    """The LlamaConfig of train.py's flags (a dict, as a checkpoint's train_state.json keeps
    them)."""
    # Checkpoints from before the experts have no expert flags: dense.
    return LlamaConfig(block_size=flags["block_size"], n_layer=flags["n_layer"],
                       n_head=flags["n_head"], n_kv_head=flags["n_kv_head"],
                       n_embd=flags["n_embd"], tied_head=flags["tied_head"],
                       n_experts=flags.get("n_experts", 0),
                       top_k=flags.get("top_k", LlamaConfig.top_k),
                       capacity_factor=flags.get("capacity_factor", LlamaConfig.capacity_factor),
                       aux_loss_coef=flags.get("aux_loss_coef", LlamaConfig.aux_loss_coef),
                       router_z_loss_coef=flags.get("router_z_loss_coef",
                                                    LlamaConfig.router_z_loss_coef),
                       window=flags.get("window", 0), global_every=flags.get("global_every", 0),
                       doc_sep=flags.get("doc_sep", -1))


class Attention(nn.Module):
    """Causal self-attention with rotary positions on q and k and n_kv_head key/value heads,
    over the whole prefix or the `window` latest positions. wq, wk and wv are separate
    projections, so tensor parallelism splits each by heads."""

    def __init__(self, c, window=0):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = c.n_head, c.n_kv_head, c.head_dim
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.zigzag, self.window = c.zigzag, window
        self.rope = nn.RotaryEmbedding(c.head_dim, c.block_size, base=c.rope_base,
                                       zigzag=c.zigzag)

    def forward(self, x, documents=None, cache=None):
        B, T, _ = x.shape
        D = self.head_dim
        q = self.wq(x).reshape(B, T, self.n_head, D).transpose(1, 2)  # (B, H, T, D)
        k = self.wk(x).reshape(B, T, self.n_kv_head, D).transpose(1, 2)  # (B, Hk, T, D)
        v = self.wv(x).reshape(B, T, self.n_kv_head, D).transpose(1, 2)
        gqa = self.n_kv_head != self.n_head
        if cache is not None:  # generation: x continues the cached positions (Note [KV cache])
            q, k = self.rope(q, cache.position), self.rope(k, cache.position)
            y = cache.attend(q, k, v, scale=1.0 / math.sqrt(D), enable_gqa=gqa)
        else:
            q, k = self.rope(q), self.rope(k)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               scale=1.0 / math.sqrt(D), enable_gqa=gqa,
                                               zigzag=self.zigzag, window=self.window,
                                               document_ids=documents)
        return self.wo(y.transpose(1, 2).reshape(B, T, self.n_head * D))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
        self.w3 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
        self.w2 = nn.Linear(c.ffn_hidden, c.n_embd, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x)). With experts it also takes and
    gives the groups' summed load-balancing losses (Note [Load-balancing loss]): forward(x,
    aux=None) -> (x, aux)."""

    def __init__(self, c, layer=0):
        super().__init__()
        self.moe = c.n_experts > 0
        self.attn_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
        self.attn = Attention(c, c.layer_window(layer))
        self.mlp_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
        self.mlp = MoEFeedForward(c) if self.moe else FeedForward(c)

    def forward(self, x, aux=None, documents=None, cache=None):
        x = x + self.attn(self.attn_norm(x), documents, cache)
        if not self.moe:
            return x + self.mlp(self.mlp_norm(x))
        y, balance = self.mlp(self.mlp_norm(x))
        return x + y, balance if aux is None else aux + balance


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = nn.Embedding(c.vocab_size, c.n_embd)

    def forward(self, idx):
        return self.tok(idx)


class Head(nn.Module):
    """Final RMSNorm, the output projection and the loss."""

    def __init__(self, c):
        super().__init__()
        self.vocab_size = c.vocab_size
        self.n_layer = c.n_layer
        self.norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
        self.output = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        object.__setattr__(self, "tied_to", None)

    def forward(self, x, targets=None, aux=None):
        """The loss (plus the weighted load-balancing losses ``aux`` (B,) of an expert model),
        or without targets the logits."""
        x = self.norm(x)
        if self.tied_to is not None:
            logits = F.linear(x, self.tied_to.weight)
        else:
            logits = self.output(x)
        if targets is None:
            return logits
        # Over the vocabulary axis as it lies, not flattened (as the GPT example's head).
        loss = F.sparse_softmax_cross_entropy(logits, targets).mean()
        # aux: the groups' weighted auxiliary losses summed over layers; their mean over both.
        return loss if aux is None else loss + aux.mean() / self.n_layer


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        c.check()
        self.config = c
        self.embed = Embeddings(c)
        self.blocks = nn.ModuleList([Block(c, i) for i in range(c.n_layer)])
        self.head = Head(c)
        if c.tied_head:
            object.__setattr__(self.head, "tied_to", self.embed.tok)
            del self.head.output
        self._init_weights()

    def _init_weights(self):
        # normal(0, 0.02) for every matrix (each expert's too), the residual projections scaled
        # by depth (as the GPT example and torchtitan); norms start at one.
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                std = 0.02
                if name.endswith(("attn.wo.weight", "mlp.w2.weight", "mlp.w2")):
                    std = 0.02 / (2 * self.config.n_layer) ** 0.5
                nn.init.normal_(p, 0.0, std)

    def documents(self, idx):
        """Each position's document (B, T) int32 (config.doc_sep >= 0): the separators before
        it, the separator itself ending its document. Counted in the sequence's order, and given
        in the order idx comes in (Note [Zigzag order])."""
        c = self.config
        ends = (idx == c.doc_sep).to(flow.int32)
        if c.zigzag:
            ends = F.unzigzag(ends, 1, c.zigzag)
        ids = flow.cumsum(ends, dim=1) - ends
        return F.zigzag(ids, 1, c.zigzag) if c.zigzag else ids

    def forward(self, idx, targets=None, caches=None):
        """The mean loss against ``targets``; without them, the logits (B, T, vocab_size).
        ``caches`` (make_caches()): idx continues the positions they hold, and they take its
        keys and values (generation, Note [KV cache])."""
        if caches is not None:
            self._check_cacheable()
            nn.KVCache.check_layers("Llama", caches, self.config.n_layer)
        # Passed to every block as a positional input, so that pipeline stages move it there.
        docs = self.documents(idx) if self.config.doc_sep >= 0 else None
        x = self.embed(idx)
        if not self.config.n_experts:
            for i, block in enumerate(self.blocks):
                x = block(x, None, docs, caches[i] if caches else None)
            return self.head(x, targets)
        # The load-balancing losses travel with x, as positional inputs, so that pipeline
        # stages move them as they move x (Note [Load-balancing loss]).
        x, aux = self.blocks[0](x, None, docs)
        for block in self.blocks[1:]:
            x, aux = block(x, aux, docs)
        return self.head(x, targets, aux) if targets is not None else self.head(x)

    def make_caches(self, batch_size=None, max_len=None, dtype=None):
        """One empty flow.nn.KVCache per block (with its layer's window), for
        forward(caches=); with ``batch_size``, one flow.nn.StaticKVCache of ``max_len``
        positions (None: block_size) per block instead, laid out as the block's keys (a graph's
        caches, Note [Static KV cache]); ``dtype`` (None: the weights') is the keys' dtype."""
        self._check_cacheable()
        c = self.config
        if batch_size is None:
            return [nn.KVCache(window=block.attn.window) for block in self.blocks]
        return [nn.StaticKVCache.for_keys_of(b.attn.wk.weight, batch_size, c.n_kv_head,
                                             max_len or c.block_size, c.head_dim,
                                             window=b.attn.window, dtype=dtype)
                for b in self.blocks]

    def _check_cacheable(self):
        # Expert capacity queues each sequence's tokens through a running count (Note [Expert
        # capacity]) and packed documents need each cached key's document: neither is in the
        # cache yet, and generating without them would give other tokens than the model's.
        c = self.config
        if c.n_experts or c.doc_sep >= 0 or c.zigzag:
            raise ValueError(f"[Llama] a KV cache holds only keys and values: it cannot generate "
                             f"for experts (their capacity queues), packed documents or the "
                             f"zigzag order. However, got n_experts {c.n_experts}, doc_sep "
                             f"{c.doc_sep}, zigzag {c.zigzag}: generate without caches.")

    def num_parameters(self):
        return sum(int(p.numel()) for p in self.parameters())
