"""The cost of a checkpoint every step, written by flow.save (the step waits for the files) and
by flow.async_save (the files written while the next step runs, committed after it, as the
examples' --save-every does), against steps without checkpoints: one process, the GPT of
examples/gpt with AdamW, in one invocation, the three interleaved --repeats times (medians).

    .venv/bin/python scripts/bench/bench_async_save.py --n-layer 6 --n-embd 384
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "examples", "gpt"), os.path.join(_ROOT, "examples")]

import oneflowlike as flow  # noqa: E402
from common.trainer import TrainGraph, lr_lambda, parser  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def steps(mode, args, directory):
    flow.manual_seed(1)
    model = GPT(GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                          n_embd=args.n_embd))
    flags = parser("").parse_args(["--steps", str(args.steps)])
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3)
    graph = TrainGraph(model, opt, flow.optim.lr_scheduler.LambdaLR(opt, lr_lambda(flags)), 1, 0)
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.integers(0, 256, (args.batch_size, args.block_size)))
    times, parts, pending = [], {"train": [], "commit": [], "call": []}, None
    for step in range(args.steps):
        start = time.perf_counter()
        graph(x, x)
        trained = time.perf_counter()
        if pending is not None:
            pending.wait()
            pending = None
        committed = time.perf_counter()
        path = os.path.join(directory, f"{mode}{step % 2}")
        if mode == "sync":
            flow.save(graph.state_dict(), path)
        elif mode == "async":
            pending = flow.async_save(graph.state_dict(), path)
        end = time.perf_counter()
        times.append((end - start) * 1e3)
        for part, ms in (("train", trained - start), ("commit", committed - trained),
                         ("call", end - committed)):
            parts[part].append(ms * 1e3)
    if pending is not None:
        pending.wait()
    return (float(np.median(times[2:])), sum(p.numel() for p in model.parameters()),
            {part: float(np.median(ms[2:])) for part, ms in parts.items()})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    directory = tempfile.mkdtemp(prefix="bench_async_save_")
    runs = {"none": [], "sync": [], "async": []}
    parts = {mode: [] for mode in runs}
    try:
        for _ in range(args.repeats):
            for mode, times in runs.items():
                ms, params, split = steps(mode, args, directory)
                times.append(ms)
                parts[mode].append(split)
    finally:
        shutil.rmtree(directory)
    results = {mode: (float(np.median(times)), params) for mode, times in runs.items()}
    print(f"gpt {args.n_layer} x {args.n_embd}, {params / 1e6:.1f} M parameters (checkpoint "
          f"{params * 12 / 2**20:.0f} MiB with AdamW's state), batch {args.batch_size} x "
          f"{args.block_size}, {flow.env.get_world_size()} process")
    none = results["none"][0]
    for mode in ("none", "sync", "async"):
        ms = results[mode][0]
        split = {part: float(np.median([p[part] for p in parts[mode]]))
                 for part in ("train", "commit", "call")}
        print(f"{mode:>5}: {ms:7.1f} ms a step (a checkpoint every step adds {ms - none:6.1f} "
              f"ms): the step's graph {split['train']:.1f} ms, waiting for the last save "
              f"{split['commit']:.1f} ms, the save's call {split['call']:.1f} ms", flush=True)
    hidden = 1 - (results["async"][0] - none) / max(1e-9, results["sync"][0] - none)
    print(f"async_save hides {hidden:.0%} of the save's time")


if __name__ == "__main__":
    main()
