"""One-row float32 products (Note [One-row products] in oneflowlike/kernels/cpu/row_products.h):
F.linear of one row against torch's, the weight held in cache, one thread, same process.

    .venv/bin/python scripts/bench/bench_one_row.py      # needs torch (pip install torch)

Prints microseconds per call and the weight's bytes read per second for each shape (the
example LLaMA's projections).
"""

import time

import numpy as np
import torch

import oneflowlike as flow

SHAPES = [(512, 512), (256, 512), (1376, 512), (512, 1376)]  # (out, in) features


def per_call_us(fn, reps):
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e6


def main():
    torch.set_num_threads(1)
    flow.set_num_threads(1)
    print(f"# one-row F.linear, float32, 1 thread, weight in cache; {time.strftime('%Y-%m-%d')}")
    rng = np.random.default_rng(0)
    for n, k in SHAPES:
        w = rng.standard_normal((n, k)).astype(np.float32)
        x = rng.standard_normal((1, k)).astype(np.float32)
        fw, fx, tw, tx = flow.tensor(w), flow.tensor(x), torch.from_numpy(w), torch.from_numpy(x)
        np.testing.assert_allclose(flow.nn.functional.linear(fx, fw).numpy(),
                                   torch.nn.functional.linear(tx, tw).numpy(), rtol=1e-4,
                                   atol=1e-4)
        with flow.no_grad(), torch.no_grad():
            ours = min(per_call_us(lambda: flow.nn.functional.linear(fx, fw), 2000)
                       for _ in range(3))
            theirs = min(per_call_us(lambda: torch.nn.functional.linear(tx, tw), 2000)
                         for _ in range(3))
        gbs = n * k * 4 / 1e3
        print(f"{n} x {k}: ours {ours:.1f} us ({gbs / ours:.0f} GB/s), torch {theirs:.1f} us "
              f"({gbs / theirs:.0f} GB/s), ours/its speed {theirs / ours:.2f}", flush=True)


if __name__ == "__main__":
    main()
