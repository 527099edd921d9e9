"""Row-normalising ops on the CPU against torch's, in one process (issue 17): softmax,
log_softmax and layer_norm over the last axis, forward alone and forward + backward (eager
autograd of sum(y * g)), cross_entropy (mean over rows, the last axis the classes) forward
and forward + backward, and embedding forward + backward (the (rows, cols) input as the table,
looked up at `rows` random indices), in float32, bfloat16 and float16.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/bench_rows.py [--shape 4096 768] [--only OP]
        [--dtype float32 bfloat16 float16]

torch.set_num_threads follows OMP_NUM_THREADS. Prints ms per call, the best of 7 rounds (each of
`--calls` calls after warming up), ours and torch's alternating by round, and torch / ours (> 1:
ours faster)."""

import argparse
import os
import time

import numpy as np
import torch

import oneflowlike as flow


def best_ms(fns, calls, rounds=7):
    """The best ms per call of each function, measured in alternating rounds."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls * 1e3)
    return best


def parse_args(default_dtypes):
    """The options every 16-bit op benchmark takes; sets torch's threads from OMP_NUM_THREADS,
    which ours follow."""
    p = argparse.ArgumentParser()
    p.add_argument("--shape", type=int, nargs=2, default=[4096, 768])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--only", default="", help="only the ops whose name contains this")
    p.add_argument("--dtype", nargs="+", default=default_dtypes,
                   choices=["float32", "bfloat16", "float16"])
    args = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    return args


def cases(lib, x, w, b, g, labels, indices):
    F = lib.nn.functional
    rows = x.shape[-1]

    def backward(fn):
        def step():
            (fn() * g).sum().backward()
        return step

    return {
        "softmax": lambda: F.softmax(x, dim=-1),
        "log_softmax": lambda: F.log_softmax(x, dim=-1),
        "layer_norm": lambda: F.layer_norm(x, (rows,), w, b),
        "softmax fwd+bwd": backward(lambda: F.softmax(x, dim=-1)),
        "layer_norm fwd+bwd": backward(lambda: F.layer_norm(x, (rows,), w, b)),
        "cross_entropy": lambda: F.cross_entropy(x, labels),
        "cross_entropy fwd+bwd": lambda: F.cross_entropy(x, labels).backward(),
        "embedding fwd+bwd": backward(lambda: F.embedding(indices, x)),
    }


def main():
    args = parse_args(["float32", "bfloat16"])
    rng = np.random.default_rng(0)
    r, c = args.shape
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(r, c), (c,), (c,), (r, c)]]
    print(f"# rows ops, shape {tuple(args.shape)}, {os.environ.get('OMP_NUM_THREADS', '1')} "
          f"thread(s), {time.strftime('%Y-%m-%d')}")
    print("| op | dtype | ours ms | torch ms | torch / ours |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.dtype:
        ours_dtype, torch_dtype = getattr(flow, name), getattr(torch, name)
        ours_in = [flow.tensor(a).to(ours_dtype) for a in arrays]
        theirs_in = [torch.tensor(a).to(torch_dtype) for a in arrays]
        for t in ours_in[:3]:
            t.requires_grad = True
        for t in theirs_in[:3]:
            t.requires_grad_(True)
        labels, indices = rng.integers(0, c, r), rng.integers(0, r, r)
        ours = cases(flow, *ours_in, flow.tensor(labels), flow.tensor(indices))
        theirs = cases(torch, *theirs_in, torch.tensor(labels), torch.tensor(indices))
        for op in [op for op in ours if args.only in op]:
            a, b = best_ms([ours[op], theirs[op]], args.calls)
            print(f"| {op} | {name} | {a:.3f} | {b:.3f} | {b / a:.2f} |", flush=True)


if __name__ == "__main__":
    main()
