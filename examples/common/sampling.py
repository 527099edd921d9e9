"""Text from a checkpoint that an example's train.py saved (--save DIR), as nanoGPT's sample.py:
the examples' sample.py scripts are this file with their model.

The checkpoint may come from any layout (dp, tp, pp, ZeRO): flow.load without like= gives every
tensor whole. Each new byte is drawn from the softmax of the last position's logits divided by
--temperature, among the --top-k most likely (1: greedy), with flow.multinomial; the context is
the last block_size bytes. Eager, on one device (--device cuda for the GPU).

Each layer keeps its keys and values in a flow.nn.KVCache (Note [KV cache]), so a new byte
runs one position through the model, not the whole context; once the context is block_size
long it slides, the positions restart at its first byte and the caches are filled again (as
the model sees it without caches, which --no-cache runs). A model the caches cannot serve
(experts, packed documents) runs without them, saying so.

With --graph, each new byte runs through one compiled nn.Graph (StepGraph) over
flow.nn.StaticKVCache buffers (Note [Static KV cache]); the prompt, and the context after it
slides, run eagerly into the same caches. The same bytes as eagerly, with one graph instead of
an op-by-op call per byte: on global tensors (--tp), where each eager op is a collective call,
that halves the time per byte.

With --tp N, launched on N processes (python -m oneflowlike.distributed.launch --nproc_per_node
N sample.py ... --tp N), the model is laid out tensor-parallel as train.py lays it out (Megatron's
splits, on global tensors) and generates eagerly across the processes: the same bytes as one
device from the same seed, each process then keeping its part of every split weight and of
the caches (the checkpoint is read whole first).
"""

import argparse
import json
import os
import sys

import oneflowlike as flow
from common.layout import Layout

# The graph attribute the examples' TrainGraph keeps the model under (common/trainer.py).
_PREFIX = "model."


def parse(description, argv=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("checkpoint", help="the directory train.py --save wrote")
    p.add_argument("--prompt", default="\n", help="the text to continue (bytes of UTF-8)")
    p.add_argument("--tokens", type=int, default=200, help="bytes to generate")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest (1: greedy)")
    p.add_argument("--samples", type=int, default=1, help="independent continuations")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--no-cache", action="store_true",
                   help="run the whole context for every byte (no KV caches)")
    p.add_argument("--graph", action="store_true",
                   help="each new byte through a compiled nn.Graph over static KV caches")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel over this many processes (launch that many)")
    args = p.parse_args(argv)
    if args.temperature <= 0:
        p.error(f"--temperature must be positive. However, got {args.temperature}.")
    if args.graph and args.no_cache:
        p.error("--graph runs through static KV caches: it cannot go with --no-cache.")
    if args.top_k < 1 or args.tokens < 0 or args.samples < 1 or args.tp < 1:
        p.error("--top-k, --samples and --tp must be at least 1, --tokens at least 0.")
    world = flow.env.get_world_size()
    if args.tp != world and args.tp == 1:
        p.error(f"this job has {world} processes: pass --tp {world} to lay the model out over "
                f"them (or run one process).")
    if args.tp != world:
        p.error(f"--tp {args.tp} lays the model out over that many processes: launch them "
                f"(python -m oneflowlike.distributed.launch --nproc_per_node {args.tp} ...). "
                f"However, this job has {world}.")
    return args


def load(checkpoint, build, device="cpu"):
    """The model ``build(saved train.py args)`` makes, with the checkpoint's trained weights, in
    eval mode."""
    with open(os.path.join(checkpoint, "train_state.json")) as f:
        model = build(json.load(f)["args"])
    state = flow.load(checkpoint)
    wanted = model.state_dict()
    missing = sorted(name for name in wanted if _PREFIX + name not in state)
    if missing:
        raise SystemExit(f"[sample] {checkpoint} lacks {missing[:4]}: is it a train.py "
                         "checkpoint of this model?")
    model.load_state_dict({name: state[_PREFIX + name] for name in wanted})
    return model.to(device).eval()


class StepGraph(flow.nn.Graph):
    """One new token through ``model`` and its StaticKVCaches, compiled once: the last
    position's logits (B, vocab_size). The caches are buffers the step writes (Note [Static KV
    cache]); the weights stay the model's (Note [Graphs sharing modules])."""

    def __init__(self, model, caches):
        super().__init__()
        self.model = model
        self.caches = flow.nn.ModuleList(caches)

    def build(self, idx):
        return self.model(idx, caches=list(self.caches))[:, -1, :]

    def __call__(self, idx):
        # The tokens whole on every rank, however the ops that chose them left them (an
        # argmax of partial logits comes out split, and its reshape partial): a graph runs with
        # its inputs laid out as at its first call.
        if idx.is_global:
            broadcast = (flow.sbp.broadcast,) * len(idx.placement.hierarchy)
            if tuple(idx.sbp) != broadcast:
                idx = idx.to_global(placement=idx.placement, sbp=broadcast)
        return super().__call__(idx)


@flow.no_grad()
def generate(model, idx, tokens, temperature=1.0, top_k=None, use_cache=None, graph=False):
    """``idx`` (B, T) continued by ``tokens`` new ones, each drawn from the last position's
    distribution (top_k: among its k likeliest). ``use_cache``: True through the model's KV
    caches (model.make_caches(), which refuses a model they cannot serve), False without, None
    through them where the model can be served. ``graph``: each new token through a StepGraph
    over static caches (the prompt, and the context after it slides, run eagerly into them)."""
    block = model.config.block_size
    caches = None
    if graph:
        caches = model.make_caches(batch_size=idx.shape[0])
        step = StepGraph(model, caches)
    elif use_cache or (use_cache is None and hasattr(model, "make_caches")):
        try:
            caches = model.make_caches()
        except ValueError:
            if use_cache:
                raise
    # The last block_size bytes, and every piece of the result, joined once at the end: on
    # global tensors each new shape of an op is a graph compiled and kept, so no tensor here
    # grows without bound.
    recent = idx[:, -block:]
    pieces = [idx]
    context = recent  # what the model runs next
    held = 0  # the positions the caches hold
    for _ in range(tokens):
        if caches is not None and held + context.shape[1] > block:
            for cache in caches:  # the context slides: its positions restart at its first byte
                cache.reset()
            context, held = recent, 0
        if graph and held:
            logits = step(context)
        else:
            logits = model(context, caches=caches)[:, -1, :]
        held += context.shape[1]
        logits = logits / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = flow.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = flow.where(logits < kth, float("-inf"), logits)
        probs = flow.nn.functional.softmax(logits, dim=-1)
        drawn = flow.multinomial(probs, 1)
        pieces.append(drawn)
        recent = flow.cat([recent, drawn], dim=1)[:, -block:]
        context = drawn if caches is not None else recent
    return flow.cat(pieces, dim=1) if len(pieces) > 1 else idx


def main(build, argv=None, column=(), row=()):
    """``column`` and ``row``: the parameter names train.py splits by output and by input
    features under tensor parallelism."""
    args = parse(__doc__.split("\n\n")[0], argv)
    flow.manual_seed(args.seed)
    model = load(args.checkpoint, build, "cpu" if args.tp > 1 else args.device)
    prompt = [list(args.prompt.encode("utf-8")) or [10]] * args.samples
    if args.tp > 1:
        layout = Layout(1, args.tp, 1, args.device, column=column, row=row)
        try:
            layout.check(model.config, args.samples, 1)
        except ValueError as e:
            raise SystemExit(f"[sample] {e}") from None
        layout.apply(model, None)
        idx = flow.tensor(prompt, dtype=flow.int64, placement=layout.placement(0),
                          sbp=flow.sbp.broadcast)
    else:
        idx = flow.tensor(prompt, dtype=flow.int64, device=args.device)
    use_cache = not args.no_cache
    if use_cache:
        try:
            model.make_caches()
        except ValueError as e:
            print(f"[sample] without KV caches: {e}", file=sys.stderr)
            use_cache = False
    out = generate(model, idx, args.tokens, args.temperature, args.top_k, use_cache=use_cache,
                   graph=args.graph and use_cache)
    out = out.numpy() if args.tp > 1 else out.cpu().numpy()  # global: gathered on every rank
    if flow.env.get_rank() == 0:
        for text in out:
            print(bytes(int(b) for b in text).decode("utf-8", errors="replace"))
            print("---")
