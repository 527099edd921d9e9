"""One eager op on global tensors, end to end (the one-op graph's run; Note [Caller-run
runtimes] in actor/runtime_threads.cpp), on 2 processes x 1 thread:

    OMP_NUM_THREADS=1 .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 2 \\
        scripts/bench/bench_eager_ops.py

a + b of two replicated 4 x 4 tensors, a split 4 x 4 tensor times a replicated one, and the
partial sum x^T x of a split tensor laid out as B (its all-reduce): rank 0 prints microseconds
per call, the best of 5 rounds of 500 calls after 50 warm-up calls."""

import time

import numpy as np

import oneflowlike as flow


def per_call_us(fn, rounds=5, calls=500, warmup=50):
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return 1e6 * best


def main():
    everyone = flow.placement("cpu", ranks=list(range(flow.env.get_world_size())))
    B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
    ones = np.ones((4, 4), np.float32)
    a, b = flow.tensor(ones, placement=everyone, sbp=B), flow.tensor(ones, placement=everyone, sbp=B)
    s = flow.tensor(np.ones((8, 4), np.float32), placement=everyone, sbp=S0)
    cases = {"a + b (B, B)": lambda: a + b, "s @ b (S(0), B)": lambda: s @ b,
             "(s^T s) to B (an all-reduce)": lambda: (s.transpose(0, 1) @ s).to_global(sbp=B)}
    for name, fn in cases.items():
        us = per_call_us(fn)
        if flow.env.get_rank() == 0:
            print(f"{name}: {us:.1f} us a call", flush=True)


if __name__ == "__main__":
    main()
