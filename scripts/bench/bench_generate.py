"""Generation benchmark (Note [KV cache]): greedy decoding from the LLaMA example's model,
measured side by side in one invocation as ratios.

    .venv/bin/python scripts/bench/bench_generate.py      # needs torch (pip install torch)

Each side runs in its own process at 1 and 2 threads, from the same weights (random, saved
once): a prompt of --prompt tokens, then --tokens new ones, each the argmax of the last
position's logits, in float32 (and with --dtypes bfloat16 under autocast). Ours eager through
flow.nn.KVCache (model.make_caches()) and without caches (the whole context every token, what
sample.py did before); PyTorch eager through the twin's KV cache (examples/llama/llama_torch.py:
keys and values concatenated, F.scaled_dot_product_attention), under torch.inference_mode, as
LLaMA codebases decode on a CPU. Reported: the prompt's time, then milliseconds per new token
after the first (median of --repeats runs), and whether the sides chose the same tokens. Also
ours through a compiled graph (common/sampling.py's StepGraph over flow.nn.StaticKVCache, Note
[Static KV cache]; the prompt eagerly, the first new token apart, as it compiles the graph),
in float32. With --tp2, also ours laid out tensor-parallel over two processes of one thread
each (the example's Megatron splits on global tensors; `sample.py --tp 2`), eagerly and
through the graph, once per float32 row.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = os.path.join(ROOT, "examples", "llama")
# The LLaMA benchmark's model (bench_llama.py) with a longer context.
CONFIG = {"n_layer": 8, "n_embd": 512, "n_head": 8, "n_kv_head": 4, "block_size": 1024}


def config():
    sys.path.insert(0, LLAMA)
    from llama_model import LlamaConfig

    return LlamaConfig(**CONFIG)


def decode(step, prompt, tokens, argmax, cat):
    """``step(context)`` -> logits, greedily; returns (prompt s, s per new token after the
    first, the first's s, tokens). The first new token is timed apart: a graph compiles at its
    first call, as torch.compile does."""
    start = time.perf_counter()
    logits = step(prompt, first=True)
    prompt_s = time.perf_counter() - start
    chosen, start = [], time.perf_counter()
    first_s = None
    for _ in range(tokens):
        nxt = argmax(logits)
        chosen.append(nxt)
        logits = step(nxt, first=False)
        if first_s is None:
            first_s, start = time.perf_counter() - start, time.perf_counter()
    per_token = (time.perf_counter() - start) / max(tokens - 1, 1)
    return prompt_s, per_token, first_s, cat(chosen)


def part_ours(args):
    import oneflowlike as flow

    flow.set_num_threads(args.threads)
    from llama_model import Llama

    model = Llama(config()).eval()
    model.load_state_dict({k: flow.tensor(v) for k, v in np.load(args.weights).items()})
    prompt = flow.tensor(np.load(args.prompt_file), dtype=flow.int64)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    if args.tp > 1:
        from common.layout import Layout
        from train import COLUMN, ROW

        layout = Layout(1, args.tp, 1, "cpu", column=COLUMN, row=ROW)
        layout.apply(model, None)
        prompt = flow.tensor(prompt.numpy(), dtype=flow.int64, placement=layout.placement(0),
                             sbp=flow.sbp.broadcast)
    state = {}

    def step(context, first):
        if args.graph:  # static caches; the prompt eagerly, each new token through the graph
            if first:
                from common.sampling import StepGraph

                state["caches"] = model.make_caches(batch_size=context.shape[0],
                                                    max_len=context.shape[1] + args.tokens)
                state["graph"] = StepGraph(model, state["caches"])
                return model(context, caches=state["caches"])[:, -1]
            return state["graph"](context)
        if args.cache:
            if first:
                state["caches"] = model.make_caches()
            return model(context, caches=state["caches"])[:, -1]
        state["idx"] = context if first else flow.cat([state["idx"], context], dim=1)
        return model(state["idx"])[:, -1]

    with flow.no_grad(), flow.autocast("cpu", dtype=flow.bfloat16,
                                       enabled=args.dtype == "bfloat16"):
        result = decode(step, prompt, args.tokens, lambda x: x.argmax(-1).reshape(-1, 1),
                        lambda xs: flow.cat(xs, dim=1).numpy())
    report(result, flow.env.get_rank())


def part_torch(args):
    import torch

    torch.set_num_threads(args.threads)
    from llama_torch import torch_llama

    model = torch_llama(config()).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in np.load(args.weights).items()})
    prompt = torch.from_numpy(np.load(args.prompt_file))
    caches = [{} for _ in range(CONFIG["n_layer"])]

    def step(context, first):
        return model(context, caches=caches)[:, -1]

    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                enabled=args.dtype == "bfloat16"):
        result = decode(step, prompt, args.tokens, lambda x: x.argmax(-1, keepdim=True),
                        lambda xs: torch.cat(xs, dim=1).numpy())
    report(result)


def report(result, rank=0):
    """Prints the result as JSON on rank 0. (The torch side passes no rank: importing
    oneflowlike into its process would put a second library's threads beside torch's.)"""
    prompt_s, per_token, first_s, chosen = result
    if rank != 0:
        return
    print(json.dumps({"prompt_ms": 1e3 * prompt_s, "token_ms": 1e3 * per_token,
                      "first_token_ms": 1e3 * first_s, "tokens": chosen.tolist()}))


def run(part, args, threads, dtype, weights, prompt_file, cache=True, tp=1, graph=False):
    import subprocess

    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    launch = [] if tp == 1 else ["-m", "oneflowlike.distributed.launch", "--nproc_per_node",
                                 str(tp)]
    command = [sys.executable, *launch, __file__, "--part", part, "--threads", str(threads),
               "--dtype", dtype, "--tokens", str(args.tokens), "--weights", weights,
               "--prompt-file", prompt_file, "--tp", str(tp)] + ([] if cache else ["--no-cache"])
    command += ["--graph"] if graph else []
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
    last = out.stdout.strip().splitlines()[-1]
    return json.loads(last[last.index("{"):])  # the launcher prefixes "[rank 0] "


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--weights")
    p.add_argument("--prompt-file")
    p.add_argument("--no-cache", dest="cache", action="store_false")
    p.add_argument("--graph", action="store_true")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--tp2", action="store_true", help="also ours tensor-parallel on 2 processes")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    p.add_argument("--tokens", type=int, default=256, help="new tokens")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtypes", default="float32", help="the driver's dtypes")
    p.add_argument("--thread-counts", default="1,2", help="the driver's thread counts")
    args = p.parse_args()
    sys.path.insert(0, LLAMA)
    if args.part == "ours":
        return part_ours(args)
    if args.part == "torch":
        return part_torch(args)

    import oneflowlike as flow
    from llama_model import Llama

    flow.manual_seed(0)
    model = Llama(config())
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        weights, prompt_file = os.path.join(tmp, "weights.npz"), os.path.join(tmp, "prompt.npy")
        np.savez(weights, **{k: v.numpy() for k, v in model.state_dict().items()})
        np.save(prompt_file, rng.integers(0, 256, (args.batch_size, args.prompt)))
        print(f"# Generation benchmark (LLaMA {CONFIG}, {model.num_parameters() / 1e6:.1f}M "
              f"parameters, batch {args.batch_size}, prompt {args.prompt}, {args.tokens} new "
              f"tokens greedy, {args.repeats} repeats; {time.strftime('%Y-%m-%d')})",
              flush=True)
        for dtype in args.dtypes.split(","):
            for threads in (int(t) for t in args.thread_counts.split(",")):
                rows = {"ours": [], "ours graph": [], "ours without caches": [], "torch": []}
                for _ in range(args.repeats):
                    rows["ours"].append(run("ours", args, threads, dtype, weights, prompt_file))
                    if dtype == "float32":  # a graph's autocast is enable_amp: not measured
                        rows["ours graph"].append(run("ours", args, threads, dtype, weights,
                                                      prompt_file, graph=True))
                    rows["ours without caches"].append(run("ours", args, threads, dtype, weights,
                                                           prompt_file, cache=False))
                    rows["torch"].append(run("torch", args, threads, dtype, weights,
                                             prompt_file))
                if args.tp2 and threads == 1 and dtype == "float32":
                    rows["ours TP2"] = [run("ours", args, 1, dtype, weights, prompt_file, tp=2)
                                        for _ in range(args.repeats)]
                    rows["ours TP2 graph"] = [run("ours", args, 1, dtype, weights, prompt_file,
                                                  tp=2, graph=True)
                                              for _ in range(args.repeats)]
                rows = {name: runs for name, runs in rows.items() if runs}
                med = {name: statistics.median(r["token_ms"] for r in runs)
                       for name, runs in rows.items()}
                prompt_ms = {name: statistics.median(r["prompt_ms"] for r in runs)
                             for name, runs in rows.items()}
                same = np.mean(np.array(rows["ours"][0]["tokens"])
                               == np.array(rows["torch"][0]["tokens"]))
                plain = np.array_equal(rows["ours"][0]["tokens"],
                                       rows["ours without caches"][0]["tokens"])
                print(f"{dtype}, {threads} thread(s): ours {med['ours']:.2f} ms/token (prompt "
                      f"{prompt_ms['ours']:.0f} ms), without caches "
                      f"{med['ours without caches']:.2f} ms/token "
                      f"({med['ours without caches'] / med['ours']:.1f}x slower, same tokens: "
                      f"{plain}); PyTorch with its cache {med['torch']:.2f} ms/token (prompt "
                      f"{prompt_ms['torch']:.0f} ms), ours/its speed "
                      f"{med['torch'] / med['ours']:.2f}; tokens equal to PyTorch's: "
                      f"{same:.0%}", flush=True)
                if "ours graph" in rows:
                    graph_same = np.array_equal(rows["ours graph"][0]["tokens"],
                                                rows["ours"][0]["tokens"])
                    first = statistics.median(r["first_token_ms"] for r in rows["ours graph"])
                    print(f"  ours through a StepGraph (static caches): {med['ours graph']:.2f} "
                          f"ms/token (the first, which compiles: {first:.0f} ms), ours/PyTorch "
                          f"speed {med['torch'] / med['ours graph']:.2f}, same tokens as eager: "
                          f"{graph_same}", flush=True)
                if "ours TP2" in rows:
                    tp_same = np.array_equal(rows["ours TP2"][0]["tokens"],
                                             rows["ours"][0]["tokens"])
                    print(f"  ours TP2 (2 processes x 1 thread): {med['ours TP2']:.2f} ms/token "
                          f"(prompt {prompt_ms['ours TP2']:.0f} ms), same tokens as one "
                          f"process: {tp_same}", flush=True)
                    tp_same = np.array_equal(rows["ours TP2 graph"][0]["tokens"],
                                             rows["ours"][0]["tokens"])
                    print(f"  ours TP2 through a StepGraph: {med['ours TP2 graph']:.2f} ms/token "
                          f"(prompt {prompt_ms['ours TP2 graph']:.0f} ms), same tokens as one "
                          f"process: {tp_same}", flush=True)


if __name__ == "__main__":
    main()
