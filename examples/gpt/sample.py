"""Sample text from a GPT that train.py trained and saved (--save DIR), as nanoGPT's sample.py:

    .venv/bin/python examples/gpt/train.py --steps 300 --save /tmp/gpt
    .venv/bin/python examples/gpt/sample.py /tmp/gpt --prompt "In the beginning" --tokens 200

The checkpoint may come from any layout (dp, tp, pp, ZeRO): flow.load without like= gives every
tensor whole. Each new byte is drawn from the softmax of the last position's logits divided by
--temperature, among the --top-k most likely (1: greedy), with flow.multinomial; the context is
the last block_size bytes. Eager, on one device (--device cuda for the GPU).
"""

import argparse
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

import oneflowlike as flow  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

# The graph attribute train.py's TrainGraph keeps the model under (common/trainer.py).
_PREFIX = "model."


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="the directory train.py --save wrote")
    p.add_argument("--prompt", default="\n", help="the text to continue (bytes of UTF-8)")
    p.add_argument("--tokens", type=int, default=200, help="bytes to generate")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40, help="sample among the k likeliest (1: greedy)")
    p.add_argument("--samples", type=int, default=1, help="independent continuations")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args(argv)
    if args.temperature <= 0:
        p.error(f"--temperature must be positive. However, got {args.temperature}.")
    if args.top_k < 1 or args.tokens < 0 or args.samples < 1:
        p.error("--top-k and --samples must be at least 1, --tokens at least 0.")
    return args


def load_model(checkpoint, device="cpu"):
    """The GPT a train.py checkpoint holds, in eval mode, with its trained weights."""
    with open(os.path.join(checkpoint, "train_state.json")) as f:
        saved = json.load(f)["args"]
    config = GPTConfig(block_size=saved["block_size"], n_layer=saved["n_layer"],
                       n_head=saved["n_head"], n_embd=saved["n_embd"], bias=saved["bias"],
                       tied_head=saved["tied_head"])
    model = GPT(config)
    state = flow.load(checkpoint)
    wanted = model.state_dict()
    weights = {name: state[_PREFIX + name] for name in wanted if _PREFIX + name in state}
    missing = sorted(set(wanted) - set(weights))
    if missing:
        raise SystemExit(f"[sample] {checkpoint} lacks {missing[:4]}: is it a train.py "
                         "checkpoint of this model?")
    model.load_state_dict(weights)
    return model.to(device).eval()


@flow.no_grad()
def generate(model, idx, tokens, temperature=1.0, top_k=None):
    """``idx`` (B, T) continued by ``tokens`` new ones, each drawn from the last position's
    distribution (top_k: among its k likeliest)."""
    block = model.config.block_size
    for _ in range(tokens):
        logits = model(idx[:, -block:])[:, -1, :] / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = flow.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = flow.where(logits < kth, float("-inf"), logits)
        probs = flow.nn.functional.softmax(logits, dim=-1)
        idx = flow.cat([idx, flow.multinomial(probs, 1)], dim=1)
    return idx


def main(argv=None):
    args = parse(argv)
    flow.manual_seed(args.seed)
    model = load_model(args.checkpoint, args.device)
    prompt = list(args.prompt.encode("utf-8")) or [10]
    idx = flow.tensor([prompt] * args.samples, dtype=flow.int64, device=args.device)
    out = generate(model, idx, args.tokens, args.temperature, args.top_k)
    for row in out.cpu().numpy():
        print(bytes(int(b) for b in row).decode("utf-8", errors="replace"))
        print("---")


if __name__ == "__main__":
    main()
