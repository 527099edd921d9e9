"""The example's LLaMA in PyTorch: the reference for tests/python/test_llama_example.py. Same
parameter names as llama_model.Llama (untied head), so weights move between the two through state
dicts. Needs torch (pip install torch)."""

import functools
import math

import torch


def torch_llama(c):
    nn, F = torch.nn, torch.nn.functional

    @functools.lru_cache(maxsize=None)  # once per length, as LLaMA codebases precompute them
    def rope_tables(seq):
        # Hugging Face's LLaMA: inverse frequencies base^(-2i / D), rotate-half pairs.
        inv_freq = c.rope_base ** (-torch.arange(0, c.head_dim, 2, dtype=torch.float64)
                                   / c.head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
        emb = torch.cat([angles, angles], dim=-1)
        return emb.cos().float(), emb.sin().float()

    def rotate(x, cos, sin):  # x (B, H, T, D)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @functools.lru_cache(maxsize=None)
    def window_mask(seq, window):  # query i sees keys (i - window, i], as Mistral's
        i, j = torch.arange(seq).unsqueeze(1), torch.arange(seq).unsqueeze(0)
        return (j <= i) & (j > i - window)

    class Attention(nn.Module):
        def __init__(self, window):
            super().__init__()
            self.window = window
            self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
            self.wk = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
            self.wv = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
            self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)

        def forward(self, x, same=None, cache=None):  # same: (B, T, T) True within a document
            b, t, _ = x.shape
            d = c.head_dim
            q = self.wq(x).view(b, t, c.n_head, d).transpose(1, 2)
            k = self.wk(x).view(b, t, c.n_kv_head, d).transpose(1, 2)
            v = self.wv(x).view(b, t, c.n_kv_head, d).transpose(1, 2)
            if cache is not None:  # generation: {"k", "v"} of the positions before x
                return self.wo(self.cached(q, k, v, cache).transpose(1, 2).reshape(
                    b, t, c.n_head * d))
            cos, sin = rope_tables(t)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            mask = window_mask(t, self.window) if self.window else None
            if same is not None:  # the document mask, with the causal one (and the window)
                seen = window_mask(t, self.window) if self.window else torch.ones(
                    t, t, dtype=torch.bool).tril()
                mask = (same & seen).unsqueeze(1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                               scale=1.0 / math.sqrt(d),
                                               enable_gqa=c.n_kv_head != c.n_head)
            return self.wo(y.transpose(1, 2).reshape(b, t, c.n_head * d))

        def cached(self, q, k, v, cache):
            # A KV cache as LLaMA codebases write one: keys and values concatenated, queries
            # at the positions after the cached ones (the lower-right causal mask).
            past, t = (0 if "k" not in cache else cache["k"].shape[2]), q.shape[2]
            cos, sin = rope_tables(past + t)
            q, k = rotate(q, cos[past:], sin[past:]), rotate(k, cos[past:], sin[past:])
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
            mask = None
            if t > 1 or self.window:
                mask = (window_mask(past + t, self.window) if self.window else torch.ones(
                    past + t, past + t, dtype=torch.bool).tril())[past:]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  scale=1.0 / math.sqrt(c.head_dim),
                                                  enable_gqa=c.n_kv_head != c.n_head)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
            self.w3 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
            self.w2 = nn.Linear(c.ffn_hidden, c.n_embd, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class MoEFeedForward(nn.Module):
        """moe.py's layer as a PyTorch user writes GShard's dispatch: top-k routing, capacity
        queues by a running sum, einsum dispatch and combine, batched expert products."""

        def __init__(self):
            super().__init__()
            e, d, h = c.n_experts, c.n_embd, c.ffn_hidden
            self.router = nn.Linear(d, e, bias=False)
            self.w1 = nn.Parameter(torch.empty(e, d, h))
            self.w3 = nn.Parameter(torch.empty(e, d, h))
            self.w2 = nn.Parameter(torch.empty(e, h, d))

        def forward(self, x):
            b, t, d = x.shape
            e, k = c.n_experts, c.top_k
            cap = min(c.block_size, math.ceil(k * c.block_size * c.capacity_factor / e))
            logits = self.router(x)
            probs = F.softmax(logits, dim=-1)
            top, chosen = torch.topk(probs, k, dim=-1)
            gates = top / top.sum(-1, keepdim=True)
            picks = F.one_hot(chosen, e)  # (b, t, k, e) int64
            queued = picks.reshape(b, t * k, e)  # token-major, so the routing is causal
            slot = ((torch.cumsum(queued, 1) - 1) * queued).sum(-1)
            slots = F.one_hot(slot.clamp(max=cap - 1), cap) * (slot < cap).long().unsqueeze(-1)
            slots = slots.reshape(b, t, k, cap).to(probs.dtype)
            choice = picks.to(probs.dtype)
            dispatch = torch.einsum("btke,btkc->btec", choice, slots)
            combine = torch.einsum("btke,btkc->btec", choice * gates.unsqueeze(-1), slots)
            tokens = torch.einsum("btec,btd->ebcd", dispatch, x).reshape(e, b * cap, d)
            hidden = F.silu(tokens @ self.w1) * (tokens @ self.w3)
            out = (hidden @ self.w2).reshape(e, b, cap, d)
            aux = (choice.mean(1) * probs.mean(1).unsqueeze(1)).sum((1, 2)) * e * c.aux_loss_coef
            if c.router_z_loss_coef:
                z = (torch.logsumexp(logits, -1) ** 2).mean(-1)
                aux = aux + z * c.router_z_loss_coef
            return torch.einsum("btec,ebcd->btd", combine, out), aux

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.attn_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
            self.attn = Attention(c.layer_window(layer))
            self.mlp_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
            self.mlp = MoEFeedForward() if c.n_experts else FeedForward()

        def forward(self, x, same=None, cache=None):  # (x, the load-balancing losses)
            x = x + self.attn(self.attn_norm(x), same, cache)
            if not c.n_experts:
                return x + self.mlp(self.mlp_norm(x)), None
            y, aux = self.mlp(self.mlp_norm(x))
            return x + y, aux

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(c.vocab_size, c.n_embd)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
            self.output = nn.Linear(c.n_embd, c.vocab_size, bias=False)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = Embed()
            self.blocks = nn.ModuleList([Block(i) for i in range(c.n_layer)])
            self.head = Head()

        def forward(self, idx, targets=None, caches=None):
            """caches: one dict per block, {} at first, for generation (no documents)."""
            x = self.embed.tok(idx)
            if caches is not None:
                for block, cache in zip(self.blocks, caches):
                    x, _ = block(x, None, cache)
                return self.head.output(self.head.norm(x))
            same = None
            if c.doc_sep >= 0:  # each position's document: the separators before it
                ends = (idx == c.doc_sep).long()
                docs = ends.cumsum(1) - ends
                same = docs.unsqueeze(2) == docs.unsqueeze(1)
            balance = []
            for block in self.blocks:
                x, aux = block(x, same)
                balance.append(aux)
            logits = self.head.output(self.head.norm(x))
            if targets is None:
                return logits
            loss = F.cross_entropy(logits.reshape(-1, c.vocab_size), targets.reshape(-1))
            if c.n_experts:  # the weighted auxiliary losses' mean over layers and sequences
                loss = loss + torch.stack(balance).mean()
            return loss

    return Llama()
