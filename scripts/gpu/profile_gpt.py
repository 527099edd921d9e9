"""Where a GPT training step's GPU time goes, on a lent GPU without Nsight Systems.

Runs examples/gpt/train.py (ours) in this process under torch.profiler, whose CUPTI activity
tracing records every kernel and copy of the process, not only PyTorch's; then the same model
in PyTorch (scripts/bench/bench_cuda.py's twin). For each it prints the kernels by total time,
the copies, and how busy the GPU was over the later half of the run (a low figure means the
host, not the kernels, sets the step time).

  python3 scripts/gpu/profile_gpt.py [--dtype float32|bfloat16] [--out DIR]
"""

import argparse
import collections
import json
import os
import runpy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
CONFIG = {"n_layer": 6, "n_embd": 768, "n_head": 12, "block_size": 256, "batch_size": 16}


def summarize(trace_path, title, steps):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    copies = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset") and "dur" in e]
    print(f"== {title}: {len(kernels)} kernels, {len(copies)} copies/sets in {steps} steps")
    if not kernels:
        return
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        name = e["name"].replace("void ", "").replace("ofl::cuda_kernels::", "")
        name = name.replace("(anonymous namespace)::", "")[:140]
        by_name[name][0] += e["dur"]
        by_name[name][1] += 1
    total = sum(v[0] for v in by_name.values())
    print(f"kernel time {total / 1e3:.2f} ms in all; by kernel (ms, count, share):")
    for name, (dur, count) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:28]:
        print(f"  {dur / 1e3:8.2f} {count:6d} {dur / total:6.1%}  {name}")
    copy_names = collections.defaultdict(lambda: [0.0, 0])
    for e in copies:
        copy_names[e["name"]][0] += e["dur"]
        copy_names[e["name"]][1] += 1
    for name, (dur, count) in sorted(copy_names.items(), key=lambda kv: -kv[1][0]):
        print(f"  copy {dur / 1e3:8.2f} ms {count:6d}x  {name}")
    # GPU busy fraction over the second half of the kernel timeline (after compiling/warm-up).
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels + copies)
    start = spans[0][0] + (spans[-1][1] - spans[0][0]) / 2
    busy, edge = 0.0, start
    for a, b in spans:
        a = max(a, edge)
        if b > a:
            busy += b - a
            edge = b
    print(f"GPU busy {busy / (spans[-1][1] - start):.1%} of the later half "
          f"({(spans[-1][1] - start) / 1e3:.1f} ms)")
    runtime = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") == "cuda_runtime" and "dur" in e:
            runtime[e["name"]][0] += e["dur"]
            runtime[e["name"]][1] += 1
    print("CUDA runtime calls (ms on the host, count):")
    for name, (dur, count) in sorted(runtime.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"  {dur / 1e3:8.2f} {count:6d}  {name}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = parser.parse_args()
    c = CONFIG
    flags = ["--n-layer", str(c["n_layer"]), "--n-embd", str(c["n_embd"]), "--n-head",
             str(c["n_head"]), "--block-size", str(c["block_size"]), "--batch-size",
             str(c["batch_size"]), "--synthetic", "--steps", str(args.steps), "--quiet",
             "--device", "cuda", "--dtype", args.dtype]
    trace = os.path.join(args.out, f"trace_ours_{args.dtype}.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sys.argv = [os.path.join(ROOT, "examples", "gpt", "train.py"), *flags]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    summarize(trace, f"ours {args.dtype}", args.steps)
    os.remove(trace)

    import bench_cuda
    step = bench_cuda.torch_gpt_step(c, autocast=args.dtype == "bfloat16")
    for _ in range(3):
        step()
    trace = os.path.join(args.out, f"trace_torch_{args.dtype}.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    summarize(trace, f"torch {args.dtype}", args.steps)
    os.remove(trace)


if __name__ == "__main__":
    main()
