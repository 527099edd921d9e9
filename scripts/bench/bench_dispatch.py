"""Per-op eager dispatch overhead from Python, on tiny tensors (microseconds per op).

Usage: .venv/bin/python scripts/bench/bench_dispatch.py
"""

import time

import oneflowlike as flow


def best_per_op(fn, iterations=20000, repeats=5):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / iterations * 1e6


def main():
    a = flow.tensor([1.0, 2.0, 3.0, 4.0])
    b = flow.tensor([4.0, 3.0, 2.0, 1.0])
    print(f"flow._C.add(a, b):  {best_per_op(lambda: flow._C.add(a, b)):.2f} us per op")
    print(f"a + b (operator):   {best_per_op(lambda: a + b):.2f} us per op")
    print(f"flow.relu(a):       {best_per_op(lambda: flow.relu(a)):.2f} us per op")
    print(f"a.sum():            {best_per_op(lambda: a.sum()):.2f} us per op")


if __name__ == "__main__":
    main()
