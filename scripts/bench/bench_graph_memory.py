"""What a graph costs beside its model (Note [Graphs sharing modules]): one process trains the
GPT example with AdamW through a graph and evaluates it through a second graph every
--eval-every steps. Each variant runs in a fresh process:

  bound   the graphs' runtimes take the modules' tensors as their variables (the default);
  copied  every variable gets memory of its own in each runtime, synced when another user
          needs it (the path ZeRO's shards and GPU tensors take), forced on the CPU.

Printed per variant: the CPU allocator's live bytes after the model was made, its growth once
both graphs ran, its peak growth, both in units of the model's parameter bytes, and the
milliseconds per training step (the evaluation calls included; the median of --repeats
interleaved processes per variant).

    .venv/bin/python scripts/bench/bench_graph_memory.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "examples", "gpt"), os.path.join(_ROOT, "examples")]


def _measure(a):
    import oneflowlike as flow
    import train
    from common import trainer
    from oneflowlike import _C
    from oneflowlike.nn import graph_sharing

    if a.variant == "copied":
        graph_sharing.bindable_pieces = lambda graph, names: {}
    flow.manual_seed(0)
    config = train.GPTConfig(block_size=a.block, n_layer=a.n_layer, n_head=a.n_head,
                             n_embd=a.n_embd)
    model = train.GPT(config)
    params = 4 * model.num_parameters()
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3)
    graph = trainer.TrainGraph(model, opt, None, 1, 0)

    class Evaluate(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, tokens, targets):
            return self.model(tokens, targets)

    evaluate = Evaluate()
    x = flow.randint(0, config.vocab_size, (a.batch, a.block), dtype=flow.int64)
    y = flow.randint(0, config.vocab_size, (a.batch, a.block), dtype=flow.int64)
    _C.cpu_memory_reset_peak()
    live0, peak0 = _C.cpu_memory_live_bytes(), _C.cpu_memory_peak_bytes()
    graph(x, y)
    evaluate(x, y)
    live, peak = _C.cpu_memory_live_bytes() - live0, _C.cpu_memory_peak_bytes() - peak0
    start = time.perf_counter()
    for step in range(1, a.steps + 1):
        graph(x, y)
        if step % a.eval_every == 0:
            evaluate(x, y)
    ms = (time.perf_counter() - start) / a.steps * 1e3
    print(json.dumps({"params_bytes": params, "model_live": live0, "graphs_live": live,
                      "graphs_peak": peak, "ms_per_step": ms}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", choices=["bound", "copied"], help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3,
                   help="fresh processes per variant, interleaved; the median time is printed")
    a = p.parse_args()
    if a.variant:
        _measure(a)
        return
    runs = {"bound": [], "copied": []}
    for _ in range(a.repeats):  # interleaved: the machine's load drifts
        for variant in runs:
            out = subprocess.run([sys.executable, __file__, "--variant", variant] + sys.argv[1:],
                                 check=True, capture_output=True, text=True).stdout
            runs[variant].append(json.loads(out.strip().splitlines()[-1]))
    rows = {variant: dict(got[0], ms_per_step=statistics.median(r["ms_per_step"] for r in got))
            for variant, got in runs.items()}
    params = rows["bound"]["params_bytes"]
    print(f"GPT {a.n_layer} layers x {a.n_embd}, parameters {params / 2**20:.1f} MiB (float32), "
          f"AdamW, an evaluation graph every {a.eval_every} step(s), {a.steps} steps, median of "
          f"{a.repeats}")
    print("| variant | graphs' live growth | graphs' peak growth | ms per step |")
    print("|---|---|---|---|")
    for variant, r in rows.items():
        print(f"| {variant} | {r['graphs_live'] / 2**20:.1f} MiB ({r['graphs_live'] / params:.2f}x "
              f"params) | {r['graphs_peak'] / 2**20:.1f} MiB ({r['graphs_peak'] / params:.2f}x) | "
              f"{r['ms_per_step']:.1f} |")


if __name__ == "__main__":
    main()
