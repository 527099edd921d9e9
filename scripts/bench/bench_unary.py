"""Transcendental unary kernels on 4M float32 elements against NumPy (milliseconds per call).

Not a test. NumPy runs on one thread, so the framework is timed in a child process with
OMP_NUM_THREADS=1 as well as in one with the default thread count. relu is the floor (a fresh
output and the memory traffic, no arithmetic to speak of). Inputs are uniform in [-8, 8].

Usage: .venv/bin/python scripts/bench/bench_unary.py
"""

import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

N = 4 * 1024 * 1024


def best_ms(fn, repeats=15):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def run_flow():
    import oneflowlike as flow

    x = np.random.default_rng(0).uniform(-8, 8, size=N).astype(np.float32)
    t = flow.tensor(x)
    cases = {
        "relu": lambda: flow.relu(t),  # the floor: allocation and memory traffic only
        "exp": lambda: flow.exp(t),
        "tanh": lambda: flow.tanh(t),
        "sigmoid": lambda: flow.sigmoid(t),
        "gelu": lambda: flow.gelu(t),
        "gelu_tanh": lambda: flow.gelu(t, approximate="tanh"),
    }
    for name, fn in cases.items():
        print(f"{name} {best_ms(fn):.3f}")


def numpy_times():
    x = np.random.default_rng(0).uniform(-8, 8, size=N).astype(np.float32)
    k = np.float32(math.sqrt(2 / math.pi))
    c = np.float32(0.044715)
    return {
        "relu": best_ms(lambda: np.maximum(x, 0)),
        "exp": best_ms(lambda: np.exp(x)),
        "tanh": best_ms(lambda: np.tanh(x)),
        "sigmoid": best_ms(lambda: 1 / (1 + np.exp(-x))),
        "gelu": None,  # NumPy has no erf
        "gelu_tanh": best_ms(lambda: 0.5 * x * (1 + np.tanh(k * (x + c * x * x * x)))),
    }


def flow_times(threads):
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_flow()
        return
    ref = numpy_times()
    one = flow_times(1)
    all_threads = flow_times(None)
    np_exp = ref["exp"]
    print(f"{N} float32 elements, best of 15 (ms); ratio = NumPy time / ours (1 thread)")
    print(f"{'op':<10}{'numpy':>9}{'ours 1T':>10}{'ours all':>10}{'vs numpy':>10}"
          f"{'vs np.exp':>11}")
    for name in one:
        r = ref[name]
        r_txt = f"{r:9.2f}" if r is not None else f"{'-':>9}"
        ratio = f"{r / one[name]:10.2f}" if r is not None else f"{'-':>10}"
        print(f"{name:<10}{r_txt}{one[name]:10.2f}{all_threads[name]:10.2f}{ratio}"
              f"{np_exp / one[name]:11.2f}")


if __name__ == "__main__":
    main()
