"""Random draws against PyTorch's, side by side (Note [Philox in lanes]).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/bench_random.py [--n 10000000] [--repeats 5]

flow.randn / flow.rand / F.dropout(p=0.1, training=True) of n float32 elements against torch's
in the same process and thread count (torch.set_num_threads to OMP_NUM_THREADS, 1 by default);
best of the repeats, ms, and torch / ours (> 1: ours faster).
"""

import argparse
import os
import time

import oneflowlike as flow
import torch


def best(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    n = args.n
    ones, torch_ones = flow.ones(n), torch.ones(n)
    cases = [
        ("randn", lambda: flow.randn(n), lambda: torch.randn(n)),
        ("rand", lambda: flow.rand(n), lambda: torch.rand(n)),
        ("dropout p=0.1", lambda: flow.nn.functional.dropout(ones, 0.1, training=True),
         lambda: torch.nn.functional.dropout(torch_ones, 0.1, training=True)),
    ]
    print(f"# {n} float32 elements, {threads} thread(s), best of {args.repeats}")
    for name, ours, theirs in cases:
        a, b = best(ours, args.repeats), best(theirs, args.repeats)
        print(f"{name}: ours {a * 1e3:.1f} ms, torch {b * 1e3:.1f} ms, torch / ours {b / a:.2f}")


if __name__ == "__main__":
    main()
