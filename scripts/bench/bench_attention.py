"""Fused attention forward + backward against torch's (issue 17), measured side by side.

    .venv/bin/python scripts/bench/bench_attention.py [--threads 1 2] [--repeats 5]

Causal self-attention, B 8, H 12, T 1024, D 64 by default, float32: one step is out =
scaled_dot_product_attention(q, k, v, is_causal=True) and out.backward(g). Ours is
flow.nn.functional.scaled_dot_product_attention (the tiled CPU kernel), theirs
torch.nn.functional.scaled_dot_product_attention (its CPU flash-attention kernel). Each thread
count runs in a fresh process of each side (OMP_NUM_THREADS and torch.set_num_threads), the two
interleaved; medians of the repeats are reported as ms and the ratio torch / ours (> 1: ours
faster).

With ``--window W`` the attention is sliding-window (each query sees its W latest keys, Note
[Sliding window]): ours with ``window=W``, also timed with the whole causal prefix (what the
window saves); torch's is SDPA with the window's boolean mask, the way a PyTorch user trains it
on a CPU (FlexAttention, which skips hidden blocks, has no CPU backward: "FlexAttention does not
support backward on CPU" in torch 2.15). With ``--documents N`` every sequence packs documents
of N positions (Note [Packed documents]): ours with ``document_ids``, torch's SDPA with the
boolean document-and-causal mask, and ours over the whole causal prefix again.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def measure(side, shape, threads, steps, dtype, window=0, documents=0):
    import numpy as np

    rng = np.random.default_rng(0)
    b, h, t, d = shape
    arrays = [rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(4)]
    ids = np.broadcast_to(np.arange(t) // documents if documents else np.zeros(t), (b, t))
    if side == "torch":
        import torch

        torch.set_num_threads(threads)
        low = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        q, k, v = (torch.tensor(a).to(low).requires_grad_() for a in arrays[:3])
        g = torch.tensor(arrays[3]).to(low)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        mask = None
        if window:
            i, j = torch.arange(t).unsqueeze(1), torch.arange(t).unsqueeze(0)
            mask = (j <= i) & (j > i - window)
        if documents:  # within a document, and causal (or the window)
            same = torch.tensor(ids[:, :, None] == ids[:, None, :])
            seen = mask if window else torch.ones(t, t, dtype=torch.bool).tril()
            mask = (same & seen).unsqueeze(1)
        if mask is not None:
            def sdpa(q, k, v, is_causal, f=sdpa):  # noqa: ARG001  the mask says it
                return f(q, k, v, attn_mask=mask)
    else:
        import oneflowlike as flow

        low = flow.bfloat16 if dtype == "bfloat16" else flow.float32
        q, k, v = (flow.tensor(a).to(low).requires_grad_() for a in arrays[:3])
        g = flow.tensor(arrays[3]).to(low)
        sdpa = flow.nn.functional.scaled_dot_product_attention
        extra = {}
        if window:
            extra["window"] = window
        if documents:
            extra["document_ids"] = flow.tensor(np.ascontiguousarray(ids).astype(np.int64))
        if extra:
            def sdpa(q, k, v, is_causal, f=sdpa):
                return f(q, k, v, is_causal=is_causal, **extra)
    times = []
    for _ in range(steps + 1):
        for x in (q, k, v):
            x.grad = None
        t0 = time.perf_counter()
        out = sdpa(q, k, v, is_causal=True)
        out.backward(g)
        _ = q.grad.to(flow.float32).numpy() if side == "ours" else q.grad.sum().item()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[1:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--side", choices=["ours", "torch"])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--shape", type=int, nargs=4, default=[8, 12, 1024, 64])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--window", type=int, default=0, help="sliding window (0: causal prefix)")
    p.add_argument("--documents", type=int, default=0,
                   help="packed documents of this many positions (0: one per sequence)")
    args = p.parse_args()
    if args.side:
        print(json.dumps(measure(args.side, args.shape, args.threads[0], args.steps, args.dtype,
                                 args.window, args.documents)))
        return
    kind = f"sliding window {args.window}" if args.window else "causal"
    if args.documents:
        kind += f", packed documents of {args.documents}"
    print(f"# attention fwd+bwd, {kind}, {args.dtype}, shape {tuple(args.shape)}, {args.steps} "
          f"steps, {args.repeats} repeats; {time.strftime('%Y-%m-%d')}")
    for threads in args.threads:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        results = {"ours": [], "torch": []}
        if args.dtype == "bfloat16":  # also ours on widened copies (Note [bfloat16 tile products])
            results["ours_widened"] = []
        if args.window or args.documents:  # and ours over the whole prefix: what they save
            results["ours_prefix"] = []
        for _ in range(args.repeats):
            for side in results:
                out = subprocess.run(
                    [sys.executable, __file__, "--side", side.split("_")[0], "--threads",
                     str(threads), "--steps", str(args.steps), "--dtype", args.dtype, "--shape",
                     *map(str, args.shape),
                     "--window", "0" if side == "ours_prefix" else str(args.window),
                     "--documents", "0" if side == "ours_prefix" else str(args.documents)],
                    env={**env, "OFL_BF16_TILES": "0"} if side == "ours_widened" else env,
                    capture_output=True, text=True, timeout=1800, check=True)
                results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
        ours, theirs = (statistics.median(results[s]) for s in ("ours", "torch"))
        print(f"{threads} thread(s): ours {ours:.1f} ms, torch {theirs:.1f} ms, "
              f"torch/ours {theirs / ours:.2f}")
        if "ours_widened" in results:
            widened = statistics.median(results["ours_widened"])
            print(f"{threads} thread(s): ours on widened copies (OFL_BF16_TILES=0) "
                  f"{widened:.1f} ms: the tile products {widened / ours:.2f}x its speed")
        if "ours_prefix" in results:
            prefix = statistics.median(results["ours_prefix"])
            print(f"{threads} thread(s): ours over the whole causal prefix {prefix:.1f} ms: the "
                  f"mask's skipped tiles {prefix / ours:.2f}x its speed")


if __name__ == "__main__":
    main()
