"""Where a GPT training step's time goes, by op: the act trace of the compute thread
(graph.config.enable_trace(), graph.chrome_trace()) summed per op type over a few steps.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/profile_gpt_ops.py [--dtype bfloat16]
        [--model small]

The model is bench_gpt.py's "medium" one (6 layers, 384 channels, 6 heads, block 128, batch 8)
or its "small" one (4 layers, 128 channels, 4 heads, block 64, batch 16), and the step train.py's (AdamW in two groups, clipping, the schedule); bfloat16 is enable_amp.
Prints the step's span, the busy time, and the largest op types (microseconds per step, tasks
per step). The multi-tensor AdamW update is one task, named after
its list's first parameter.
"""

import argparse
import collections
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import oneflowlike as flow  # noqa: E402
import train  # noqa: E402
from common import trainer  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--steps", type=int, default=5, help="steps measured, after 3 warm-up ones")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--model", choices=["medium", "small"], default="medium")
    args = p.parse_args()
    sizes = {"medium": ["--n-layer", "6", "--n-embd", "384", "--n-head", "6", "--block-size",
                        "128", "--batch-size", "8"],
             "small": ["--n-layer", "4", "--n-embd", "128", "--n-head", "4", "--block-size",
                       "64", "--batch-size", "16"]}
    targs = train.parse(sizes[args.model] + ["--dtype", args.dtype])
    config = GPTConfig(block_size=targs.block_size, n_layer=targs.n_layer, n_head=targs.n_head,
                       n_embd=targs.n_embd)
    flow.manual_seed(1)
    model = GPT(config)
    # The optimizer of train.py, which bench_gpt.py times: AdamW in two groups, clipped by one
    # global norm, on the warmup-cosine schedule.
    optimizer, scheduler = trainer.make_optimizer(targs, model)
    graph = train.TrainGraph(model, optimizer, scheduler, 1, False)
    if args.dtype == "bfloat16":
        graph.config.enable_amp(True, dtype=flow.bfloat16)
    graph.config.enable_trace()
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    total, count, span = collections.Counter(), collections.Counter(), 0.0
    for step in range(1, args.steps + 4):
        tokens, targets = data.batch(step, targs.batch_size)
        graph.chrome_trace()  # drop what came before
        graph(flow.tensor(tokens), flow.tensor(targets))
        if step <= 3:
            continue
        events = [e for e in json.loads(graph.chrome_trace())["traceEvents"]
                  if e.get("ph") == "X" and e.get("tid") == 0]
        span += max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
        for e in events:
            key = re.sub(r"_\d+$", "", e["name"].split("/")[-1])
            total[key] += e["dur"]
            count[key] += 1
    steps = args.steps
    busy = sum(total.values()) / steps
    print(f"# {args.model} GPT, {args.dtype}, {os.environ.get('OMP_NUM_THREADS', 'default')} thread(s): "
          f"step {span / steps / 1e3:.1f} ms, compute thread busy {busy / 1e3:.1f} ms")
    for key, us in total.most_common(args.top):
        print(f"{us / steps / 1e3:9.2f} ms {100 * us / steps / busy:5.1f}% {count[key] // steps:4d}"
              f"  {key}")


if __name__ == "__main__":
    main()
