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

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
            self.wk = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
            self.wv = nn.Linear(c.n_embd, c.n_kv_head * c.head_dim, bias=False)
            self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            d = c.head_dim
            q = self.wq(x).view(b, t, c.n_head, d).transpose(1, 2)
            k = self.wk(x).view(b, t, c.n_kv_head, d).transpose(1, 2)
            v = self.wv(x).view(b, t, c.n_kv_head, d).transpose(1, 2)
            cos, sin = rope_tables(t)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               scale=1.0 / math.sqrt(d),
                                               enable_gqa=c.n_kv_head != c.n_head)
            return self.wo(y.transpose(1, 2).reshape(b, t, c.n_head * d))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
            self.w3 = nn.Linear(c.n_embd, c.ffn_hidden, bias=False)
            self.w2 = nn.Linear(c.ffn_hidden, c.n_embd, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
            self.attn = Attention()
            self.mlp_norm = nn.RMSNorm(c.n_embd, eps=c.norm_eps)
            self.mlp = FeedForward()

        def forward(self, x):
            x = x + self.attn(self.attn_norm(x))
            return x + self.mlp(self.mlp_norm(x))

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
            self.blocks = nn.ModuleList([Block() for _ in range(c.n_layer)])
            self.head = Head()

        def forward(self, idx, targets=None):
            x = self.embed.tok(idx)
            for block in self.blocks:
                x = block(x)
            logits = self.head.output(self.head.norm(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.reshape(-1, c.vocab_size), targets.reshape(-1))

    return Llama()
