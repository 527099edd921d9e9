"""GELU's forward on the CPU, float32 and bfloat16: best of 5 rounds of 50 calls over 1.57 M
elements (the medium GPT's MLP activations), after 5 warm-up calls. Run with OMP_NUM_THREADS
set. Note [AVX-512 loops] in oneflowlike/kernels/cpu/unary_functions.h; docs/benchmarks.md."""

import time

import oneflowlike as flow


def main():
    for dtype in (flow.float32, flow.bfloat16):
        x = flow.randn(8 * 128 * 1536).to(dtype)
        for _ in range(5):
            flow.nn.functional.gelu(x)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(50):
                flow.nn.functional.gelu(x)
            best = min(best, (time.perf_counter() - start) / 50)
        print(f"{dtype}: gelu {best * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
