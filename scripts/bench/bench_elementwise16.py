"""Elementwise ops and reductions in 16 bits on the CPU against torch's, in one process
(issue 17): a + b, a * b, gelu, gelu's backward, x * 0.5, a fused chain, sum over rows and
over columns, amax over rows, in float32, bfloat16 and float16. For each 16-bit dtype
"widened" also times what the Widened kernels did (Note [Widened kernels]): the inputs cast to float32, the float32
kernel, the result cast back, as three eager ops.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/bench_elementwise16.py [--shape 4096 768]
        [--only OP] [--dtype float32 bfloat16 float16]

torch.set_num_threads follows OMP_NUM_THREADS. Prints ms per call, the best of 7 rounds (each
of `--calls` calls after warming up), ours, the widened form and torch's alternating by round,
torch / ours (> 1: ours faster) and widened / ours."""

import os
import time

import numpy as np
import torch

import oneflowlike as flow
from bench_rows import best_ms, parse_args


def cases(lib, a, b, dy):
    F = lib.nn.functional
    fused = getattr(flow._C, "fused_elementwise", None) if lib is flow else None
    gelu_grad = flow._C.gelu_grad if lib is flow else (
        lambda x, g: torch.ops.aten.gelu_backward(g, x))
    out = {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "scalar_mul": lambda: a * 0.5,
        "gelu": lambda: F.gelu(a),
        "gelu_grad": lambda: gelu_grad(a, dy),
        "sum rows": lambda: a.sum(dim=1),
        "sum columns": lambda: a.sum(dim=0),  # a bias gradient
        "amax rows": lambda: a.amax(dim=1),
    }
    if fused is not None:
        out["fused tanh(x/2)+1"] = lambda: fused(a, "scalar_mul(0.5),tanh,scalar_add(1)")
    else:
        out["fused tanh(x/2)+1"] = lambda: torch.tanh(a * 0.5) + 1
    return out


def widened(fn, dtype, inputs):
    """fn over float32 copies of `inputs`, rounded back to `dtype`: the Widened kernel's work."""
    def run():
        wide = [t.to(flow.float32) for t in inputs]
        return fn(*wide).to(dtype)
    return run


def main():
    args = parse_args(["float32", "bfloat16", "float16"])
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(args.shape).astype(np.float32) for _ in range(3)]
    print(f"# elementwise ops, shape {tuple(args.shape)}, "
          f"{os.environ.get('OMP_NUM_THREADS', '1')} thread(s), {time.strftime('%Y-%m-%d')}")
    print("| op | dtype | ours ms | widened ms | torch ms | torch / ours | widened / ours |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.dtype:
        ours_dtype, torch_dtype = getattr(flow, name), getattr(torch, name)
        ours_in = [flow.tensor(x).to(ours_dtype) for x in arrays]
        theirs_in = [torch.tensor(x).to(torch_dtype) for x in arrays]
        ours = cases(flow, *ours_in)
        theirs = cases(torch, *theirs_in)
        for op in [op for op in ours if args.only in op]:
            fns = [ours[op], theirs[op]]
            if name != "float32":
                # The same op on float32 copies of the inputs, rounded back.
                fns.append(widened(lambda *w, op=op: cases(flow, *w)[op](), ours_dtype, ours_in))
            ms = best_ms(fns, args.calls)
            wide = f"{ms[2]:.3f}" if len(ms) > 2 else ""
            ratio = f"{ms[2] / ms[0]:.2f}" if len(ms) > 2 else ""
            print(f"| {op} | {name} | {ms[0]:.3f} | {wide} | {ms[1]:.3f} | {ms[1] / ms[0]:.2f} | "
                  f"{ratio} |", flush=True)


if __name__ == "__main__":
    main()
