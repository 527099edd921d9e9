"""LLaMA training benchmark (issue 18), measured side by side in one invocation as ratios.

    .venv/bin/python scripts/bench/bench_llama.py            # needs torch (pip install torch)

One process at 1 and 2 threads, float32 and bfloat16: our nn.Graph step
(examples/llama/train.py, --dtype bfloat16 is nn.Graph's enable_amp) against the PyTorch twin
(examples/llama/llama_torch.py: nn.RMSNorm, F.silu, F.scaled_dot_product_attention with
enable_gqa, fused AdamW over the same two groups, clipping) eager, under torch.autocast("cpu",
bfloat16) for bf16, and with --compile also torch.compile'd. About 25M parameters by default
(8 layers, 512 channels, 8 query and 4 key/value heads, block 256). With --experts, the
Mixtral-style model (examples/llama/moe.py) instead: 4 layers, 384 channels, 6 query and 2
key/value heads, block 256, 8 experts of which 2 per token (39.5M parameters, of which each
token uses about 11M), against the twin's same layer written with torch ops.

Ours reads its batches through flow.utils.data (--data-bin: a memory-mapped token file, a
DistributedSampler and a DataLoader prefetching on a thread); the summary's "waiting for data"
is the share of the loop's time spent blocked on the next batch (issue 18's goal: under 1%).
PyTorch gets the same kind of batches from numpy. The first step (ours compiles, torch's
allocates or compiles) is left out; runs alternate and repeat, medians are reported.
"""

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time

from bench_gpt import run, torch_step  # a command under a thread count; a timed torch step

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "llama", "train.py")
PREPARE = os.path.join(ROOT, "examples", "common", "prepare_tokens.py")
CORPUS = os.path.join(ROOT, "examples", "data", "kjv-genesis-deuteronomy.txt")
MODEL = ["--n-layer", "8", "--n-embd", "512", "--n-head", "8", "--n-kv-head", "4",
         "--block-size", "256"]
MOE_MODEL = ["--n-layer", "4", "--n-embd", "384", "--n-head", "6", "--n-kv-head", "2",
             "--block-size", "256", "--n-experts", "8", "--top-k", "2"]


def load_train():
    # By path, under a name of its own: scripts/bench has other train modules' users.
    spec = importlib.util.spec_from_file_location("llama_train", TRAIN)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    return train


def part_torch(args):
    """In its own process: the PyTorch twin's steps; prints the median step time as JSON."""
    import torch

    train = load_train()
    from llama_torch import torch_llama

    torch.set_num_threads(args.threads)
    targs = train.parse(model_flags(args) + ["--batch-size", str(args.batch_size), "--steps",
                                 str(args.steps)])
    with train.flow.device("meta"):  # shapes only: the parameter names of the two groups
        skip = train.trainer.no_decay_names(train.Llama(train.config_of(targs)))
    torch.manual_seed(0)
    model = torch_llama(train.config_of(targs))
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n not in skip]},
              {"params": [p for n, p in named if n in skip], "weight_decay": 0.0}]
    # fused=True: torch's single-kernel AdamW, which it runs on the CPU too.
    opt = torch.optim.AdamW(groups, lr=targs.lr, betas=(0.9, 0.95),
                            weight_decay=targs.weight_decay, fused=True)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model)
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    times = []
    for step in range(1, args.steps + 1):
        tokens, targets = data.batch(step, args.batch_size)
        times.append(torch_step(step_fn, model, opt, tokens, targets, args.dtype == "bfloat16",
                                targs.grad_clip))
    print(json.dumps({"first_step_s": times[0], "median_ms": 1e3 * statistics.median(times[1:]),
                      "parameters": sum(p.numel() for p in model.parameters())}))


def model_flags(args):
    return MOE_MODEL if args.experts else MODEL


def ours(args, threads, dtype, batch, steps, token_file):
    out = run([sys.executable, TRAIN, *model_flags(args), "--batch-size", str(batch), "--steps", str(steps),
               "--quiet", "--warmup-steps", "1", "--dtype", dtype, "--data-bin", token_file],
              threads)
    done = re.search(r"then ([\d.]+) ms/step median, .* waiting for data ([\d.]+)% of the time",
                     out)
    return {"median_ms": float(done.group(1)), "data_wait": float(done.group(2)) / 100}


def theirs(args, threads, dtype, batch, steps, compile_):
    out = run([sys.executable, __file__, "--part", "torch", "--threads", str(threads), "--dtype",
               dtype, "--batch-size", str(batch), "--steps", str(steps)]
              + (["--compile"] if compile_ else []) + (["--experts"] if args.experts else []),
              threads)
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--dtypes", default="float32,bfloat16", help="the driver's dtypes")
    p.add_argument("--thread-counts", default="1,2", help="the driver's thread counts")
    p.add_argument("--compile", action="store_true", help="also torch.compile'd PyTorch")
    p.add_argument("--experts", action="store_true", help="the mixture-of-experts model")
    args = p.parse_args()
    if args.part == "torch":
        sys.path.insert(0, os.path.dirname(TRAIN))
        return part_torch(args)

    model = model_flags(args)
    tokens = args.batch_size * int(model[model.index("--block-size") + 1])
    with tempfile.TemporaryDirectory() as tmp:
        token_file = os.path.join(tmp, "tokens.bin")
        run([sys.executable, PREPARE, CORPUS, token_file], 1)
        print(f"# LLaMA benchmark ({' '.join(model)}, batch {args.batch_size}, {args.steps} "
              f"steps, {args.repeats} repeats; {time.strftime('%Y-%m-%d')})", flush=True)
        for dtype in args.dtypes.split(","):
            for threads in (int(t) for t in args.thread_counts.split(",")):
                rows = {"ours": [], "torch": [], "torch.compile": []}
                for _ in range(args.repeats):
                    rows["ours"].append(ours(args, threads, dtype, args.batch_size, args.steps,
                                             token_file))
                    rows["torch"].append(theirs(args, threads, dtype, args.batch_size,
                                                args.steps, False))
                    if args.compile:
                        rows["torch.compile"].append(theirs(args, threads, dtype,
                                                            args.batch_size, args.steps, True))
                o = statistics.median(r["median_ms"] for r in rows["ours"])
                wait = statistics.median(r["data_wait"] for r in rows["ours"])
                line = (f"{dtype}, {threads} thread(s), {rows['torch'][0]['parameters'] / 1e6:.1f}M "
                        f"parameters: ours {o:.0f} ms/step ({tokens / o * 1e3:.0f} tokens/s, "
                        f"waiting for data {wait:.2%})")
                for name in ("torch", "torch.compile"):
                    if rows[name]:
                        t = statistics.median(r["median_ms"] for r in rows[name])
                        line += f"; PyTorch {name} {t:.0f} ms/step, ours/it speed {t / o:.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
