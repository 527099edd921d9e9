"""Planned against measured memory of the GPT example on DP2 (issue 19), per ZeRO stage: the
plan's peak on rank 0, the process's RSS growth over the steps, the CPU allocator's live bytes
before and after them, and how many eager graphs (each keeping its runtime) were compiled.

    for z in 0 1 2 3; do
      .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 2 \\
          scripts/bench/bench_memory.py --zero $z
    done
"""

import argparse
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "examples", "gpt"), os.path.join(_ROOT, "examples")]

import oneflowlike as flow  # noqa: E402
import train  # noqa: E402
from common import trainer  # noqa: E402
from oneflowlike.framework import global_tensor  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro-batches", type=int, default=1,
                   help="gradient accumulation over this many micro-batches per step")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    a = p.parse_args()
    args = train.parse(["--n-layer", str(a.n_layer), "--n-embd", str(a.n_embd), "--n-head",
                        str(a.n_head), "--block-size", "64", "--batch-size", "16", "--dp", "2",
                        "--zero", str(a.zero), "--micro-batches", str(a.micro_batches),
                        "--quiet"])
    config = train.GPTConfig(block_size=64, n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd)
    model = trainer.build(args, lambda: train.GPT(config))
    opt, schedule = trainer.make_optimizer(args, model)
    graph = trainer.TrainGraph(model, opt, schedule, a.micro_batches, a.zero)
    layout = train.make_layout(args)
    layout.apply(model, graph)
    data = train.ByteData(args.data, 64, 1)
    rss0, live0 = trainer.rss_mib(), flow._C.cpu_memory_live_bytes() / 2**20
    for step in range(1, a.steps + 1):
        x, y = data.batch(step, 16)
        graph(data.to_global(x, layout.placement(0), layout.data_sbp()),
              data.to_global(y, layout.placement(0), layout.data_sbp()))
    # Model states at rank 0's planned peak against DeepSpeed's formulas in float32 (parameters
    # 4 bytes, gradients 4, Adam's two moments 8, per parameter; N data-parallel ranks).
    psi, n = 4 * model.num_parameters(), 2
    textbook = {0: psi * (1 + 1 + 2), 1: psi * (1 + 1 + 2 / n), 2: psi * (1 + 1 / n + 2 / n),
                3: psi * (1 + 1 + 2) / n}[a.zero]
    report = next(r for r in graph.memory_report() if r["rank"] == 0)
    kinds = report["by_kind"]
    states = {k: kinds.get(k, 0) for k in ("parameters", "gradients", "optimizer state")}
    if flow.env.get_rank() == 0:
        print(f"zero {a.zero}, {a.micro_batches} micro-batches: model states at the planned peak "
              + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in states.items())
              + f", total {sum(states.values()) / 2**20:.2f} MiB; textbook {textbook / 2**20:.2f} "
              f"MiB ({sum(states.values()) / textbook - 1:+.1%})", flush=True)
        high = report["model_states_peak"]
        print(f"zero {a.zero}, {a.micro_batches} micro-batches: model states at their own "
              f"high-water mark {high / 2**20:.2f} MiB (at '{report['model_states_task']}'); "
              f"textbook {textbook / 2**20:.2f} MiB ({high / textbook - 1:+.1%})", flush=True)
        print(f"zero {a.zero}, {a.micro_batches} micro-batches: planned peak {graph.peak_bytes() / 2**20:.1f} MiB, RSS growth "
              f"{trainer.rss_mib() - rss0:.1f} MiB, allocator live {live0:.1f} -> "
              f"{flow._C.cpu_memory_live_bytes() / 2**20:.1f} MiB, eager graphs "
              f"{len(global_tensor._cache)}", flush=True)


if __name__ == "__main__":
    main()
