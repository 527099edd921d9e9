"""GPT training benchmarks (issue 7), measured side by side in one invocation as ratios.

    .venv/bin/python scripts/bench/bench_gpt.py            # needs torch (pip install torch)

1. One process, same thread count (1 and 2): our nn.Graph step vs PyTorch eager on the same
   model, data and optimizer (tokens/s for both), PyTorch written as its users write it
   (F.scaled_dot_product_attention, examples/gpt/torch_model.py); with --compile also
   torch.compile'd. --model medium: issue 17's
   6 layers, 384 channels, 6 heads, block 128.
2. Data parallel, 2 processes x 1 thread vs 1 process x 1 thread at the same per-rank batch:
   scaling efficiency, ours (examples/gpt/train.py --dp 2 through our launcher) next to PyTorch
   DDP over gloo doing the same.
3. Pipeline: the bubble each rank's compute thread sees (from the act trace) under pp 2 with 4
   and 8 micro-batches vs the ideal (p-1)/(m+p-1); planned peak memory per rank for DP2,
   DP2 + ZeRO and PP2 (m 4).
4. Trace + compile time of the plan and the time to the end of the first step.
5. (--only eager) Eager data parallel on 2 processes x 1 thread: the model laid out with
   Module.to_global and trained eagerly on global tensors (loss.backward(), clip_grad_norm_,
   flow.optim.AdamW), and the local model wrapped in our DistributedDataParallel (Note [Eager
   DDP on local tensors]), against PyTorch DDP over gloo (the eager data parallelism a user
   picks) and our nn.Graph DP2 of the same model, batch and optimizer.

Runs are interleaved and repeated (--repeats) and medians reported: the machine is shared.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT = os.path.join(ROOT, "examples", "gpt")
sys.path.insert(0, GPT)

# --model: the README's small model, and issue 17's 384-channel one (batch 8 there).
MODELS = {
    "small": ["--n-layer", "4", "--n-embd", "128", "--n-head", "4", "--block-size", "64"],
    "medium": ["--n-layer", "6", "--n-embd", "384", "--n-head", "6", "--block-size", "128"],
}
MODEL, MODEL_NAME = MODELS["small"], "small"
DTYPE = "float32"  # --dtype bfloat16: ours with enable_amp, PyTorch under torch.autocast


def env(threads, extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OFL_")) and k not in
         ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    e["OMP_NUM_THREADS"] = str(threads)
    e.update(extra or {})
    return e


def run(command, threads, extra_env=None):
    out = subprocess.run(command, env=env(threads, extra_env), capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout


def launch(nproc, *args):
    return [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
            str(nproc), *args]


def torch_step(step_fn, model, opt, tokens, targets, bf16, grad_clip):
    """One idiomatic PyTorch training step (zero_grad, forward under autocast for bf16,
    backward, clipping, step), timed; the loss is read after the timing, as train.py reads its."""
    import torch

    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = step_fn(torch.from_numpy(tokens), torch.from_numpy(targets))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    seconds = time.perf_counter() - t0
    loss.item()
    return seconds


# --- parts run in their own processes -----------------------------------------------------------
def part_torch(args):
    import torch

    import train
    from model import GPTConfig
    from torch_model import torch_gpt

    torch.set_num_threads(args.threads)
    targs = train.parse(MODEL + ["--batch-size", str(args.batch_size), "--steps", str(args.steps)])
    config = GPTConfig(block_size=targs.block_size, n_layer=targs.n_layer, n_head=targs.n_head,
                       n_embd=targs.n_embd)
    distributed = "RANK" in os.environ
    if distributed:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch_gpt(config)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=targs.lr, betas=(0.9, 0.95),
                            weight_decay=targs.weight_decay, fused=True)
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    times = []
    rank = int(os.environ.get("RANK", 0))
    step_fn = torch.compile(model) if args.compile else model
    for step in range(1, args.steps + 1):
        tokens, targets = data.batch(step * 101 + rank, args.batch_size)
        times.append(torch_step(step_fn, model, opt, tokens, targets, DTYPE == "bfloat16",
                                targs.grad_clip))
    if rank == 0:
        # As train.py's summary: the first step (it compiles) left out.
        print(json.dumps({"first_step_s": times[0], "median_ms": 1e3 * statistics.median(times[1:])}))
    if distributed:
        torch.distributed.destroy_process_group()


def part_eager(args):
    """Under the launcher: DP over all ranks, trained eagerly on global tensors (Note [Eager
    global autograd]); rank 0 prints the median step time (the first step, which compiles each
    op's graphs, left out)."""
    import oneflowlike as flow
    import train
    from model import GPT, GPTConfig

    targs = train.parse(MODEL + ["--batch-size", str(args.batch_size), "--steps", str(args.steps)])
    config = GPTConfig(block_size=targs.block_size, n_layer=targs.n_layer, n_head=targs.n_head,
                       n_embd=targs.n_embd)
    flow.manual_seed(0)
    model = GPT(config)
    placement = flow.placement("cpu", ranks=list(range(flow.env.get_world_size())))
    model.to_global(placement, flow.sbp.broadcast)
    opt = flow.optim.AdamW(model.parameters(), lr=targs.lr, betas=(0.9, 0.95),
                           weight_decay=targs.weight_decay)
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    times, parts = [], []  # parts: forward, backward, clipping and the update
    for step in range(1, args.steps + 1):
        tokens, targets = data.batch(step * 101, args.batch_size * flow.env.get_world_size())
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model(data.to_global(tokens, placement, flow.sbp.split(0)),
                     data.to_global(targets, placement, flow.sbp.split(0)))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        flow.nn.utils.clip_grad_norm_(model.parameters(), targs.grad_clip)
        opt.step()
        times.append(time.perf_counter() - t0)
        parts.append((t1 - t0, t2 - t1, t0 + times[-1] - t2))
        loss.numpy()
    if flow.env.get_rank() == 0:
        medians = [1e3 * statistics.median(p[k] for p in parts[1:]) for k in range(3)]
        print(json.dumps({"first_step_s": times[0],
                          "median_ms": 1e3 * statistics.median(times[1:]),
                          "forward_ms": medians[0], "backward_ms": medians[1],
                          "clip_and_step_ms": medians[2]}), flush=True)


def part_ddp(args):
    """Under the launcher: the local model in flow.nn.parallel.DistributedDataParallel, each rank
    on its own batch, as torch's DDP part; rank 0 prints the median step time."""
    import oneflowlike as flow
    import train
    from model import GPT, GPTConfig

    targs = train.parse(MODEL + ["--batch-size", str(args.batch_size), "--steps", str(args.steps)])
    config = GPTConfig(block_size=targs.block_size, n_layer=targs.n_layer, n_head=targs.n_head,
                       n_embd=targs.n_embd)
    flow.manual_seed(0)
    model = flow.nn.parallel.DistributedDataParallel(GPT(config))
    opt = flow.optim.AdamW(model.parameters(), lr=targs.lr, betas=(0.9, 0.95),
                           weight_decay=targs.weight_decay)
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    rank = flow.env.get_rank()
    times = []
    for step in range(1, args.steps + 1):
        tokens, targets = data.batch(step * 101 + rank, args.batch_size)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model(flow.tensor(tokens), flow.tensor(targets))
        loss.backward()
        flow.nn.utils.clip_grad_norm_(model.parameters(), targs.grad_clip)
        opt.step()
        times.append(time.perf_counter() - t0)
        loss.numpy()
    if rank == 0:
        print(json.dumps({"first_step_s": times[0],
                          "median_ms": 1e3 * statistics.median(times[1:])}), flush=True)


def part_pipeline(args):
    """Under the launcher: pp 2 with m micro-batches, the act trace of a few steps; each rank
    prints its compute thread's busy fraction over the steps and its planned peak."""
    import numpy as np

    import oneflowlike as flow
    import train
    from model import GPT, GPTConfig

    targs = train.parse(MODEL + ["--batch-size", str(args.batch_size), "--pp", "2",
                                 "--micro-batches", str(args.micro_batches)])
    config = GPTConfig(block_size=targs.block_size, n_layer=targs.n_layer, n_head=targs.n_head,
                       n_embd=targs.n_embd)
    flow.manual_seed(1)
    model = GPT(config)
    opt = flow.optim.AdamW(model.parameters(), lr=1e-3)
    graph = train.TrainGraph(model, opt, None, targs.micro_batches, False)
    graph.config.enable_trace()
    layout = train.make_layout(targs)
    layout.apply(model, graph)
    data = train.ByteData(targs.data, targs.block_size, targs.seed)
    rank = flow.env.get_rank()
    fractions = []
    for step in range(1, args.steps + 1):
        tokens, targets = data.batch(step, args.batch_size)
        graph.chrome_trace()  # drop what came before
        graph(data.to_global(tokens, layout.placement(0), layout.data_sbp()),
              data.to_global(targets, layout.placement(1), layout.data_sbp()))
        if step <= 2:
            continue
        events = [e for e in json.loads(graph.chrome_trace())["traceEvents"]
                  if e.get("ph") == "X" and e.get("tid") == 0]
        begin = min(e["ts"] for e in events)
        end = max(e["ts"] + e["dur"] for e in events)
        fractions.append(sum(e["dur"] for e in events) / (end - begin))
    print(json.dumps({"rank": rank, "busy": float(np.median(fractions)),
                      "peak_bytes": graph.peak_bytes()}), flush=True)


# --- the driver --------------------------------------------------------------------------------
def ours_single(threads, batch, steps, skip_passes=None):
    out = run([sys.executable, os.path.join(GPT, "train.py"), *MODEL, "--batch-size", str(batch),
               "--steps", str(steps), "--quiet", "--warmup-steps", "1", "--dtype", DTYPE], threads,
              {"OFL_SKIP_PASSES": skip_passes} if skip_passes else None)
    return parse_done(out)


def parse_done(out):
    """train.py's summary: rank 0's step time and first-step timings, each rank's planned peak
    (by rank)."""
    m = re.search(r"then ([\d.]+) ms/step median", out)
    first = re.search(r"rank 0: .*first step ([\d.]+) s \(trace ([\d.]+) s, compile ([\d.]+) s\)",
                      out)
    peaks = [float(p) for _, p in sorted(
        (int(r), p) for r, p in re.findall(r"rank (\d+): peak rss .*?planned peak ([\d.]+) MiB", out))]
    return {"median_ms": float(m.group(1)), "first_step_s": float(first.group(1)),
            "trace_s": float(first.group(2)), "compile_s": float(first.group(3)), "peaks": peaks}


def last_json(out):
    return json.loads([l for l in out.splitlines() if "median_ms" in l][-1].split("] ", 1)[-1])


def eager_data_parallel(args):
    """5.: eager DP2 on global tensors against PyTorch DDP and our nn.Graph DP2, interleaved."""
    eager, ddp, graph, ours_ddp = [], [], [], []
    for _ in range(args.repeats):
        eager.append(last_json(run(launch(2, __file__, "--part", "eager", "--model", MODEL_NAME,
                                          "--batch-size", str(args.batch_size), "--steps",
                                          str(args.steps)), 1)))
        ours_ddp.append(last_json(run(launch(2, __file__, "--part", "ddp", "--model", MODEL_NAME,
                                             "--batch-size", str(args.batch_size), "--steps",
                                             str(args.steps)), 1)))
        ddp.append(last_json(run(launch(2, __file__, "--part", "torch", "--model", MODEL_NAME,
                                        "--threads", "1", "--batch-size", str(args.batch_size),
                                        "--steps", str(args.steps)), 1)))
        graph.append(parse_done(run(launch(2, os.path.join(GPT, "train.py"), *MODEL, "--dp", "2",
                                           "--batch-size", str(2 * args.batch_size), "--steps",
                                           str(args.steps), "--quiet", "--warmup-steps", "1"),
                                    1)))
    e, d, g, o = (statistics.median(r["median_ms"] for r in runs)
                  for runs in (eager, ddp, graph, ours_ddp))
    print(f"eager data parallel 2 x 1 thread, batch {args.batch_size} per rank: ours eager on "
          f"global tensors {e:.1f} ms/step (first step "
          f"{statistics.median(r['first_step_s'] for r in eager):.2f} s), PyTorch DDP (gloo) "
          f"{d:.1f} ms/step, ours nn.Graph {g:.1f} ms/step; eager ours/DDP speed {d / e:.2f}, "
          f"eager/graph time {e / g:.2f}")
    print(f"  ours DistributedDataParallel on local tensors {o:.1f} ms/step; ours DDP/PyTorch "
          f"DDP speed {d / o:.2f}")


def torch_single(threads, batch, steps, compile_=False):
    out = run([sys.executable, __file__, "--part", "torch", "--model", MODEL_NAME, "--dtype",
               DTYPE, "--threads", str(threads), "--batch-size", str(batch), "--steps",
               str(steps)] + (["--compile"] if compile_ else []), threads)
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--part")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", choices=["single", "dp", "pipeline", "eager"], help="run one part")
    p.add_argument("--model", choices=sorted(MODELS), default="small")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--compile", action="store_true",
                   help="one process: also PyTorch's model torch.compile'd (its first step, "
                        "which compiles, left out as ours is)")
    p.add_argument("--without-pass", metavar="PASS",
                   help="one process: also ours with compiler pass PASS skipped "
                        "(OFL_SKIP_PASSES), interleaved with the rest, to measure what it gives")
    args = p.parse_args()
    global MODEL, MODEL_NAME, DTYPE
    MODEL, MODEL_NAME, DTYPE = MODELS[args.model], args.model, args.dtype
    if args.part == "torch":
        return part_torch(args)
    if args.part == "pipeline":
        return part_pipeline(args)
    if args.part == "eager":
        return part_eager(args)
    if args.part == "ddp":
        return part_ddp(args)

    tokens = args.batch_size * int(MODEL[MODEL.index("--block-size") + 1])
    print(f"# GPT benchmarks ({' '.join(MODEL)}, {DTYPE}, batch {args.batch_size} per rank, "
          f"{args.steps} steps, {args.repeats} repeats; {time.strftime('%Y-%m-%d')})")
    # 1. One process, same threads.
    for threads in (1, 2) if args.only in (None, "single") else ():
        ours, theirs, compiled, without = [], [], [], []
        for _ in range(args.repeats):
            ours.append(ours_single(threads, args.batch_size, args.steps))
            theirs.append(torch_single(threads, args.batch_size, args.steps))
            if args.compile:
                compiled.append(torch_single(threads, args.batch_size, args.steps, True))
            if args.without_pass:
                without.append(ours_single(threads, args.batch_size, args.steps,
                                           args.without_pass))
        o = statistics.median(r["median_ms"] for r in ours)
        t = statistics.median(r["median_ms"] for r in theirs)
        print(f"single process, {threads} thread(s): ours {o:.1f} ms/step "
              f"({tokens / o * 1e3:.0f} tokens/s), PyTorch eager {t:.1f} ms/step "
              f"({tokens / t * 1e3:.0f} tokens/s); ours/PyTorch speed {t / o:.2f}")
        if without:
            w = statistics.median(r["median_ms"] for r in without)
            print(f"single process, {threads} thread(s): ours without pass {args.without_pass} "
                  f"{w:.1f} ms/step; with it {w / o:.2f}x the speed")
        if compiled:
            c = statistics.median(r["median_ms"] for r in compiled)
            print(f"single process, {threads} thread(s): PyTorch torch.compile {c:.1f} ms/step; "
                  f"ours/torch.compile speed {c / o:.2f}")
        if threads == 1:
            r = ours[len(ours) // 2]
            ours_first = statistics.median(x["first_step_s"] for x in ours)
            torch_first = statistics.median(x["first_step_s"] for x in theirs)
            print(f"first step (1 process): ours {ours_first:.3f} s (trace {r['trace_s']:.3f} s, "
                  f"compile {r['compile_s']:.3f} s), PyTorch {torch_first:.3f} s")
    if args.only == "eager":
        return eager_data_parallel(args)
    if args.only == "single":
        return
    # 2. Data-parallel scaling at 1 thread per process.
    ours1, ours2, torch1, torch2 = [], [], [], []
    for _ in range(args.repeats if args.only in (None, "dp") else 0):
        ours1.append(ours_single(1, args.batch_size, args.steps)["median_ms"])
        ours2.append(parse_done(run(launch(2, os.path.join(GPT, "train.py"), *MODEL, "--dp", "2",
                                           "--batch-size", str(2 * args.batch_size), "--steps",
                                           str(args.steps), "--quiet", "--warmup-steps", "1"),
                                    1))["median_ms"])
        torch1.append(torch_single(1, args.batch_size, args.steps)["median_ms"])
        out = run(launch(2, __file__, "--part", "torch", "--model", MODEL_NAME, "--threads", "1",
                         "--batch-size", str(args.batch_size), "--steps", str(args.steps)), 1)
        torch2.append(last_json(out)["median_ms"])
    if not ours1:
        ours1 = ours2 = torch1 = torch2 = [float("nan")]
    e_ours = statistics.median(ours1) / statistics.median(ours2)
    e_torch = statistics.median(torch1) / statistics.median(torch2)
    print(f"data parallel 2 x 1 thread vs 1 x 1 thread (weak scaling, batch {args.batch_size} "
          f"per rank): ours {statistics.median(ours1):.1f} -> {statistics.median(ours2):.1f} "
          f"ms/step, efficiency {e_ours:.2f}; PyTorch DDP (gloo) "
          f"{statistics.median(torch1):.1f} -> {statistics.median(torch2):.1f} ms/step, "
          f"efficiency {e_torch:.2f}")
    # 3. Pipeline bubble and memory.
    if args.only not in (None, "pipeline"):
        return
    for m in (4, 8):
        out = run(launch(2, __file__, "--part", "pipeline", "--micro-batches", str(m),
                         "--batch-size", str(2 * args.batch_size), "--steps", "8"), 1)
        ranks = [json.loads(l.split("] ", 1)[-1]) for l in out.splitlines() if '"busy"' in l]
        ideal = 1 / (m + 1)
        ranks.sort(key=lambda r: r["rank"])
        bubbles = ", ".join(f"{1 - r['busy']:.1%}" for r in ranks)
        peaks = ", ".join(f"{r['peak_bytes'] / 2**20:.2f} MiB" for r in ranks)
        print(f"pipeline pp 2, {m} micro-batches: bubble per rank {bubbles} (ideal {ideal:.1%}); "
              f"planned peak per rank {peaks}")
    for name, flags in (("DP2", ["--dp", "2"]), ("DP2 + ZeRO", ["--dp", "2", "--zero"]),
                        ("PP2 m4", ["--pp", "2", "--micro-batches", "4"])):
        r = parse_done(run(launch(2, os.path.join(GPT, "train.py"), *MODEL, *flags,
                                  "--batch-size", str(2 * args.batch_size), "--steps", "3",
                                  "--quiet"), 1))
        peaks = ", ".join(f"{x:.2f} MiB" for x in r["peaks"])
        print(f"planned peak memory per rank, {name}: {peaks}; first step "
              f"{r['first_step_s']:.3f} s (trace {r['trace_s']:.3f} s, compile "
              f"{r['compile_s']:.3f} s)")


if __name__ == "__main__":
    main()
