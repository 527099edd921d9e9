"""GPU benchmarks (issue 15), each against a reference measured in the same invocation:

    python scripts/bench/bench_cuda.py [--json FILE]     # on a machine with a GPU and torch

1. matmul 4096^3 in bfloat16, float16 and float32 through our eager flow.matmul (cuBLASLt)
   against torch.matmul on the same GPU (PyTorch's cuBLAS path), same inputs; float32 without
   TF32 on both.
2. One GPT training step on one GPU (examples/gpt/train.py --device cuda: nn.Graph, float32,
   AdamW, clipping) against PyTorch eager on the same model, batch and optimizer, written as a
   PyTorch user would (F.scaled_dot_product_attention, fused AdamW), in float32 and under
   torch.autocast(bfloat16); ours also with --dtype bfloat16 (issue 17's mixed precision). Tokens/s and model FLOPs utilisation (MFU; 6N per token plus
   attention, against the H100 SXM dense peaks: 989 TFLOP/s bf16, 67 TFLOP/s float32).

The actor overhead on a GPU stream is bench_actor --gpu (C++).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import oneflowlike as flow  # noqa: E402  before torch (docs/benchmarks.md, GPU)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "gpt", "train.py")
PEAK_TFLOPS = {"bfloat16": 989.0, "float32": 67.0}


def timed(fn, sync, iterations, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    sync()
    return (time.perf_counter() - start) / iterations


def bench_matmul(n=4096, iterations=20):
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((n, n)).astype(np.float32)
    b_host = rng.standard_normal((n, n)).astype(np.float32)
    rows = []
    for name in ["bfloat16", "float16", "float32"]:
        ours_a = flow.tensor(a_host).to(getattr(flow, name)).cuda()
        ours_b = flow.tensor(b_host).to(getattr(flow, name)).cuda()
        theirs_a = torch.from_numpy(a_host).to(getattr(torch, name)).cuda()
        theirs_b = torch.from_numpy(b_host).to(getattr(torch, name)).cuda()
        ours = timed(lambda: flow.matmul(ours_a, ours_b), flow.cuda.synchronize, iterations)
        theirs = timed(lambda: torch.matmul(theirs_a, theirs_b), torch.cuda.synchronize,
                       iterations)
        # Same values: the two libraries may pick other algorithms, not other answers.
        got = flow.matmul(ours_a, ours_b).to(flow.float32).numpy()
        want = torch.matmul(theirs_a, theirs_b).float().cpu().numpy()
        err = float(np.abs(got - want).max() / np.abs(want).max())
        flops = 2.0 * n ** 3
        rows.append({"dtype": name, "ours_tflops": flops / ours / 1e12,
                     "torch_tflops": flops / theirs / 1e12, "ratio": theirs / ours,
                     "max_rel_diff": err})
        print(f"matmul {n}^3 {name:8s}: ours {flops / ours / 1e12:7.1f} TFLOP/s, torch "
              f"{flops / theirs / 1e12:7.1f} TFLOP/s, ours/torch {theirs / ours:.3f} "
              f"(max diff {err:.1e} of the largest value)", flush=True)
    return rows


def gpt_flops_per_token(c):
    # nanoGPT's estimate: 6 per parameter (embeddings excluded) + attention 12 * L * C * T.
    params = c["n_layer"] * 12 * c["n_embd"] ** 2 + 256 * c["n_embd"]  # blocks + head
    return 6 * params + 12 * c["n_layer"] * c["n_embd"] * c["block_size"]


def bench_gpt_ours(c, steps, dtype="float32", extra_env=None):
    flags = ["--n-layer", str(c["n_layer"]), "--n-embd", str(c["n_embd"]), "--n-head",
             str(c["n_head"]), "--block-size", str(c["block_size"]), "--batch-size",
             str(c["batch_size"]), "--synthetic", "--steps", str(steps), "--quiet",
             "--device", "cuda", "--dtype", dtype]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFL_")}
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, TRAIN, *flags], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"train.py failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    done = re.search(r"done: (\d+) steps in ([\d.]+) s, loss ([\d.]+) -> ([\d.]+), first step "
                     r"(\d+) ms", out.stdout)
    n, total, first = int(done.group(1)), float(done.group(2)), float(done.group(5))
    # Wall time per step after the first (which traces and compiles), loss reads included.
    return (total * 1e3 - first) / (n - 1) / 1e3, float(done.group(3)), float(done.group(4))


def torch_gpt(c):
    import torch
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            e = c["n_embd"]
            self.ln_1, self.ln_2 = nn.LayerNorm(e, bias=False), nn.LayerNorm(e, bias=False)
            self.c_attn = nn.Linear(e, 3 * e, bias=False)
            self.attn_proj = nn.Linear(e, e, bias=False)
            self.c_fc = nn.Linear(e, 4 * e, bias=False)
            self.mlp_proj = nn.Linear(4 * e, e, bias=False)

        def forward(self, x):
            b, t, e = x.shape
            h = c["n_head"]
            q, k, v = self.c_attn(self.ln_1(x)).split(e, dim=2)
            q, k, v = (z.view(b, t, h, e // h).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, e))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(256, c["n_embd"])
            self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
            self.blocks = nn.ModuleList([Block() for _ in range(c["n_layer"])])
            self.ln_f = nn.LayerNorm(c["n_embd"], bias=False)
            self.lm_head = nn.Linear(c["n_embd"], 256, bias=False)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, 256), targets.view(-1))

    return Gpt()


def torch_gpt_step(c, autocast):
    """One training step of the PyTorch twin on the GPU, as its users write it (fused AdamW,
    clipping, bf16 autocast when asked, the loss read each step)."""
    import torch

    torch.manual_seed(0)
    model = torch_gpt(c).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    idx = torch.randint(0, 256, (c["batch_size"], c["block_size"]), device="cuda")
    targets = torch.randint(0, 256, (c["batch_size"], c["block_size"]), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # as train.py reads every step's loss

    return step


def bench_gpt_torch(c, autocast, iterations=10):
    import torch

    return timed(torch_gpt_step(c, autocast), torch.cuda.synchronize, iterations)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--steps", type=int, default=12, help="our GPT steps (the first compiles)")
    args = p.parse_args()
    results = {"matmul": bench_matmul()}
    c = {"n_layer": 6, "n_embd": 768, "n_head": 12, "block_size": 256, "batch_size": 16}
    tokens = c["batch_size"] * c["block_size"]
    flops = gpt_flops_per_token(c) * tokens
    ours, first_loss, last_loss = bench_gpt_ours(c, args.steps)
    ours_bf16, first_bf16, last_bf16 = bench_gpt_ours(c, args.steps, "bfloat16")
    # What two changes of 2026-11-27 give, each turned off alone (the same bf16 step): casts
    # folded into products (Note [Casts folded into products]) and acts without events (Note
    # [Acts without events]).
    without = {name: bench_gpt_ours(c, args.steps, "bfloat16", {var: value})[0]
               for name, (var, value) in {
                   "cast_folding": ("OFL_SKIP_PASSES", "cast_folding"),
                   "acts_without_events": ("OFL_EVENT_EVERY_ACT", "1")}.items()}
    fp32 = bench_gpt_torch(c, autocast=False)
    bf16 = bench_gpt_torch(c, autocast=True)
    gpt = {"config": c, "ours_fp32_s": ours, "ours_bf16_s": ours_bf16, "torch_fp32_s": fp32,
           "torch_bf16_autocast_s": bf16, "ours_loss": [first_loss, last_loss],
           "ours_bf16_loss": [first_bf16, last_bf16],
           "ours_bf16_without_s": without}
    print(f"GPT {c}: {tokens} tokens/step, {flops / 1e12:.2f} TFLOP/step")
    for name, seconds, dtype in [("ours float32 (nn.Graph)", ours, "float32"),
                                 ("ours bf16 (nn.Graph, --dtype bfloat16)", ours_bf16, "bfloat16"),
                                 ("torch float32 (eager, SDPA)", fp32, "float32"),
                                 ("torch bf16 autocast (eager, SDPA)", bf16, "bfloat16")]:
        mfu = flops / seconds / 1e12 / PEAK_TFLOPS[dtype]
        print(f"  {name:40s}: {seconds * 1e3:8.2f} ms/step, {tokens / seconds:9.0f} tokens/s, "
              f"MFU {100 * mfu:5.1f}% of the {dtype} peak", flush=True)
    print(f"  ours / torch float32: {fp32 / ours:.3f}x speed; ours bf16 / torch bf16 autocast: "
          f"{bf16 / ours_bf16:.3f}x")
    for name, seconds in without.items():
        print(f"  ours bf16 without {name}: {seconds * 1e3:8.2f} ms/step (with it "
              f"{seconds / ours_bf16:.3f}x the speed)")
    results["gpt"] = gpt
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
