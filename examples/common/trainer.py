"""The training loop the examples share: flags for the layout, precision, optimizer and
schedule, the nn.Graph step, progress lines, the JSON log, and checkpoints with resume.

An example adds its model flags to ``parser()``, builds its model (after ``check``), and calls
``run``.
"""

import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np

import oneflowlike as flow
from common import checkpoints
from common.data import ByteData, TokenBatches
from oneflowlike.framework import global_tensor

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                            "kjv-genesis-deuteronomy.txt")

# What must match between a checkpoint's run and the run that resumes it, besides the model.
_SCHEDULE_FLAGS = ("lr", "min_lr", "warmup_steps", "steps", "weight_decay", "grad_clip",
                   "batch_size", "seed")


def parser(description):
    """The flags every example takes; the example adds its model's."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dp", type=int, default=1, help="data-parallel ranks")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (Megatron)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--cp", type=int, default=1,
                   help="context-parallel ranks: each takes a piece of every sequence (Note "
                        "[Context parallelism as SBP] in common/layout.py)")
    p.add_argument("--cp-order", choices=["zigzag", "contiguous"], default="zigzag",
                   help="how --cp cuts the sequences: zigzag (chunks i and 2cp-1-i of 2cp on "
                        "rank i, which balances causal attention's work) or contiguous")
    p.add_argument("--micro-batches", type=int, default=1, help="micro-batches per step")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where every stage computes (cuda: each rank's GPU LOCAL_RANK)")
    p.add_argument("--zero", type=int, nargs="?", const=1, default=0, choices=[0, 1, 2, 3],
                   help="ZeRO stage (--zero alone: 1): shard parameters and optimizer state over "
                        "the ranks that would replicate them (the data-parallel ones, and the "
                        "tensor-parallel ones for parameters TP does not split); 3 also gathers "
                        "each parameter again for backward instead of keeping it")
    p.add_argument("--meta-init", action="store_true",
                   help="build the model on the meta device (no storage) and make each rank's "
                        "pieces from the initialisers when it is laid out: the same values, and "
                        "no rank ever holds a whole parameter")
    p.add_argument("--checkpoint-activations", action="store_true",
                   help="recompute each block's activations in backward instead of keeping "
                        "them (less memory, about one more forward)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="bfloat16 / float16: mixed precision (matmuls in that dtype, float32 "
                   "master weights); float16 with dynamic loss scaling")
    p.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="what data-parallel gradients are reduced in (with --dtype bfloat16)")
    p.add_argument("--batch-size", type=int, default=16, help="global batch (sequences)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="max global norm (0: off)")
    p.add_argument("--steps", type=int, default=100, help="the last step (the schedule's length)")
    p.add_argument("--stop-after", type=int, default=0,
                   help="end after this step, the schedule still spanning --steps (with --save: "
                        "a checkpoint to --resume from)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default=DEFAULT_DATA, help="a text file (bytes are tokens)")
    p.add_argument("--synthetic", action="store_true", help="random bytes instead of --data")
    p.add_argument("--data-bin",
                   help="a flat uint16 token file (common/prepare_tokens.py) read through "
                        "flow.utils.data: each data-parallel rank loads its shard, and the "
                        "loader's position is saved and resumed with checkpoints")
    p.add_argument("--log-json", help="rank 0 writes one JSON object per step here")
    p.add_argument("--plan-summary", action="store_true",
                   help="each rank prints its plan's summary (tasks by kind, memory) at the end")
    p.add_argument("--save", help="checkpoint directory written at the end")
    p.add_argument("--save-every", type=int, default=0, metavar="N",
                   help="with --save: also write the checkpoint every N steps, its files "
                        "while the next step runs, the last one replaced only once the new one "
                        "is complete (common/checkpoints.py)")
    p.add_argument("--resume",
                   help="checkpoint directory to start from; auto: --save's newest complete "
                        "checkpoint if there is one, else step 1 (for the launcher's "
                        "--max_restarts, which runs the same command again)")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    return p


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, optimizer, scheduler, micro_batches, zero, dtype="float32",
                 reduce_dtype="float32", checkpoint_activations=False):
        super().__init__()
        self.model = model
        if checkpoint_activations:
            for block in model.blocks:
                self.set_activation_checkpointing(block)
        self.add_optimizer(optimizer, lr_sch=scheduler)
        self.config.set_gradient_accumulation_steps(micro_batches)
        if zero:
            self.config.enable_zero(stage=int(zero))
        if dtype == "bfloat16":
            self.config.enable_amp(True, dtype=flow.bfloat16,
                                   reduce_dtype=getattr(flow, reduce_dtype))
        elif dtype == "float16":
            self.config.enable_amp(True, dtype=flow.float16)
            self.set_grad_scaler(flow.amp.GradScaler())
        if reduce_dtype != "float32" and dtype != "bfloat16":
            raise SystemExit("[train] --reduce-dtype bfloat16 goes with --dtype bfloat16.")

    def build(self, tokens, targets):
        loss = self.model(tokens, targets)
        loss.backward()
        return loss


def lr_lambda(args):
    def factor(step):  # step 0 is the first update
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        # Reaches --min-lr at the last step (step index args.steps - 1).
        progress = (step - args.warmup_steps) / max(1, args.steps - 1 - args.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return (args.min_lr + (args.lr - args.min_lr) * cosine) / args.lr

    return factor


def check_resume(args, saved, rank, model_flags):
    done = saved["step"]
    if args.steps <= done:
        raise SystemExit(f"[train] --resume starts after step {done}: --steps must be larger. "
                         f"However, got {args.steps}.")
    before = saved.get("args", {})
    changed = [f for f in model_flags if f in before and before[f] != getattr(args, f)]
    if changed:
        raise SystemExit("[train] --resume needs the model the checkpoint holds. However, "
                         + ", ".join(f"--{f.replace('_', '-')} was {before[f]} and is now "
                                     f"{getattr(args, f)}" for f in changed) + ".")
    changed = [f for f in _SCHEDULE_FLAGS if f in before and before[f] != getattr(args, f)]
    if changed and rank == 0:
        print("[train] warning: the learning-rate schedule differs from the checkpoint's run ("
              + ", ".join(f"--{f.replace('_', '-')} {before[f]} -> {getattr(args, f)}"
                          for f in changed) + "): the curve will not continue as one run.",
              file=sys.stderr)


def open_log(path, first):
    """The JSON log, keeping only the steps before ``first`` of an earlier run (a resume)."""
    kept = []
    if first > 1 and os.path.exists(path):
        with open(path) as f:
            kept = [line for line in f if line.strip() and json.loads(line)["step"] < first]
    log = open(path, "w")
    log.writelines(kept)
    return log


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib():
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def check(args, layout, config):
    """Refuses flags that cannot run, before anything is built."""
    world = flow.env.get_world_size()
    try:
        layout.check(config, args.batch_size, args.micro_batches)
    except ValueError as e:
        raise SystemExit(f"[train] {e}") from None
    if args.steps < 1:
        raise SystemExit(f"[train] --steps must be at least 1. However, got {args.steps}.")
    if args.save_every < 0 or (args.save_every and not args.save):
        raise SystemExit(f"[train] --save-every takes a number of steps >= 0 and --save DIR. "
                         f"However, got --save-every {args.save_every} and --save {args.save}.")
    if args.resume == "auto" and not args.save:
        raise SystemExit("[train] --resume auto resumes from --save's checkpoint. However, no "
                         "--save was given.")
    if args.save:
        try:
            checkpoints.check(args.save)
        except ValueError as e:
            raise SystemExit(f"[train] {e}") from None
    if args.zero and args.dp == 1 and args.tp == 1 and args.cp == 1:
        print("[train] warning: --zero has nothing to shard over with --dp 1, --cp 1 and --tp 1",
              file=sys.stderr)
    if layout.world_size != world:
        raise SystemExit(f"[train] --dp x --cp x --tp x --pp = {layout.world_size} ranks. However, "
                         f"the job has {world} (start it with --nproc_per_node "
                         f"{layout.world_size}).")


def no_decay_names(model):
    """The parameters that take no weight decay, by name: vectors (norms, biases) and embedding
    tables, as nanoGPT-style recipes leave them. The PyTorch twins group by the same names."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, flow.nn.Embedding)}
    return {name for name, p in model.named_parameters() if p.ndim < 2 or id(p) in tables}


def make_optimizer(args, model):
    """AdamW over two parameter groups (with and without weight decay), each clipped with the
    others by one global norm, and the warmup-cosine schedule acting on both."""
    skip = no_decay_names(model)
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n not in skip]},
              {"params": [p for n, p in named if n in skip], "weight_decay": 0.0}]
    if args.grad_clip > 0:
        for group in groups:
            group["clip_grad_max_norm"] = args.grad_clip
    optimizer = flow.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95),
                                 weight_decay=args.weight_decay)
    return optimizer, flow.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(args))


def feed(args, layout, data, tokens, targets, block_size):
    """The step's global inputs: tokens on the first stage, targets on the last, split over the
    data-parallel ranks (and along the sequence over the context-parallel ones). From
    --data-bin each rank holds its rows already, whole sequences, and keeps its piece of them;
    from ByteData every rank has the whole batch and keeps its piece. Either way the sequences
    come in the order the model is told (Layout.in_order)."""
    first, last = layout.placement(0), layout.placement(args.pp - 1)
    tokens, targets = layout.in_order(tokens), layout.in_order(targets)
    if args.data_bin:
        shape = (args.batch_size, block_size)

        def piece(rows, placement):
            region = global_tensor.local_region(shape, placement, layout.data_sbp())
            if region is None or layout.cp == 1:  # not a rank of this stage; whole sequences
                return rows
            return rows[:, region[1][0]:region[1][1]].contiguous()

        return (piece(tokens, first).to_global(first, layout.data_sbp(), shape=shape),
                piece(targets, last).to_global(last, layout.data_sbp(), shape=shape))
    return (data.to_global(tokens, first, layout.data_sbp()),
            data.to_global(targets, last, layout.data_sbp()))


def build(args, make_model):
    """``make_model()`` after flow.manual_seed(args.seed); with --meta-init on the meta device
    (Note [Meta tensors]), materialised here when one process holds the model and laid out
    piece by piece by run() otherwise."""
    flow.manual_seed(args.seed)
    if not args.meta_init:
        return make_model()
    with flow.device("meta"):
        model = make_model()
    if flow.env.get_world_size() == 1 and args.device == "cpu":
        from oneflowlike.framework import meta

        meta.materialize(model)
    return model


def run(args, model, layout, model_flags, describe):
    """Trains ``model`` (built on every rank from the same seed) with the flags' layout,
    precision and schedule; rank 0 prints ``describe`` (a function of the model) and a line per
    step."""
    rank, world = flow.env.get_rank(), flow.env.get_world_size()
    optimizer, scheduler = make_optimizer(args, model)
    graph = TrainGraph(model, optimizer, scheduler, args.micro_batches, args.zero, args.dtype,
                       args.reduce_dtype, args.checkpoint_activations)
    # On a GPU even one rank is a placement: a local graph computes on the host.
    distributed = world > 1 or args.device != "cpu"
    if distributed:
        layout.apply(model, graph)
    block_size = model.config.block_size
    if args.data_bin:
        data = TokenBatches(args.data_bin, block_size, args.batch_size, layout.dp,
                            layout.dp_index(rank), args.seed)
    else:
        data = ByteData(args.data, block_size, args.seed, args.synthetic)
    first = 1
    resume = args.resume
    if resume == "auto":  # Note [Checkpoints that survive a crash]
        resume = checkpoints.agreed_latest(args.save)
        if rank == 0:
            where = (f"from {resume[0]} (step {resume[1]}, " if resume
                     else f"no checkpoint in {args.save} yet, step 1 (")
            print(f"[train] --resume auto: {where}restart "
                  f"{os.environ.get('OFL_RESTART_COUNT', 0)})", flush=True)
        resume = resume[0] if resume else None
    if resume:
        with open(os.path.join(resume, "train_state.json")) as f:
            saved = json.load(f)
        if args.resume == "auto" and saved["step"] >= args.steps:
            if rank == 0:
                print(f"[train] {resume} is at step {saved['step']} of {args.steps}: nothing "
                      "left to run", flush=True)
            return
        check_resume(args, saved, rank, model_flags)
        if args.data_bin:
            if "loader" not in saved:
                raise SystemExit("[train] --data-bin resumes the loader's position, and the "
                                 "checkpoint has none (it was saved without --data-bin).")
            data.load_state_dict(saved["loader"])
        # The step count and the schedule's position come back with the state.
        graph.load_state_dict(flow.load(resume, like=graph.state_dict()))
        first = graph.step_count + 1
    saver = checkpoints.Saver(args.save) if args.save else None
    rank0 = flow.placement("cpu", ranks=[0]) if distributed else None
    log = open_log(args.log_json, first) if args.log_json and rank == 0 else None
    if rank == 0 and not args.quiet:
        print(f"{describe(model)}, batch {args.batch_size} on {world} ranks (dp {args.dp} x "
              f"{f'cp {args.cp} ({layout.cp_order}) x ' if args.cp > 1 else ''}tp {args.tp} x "
              f"pp {args.pp}, "
              f"{args.micro_batches} micro-batches"
              f"{f', ZeRO-{args.zero}' if args.zero else ''}"
              f"{', activation checkpointing' if args.checkpoint_activations else ''}, "
              f"{args.dtype})", flush=True)
    losses, times, waits = [], [], []
    start_all = time.perf_counter()
    last = min(args.steps, args.stop_after) if args.stop_after > 0 else args.steps
    if last < first:
        raise SystemExit(f"[train] nothing to run: steps {first}..{last}.")
    rss_before = rss_mib()  # what the steps add to it is set against the planned peak
    for step in range(first, last + 1):
        lr = optimizer.param_groups[0]["lr"]
        t_data = time.perf_counter()  # how long the step waits for its batch
        if args.data_bin:
            tokens, targets = data.next()  # this rank's rows, prefetched by the loader
        else:
            tokens, targets = data.batch(step, args.batch_size)  # the whole batch
        waits.append((time.perf_counter() - t_data) * 1e3)
        # The step's time: feeding the batch and the compiled step (what PyTorch's loop does
        # between zero_grad and step), not the report of the loss below.
        t0 = time.perf_counter()
        if distributed:
            loss = graph(*feed(args, layout, data, tokens, targets, block_size))
        elif args.data_bin:
            loss = graph(tokens, targets)
        else:
            loss = graph(flow.tensor(tokens), flow.tensor(targets))
        ms = (time.perf_counter() - t0) * 1e3
        if distributed:
            loss = loss.to_global(placement=rank0, sbp=flow.sbp.broadcast)  # to rank 0
            value = float(np.mean(loss.to_local().numpy())) if rank == 0 else None
        else:
            value = float(np.mean(loss.numpy()))
        times.append(ms)
        if rank == 0:
            losses.append(value)
            tokens_per_s = args.batch_size * block_size / (ms / 1e3)
            if not args.quiet:
                scale = graph.loss_scale  # float16: the dynamic loss scale, where rank 0 has it
                print(f"step {step:4d} | loss {value:.4f} | lr {lr:.2e} | "
                      f"{f'scale {scale:.0f} | ' if scale is not None else ''}{ms:7.1f} ms | "
                      f"{tokens_per_s:8.0f} tokens/s | rss {peak_rss_mib():.0f} MiB", flush=True)
            if log:
                log.write(json.dumps({"step": step, "loss": value, "lr": lr, "ms": round(ms, 3),
                                      "data_ms": round(waits[-1], 3),
                                      "tokens_per_s": round(tokens_per_s, 1)}) + "\n")
                log.flush()
        if saver:  # the last step's save, written during this one, is committed (every rank)
            saver.finish()
        if args.save and args.save_every and step % args.save_every == 0 and step < last:
            # Every rank: its files are written during the next step, so a restarted job
            # (--resume auto) loses at most save_every + 1 steps.
            saver.save(graph, step, args, data.state_dict() if args.data_bin else None)
    total = time.perf_counter() - start_all
    if args.save:
        saver.save(graph, last, args, data.state_dict() if args.data_bin else None, wait=True)
    if log:
        log.close()
    steady = times[1:] or times
    waited = waits[1:] or waits
    print(f"rank {rank}: peak rss {peak_rss_mib():.0f} MiB (+{peak_rss_mib() - rss_before:.1f} "
          f"MiB over the steps), planned peak "
          f"{graph.peak_bytes() / 2**20:.2f} MiB (and kernel workspace "
          f"{graph.workspace_bytes() / 2**20:.2f} MiB), first step {graph.timings['first_step_seconds']:.3f} s "
          f"(trace {graph.timings['trace_seconds']:.3f} s, compile "
          f"{graph.timings.get('compile_seconds', 0):.3f} s)", flush=True)
    if args.plan_summary:
        print(graph.plan_summary(), flush=True)
    if rank == 0 and losses:
        print(f"done: {len(losses)} steps in {total:.1f} s, loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f}, first step {times[0]:.0f} ms (compiles), then "
              f"{np.median(steady):.1f} ms/step median, "
              f"{args.batch_size * block_size / (np.median(steady) / 1e3):.0f} tokens/s, "
              f"waiting for data {sum(waited) / (sum(waited) + sum(steady)):.2%} of the time",
              flush=True)
