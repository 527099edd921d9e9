"""Context parallelism (--cp, Note [Context parallelism as SBP] in examples/common/layout.py) on
the LLaMA example with one long sequence per step: each rank's planned peak, the collectives
its plan runs, and the step time, for cp = 1 (one process with every thread) and the cp values
asked for (cp processes of threads / cp each: the same cores), each in the zigzag order and the
contiguous one (Note [Zigzag order] in oneflowlike/ops/attention.h), in one invocation.

    .venv/bin/python scripts/bench/bench_context.py --cp 2 4
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TRAIN = os.path.join(_ROOT, "examples", "llama", "train.py")


def run(cp, flags, threads, steps, order="zigzag"):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        args = [_TRAIN, *flags, "--cp", str(cp), "--cp-order", order, "--steps", str(steps),
                "--log-json", log, "--plan-summary", "--quiet"]
        command = [sys.executable, *args] if cp == 1 else [
            sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node", str(cp),
            *args]
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // cp))}
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
        ms = [json.loads(line)["ms"] for line in open(log)][1:]  # the first step compiles
    peaks = [float(m) for m in re.findall(r"planned peak ([\d.]+) MiB", out.stdout)]
    collectives = re.search(r"collectives: (.*)", out.stdout)
    return {"cp": cp, "order": order, "planned_peak_mib": max(peaks), "ms": float(np.median(ms)),
            "collectives": collectives.group(1) if collectives else ""}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cp", type=int, nargs="+", default=[2])
    p.add_argument("--block-size", type=int, default=2048)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--n-kv-head", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--orders", nargs="+", choices=["zigzag", "contiguous"],
                   default=["zigzag", "contiguous"])
    a = p.parse_args()
    flags = ["--block-size", str(a.block_size), "--n-layer", str(a.n_layer), "--n-embd",
             str(a.n_embd), "--n-head", str(a.n_head), "--n-kv-head", str(a.n_kv_head),
             "--batch-size", "1", "--synthetic"]
    print(f"llama {a.n_layer} x {a.n_embd}, {a.n_head} heads ({a.n_kv_head} key/value), one "
          f"sequence of {a.block_size}, {a.threads} threads in all", flush=True)
    base = run(1, flags, a.threads, a.steps)
    runs = [run(cp, flags, a.threads, a.steps, order) for cp in a.cp for order in a.orders]
    for r in [base] + runs:
        name = f"cp {r['cp']} ({r['order']})" if r["cp"] > 1 else "cp 1"
        print(f"{name}: planned peak per rank {r['planned_peak_mib']:.1f} MiB "
              f"({r['planned_peak_mib'] / base['planned_peak_mib']:.2f} of one rank's), step "
              f"{r['ms']:.1f} ms ({base['ms'] / r['ms']:.2f}x one rank's speed); collectives "
              f"{r['collectives'] or 'none'}", flush=True)


if __name__ == "__main__":
    main()
