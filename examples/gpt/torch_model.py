"""The example's GPT in PyTorch: the reference for tests/python/test_gpt_example.py and
scripts/bench/bench_gpt.py. Needs torch (pip install torch)."""

import torch


def torch_gpt(c):
    """The example's model (model.GPT with bias=False, untied head) in PyTorch, with the same
    parameter names, so weights move between the two through state dicts."""
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
            self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)

        def forward(self, x):
            b, t, ch = x.shape
            h, d = c.n_head, ch // c.n_head
            # Columns ordered (head, q/k/v, head_dim), as flow.nn.CausalSelfAttention.
            q, k, v = x.matmul(self.c_attn.weight.t()).view(b, t, h, 3 * d).split(d, dim=-1)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            # As PyTorch users write it: the fused kernel, causal.
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, ch))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
            self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c.n_embd, bias=False)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(c.n_embd, bias=False)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(c.vocab_size, c.n_embd)
            self.wpe = nn.Embedding(c.block_size, c.n_embd)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_f = nn.LayerNorm(c.n_embd, bias=False)
            self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = Embed()
            self.blocks = nn.ModuleList([Block() for _ in range(c.n_layer)])
            self.head = Head()

        def forward(self, idx, targets=None):
            x = self.embed.wte(idx) + self.embed.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = self.head.lm_head(self.head.ln_f(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.reshape(-1, c.vocab_size), targets.reshape(-1))

    return Gpt()
