"""Train a byte-level LLaMA-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU) on
the King James text (or synthetic bytes) with data, tensor and pipeline parallelism chosen by
flags.

One device:
    .venv/bin/python examples/llama/train.py --steps 50
Four ranks, data x tensor parallel:
    .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 examples/llama/train.py \\
        --dp 2 --tp 2
Every sequence split over two context-parallel ranks, in the zigzag order that balances causal
attention (Note [Context parallelism as SBP] in common/layout.py):
    .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 2 examples/llama/train.py \\
        --cp 2
Mixtral-style experts (8 experts, 2 per token), split over two data-parallel ranks:
    .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 2 examples/llama/train.py \\
        --dp 2 --n-experts 8

The model (llama_model.py) is written once; common/layout.py lays it out with placements and SBP, and
common/trainer.py runs the loop shared with examples/gpt.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

import oneflowlike as flow  # noqa: E402
from common import trainer  # noqa: E402
from common.data import ByteData  # noqa: E402,F401 (tests reach it as train.ByteData)
from common.layout import Layout  # noqa: E402
from common.trainer import lr_lambda  # noqa: E402,F401
from llama_model import Llama, LlamaConfig, config_from_flags  # noqa: E402

# Megatron's splits along the tensor-parallel dimension: q, k, v and SwiGLU's two input
# projections column-parallel (whole heads, whole hidden units per rank), the attention output
# and the MLP's w2 row-parallel.
COLUMN = ("attn.wq.weight", "attn.wk.weight", "attn.wv.weight", "mlp.w1.weight", "mlp.w3.weight")
ROW = ("attn.wo.weight", "mlp.w2.weight")
# Expert weights (moe.py): split over the data-parallel ranks by expert, and along the axis
# named here over the tensor-parallel ones (w1, w3 (E, D, H) by hidden units, w2 (E, H, D) too).
EXPERTS = {"mlp.w1": 2, "mlp.w3": 2, "mlp.w2": 1}

# What must match between a checkpoint's run and the run that resumes it.
MODEL_FLAGS = ("n_layer", "n_embd", "n_head", "n_kv_head", "block_size", "tied_head",
               "n_experts", "top_k", "capacity_factor", "window", "global_every", "doc_sep")


def parse(argv=None):
    p = trainer.parser(__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-kv-head", type=int, default=2, help="key/value heads (GQA)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--tied-head", action="store_true", help="output head = token embedding")
    p.add_argument("--window", type=int, default=0,
                   help="sliding-window attention: each position sees its WINDOW latest "
                        "(Mistral; 0: the whole prefix)")
    p.add_argument("--global-every", type=int, default=0,
                   help="with --window, every K-th layer sees the whole prefix (Gemma 2: 2, "
                        "Gemma 3: 6)")
    p.add_argument("--doc-sep", type=int, default=-1,
                   help="the token that ends each document of the packed sequences (10: each "
                        "line of the corpus); a position attends within its document only (-1: "
                        "no documents)")
    p.add_argument("--n-experts", type=int, default=0,
                   help="Mixtral-style mixture of experts instead of the MLP (0: dense); the "
                        "experts are split over the data-parallel ranks")
    p.add_argument("--top-k", type=int, default=LlamaConfig.top_k, help="experts per token")
    p.add_argument("--capacity-factor", type=float, default=LlamaConfig.capacity_factor,
                   help="tokens an expert takes per sequence, over the even share")
    p.add_argument("--aux-loss-coef", type=float, default=LlamaConfig.aux_loss_coef,
                   help="weight of the experts' load-balancing loss")
    p.add_argument("--router-z-loss-coef", type=float, default=LlamaConfig.router_z_loss_coef,
                   help="weight of ST-MoE's router z-loss (0: off; ST-MoE uses 0.001)")
    return p.parse_args(argv)


def config_of(args):
    return config_from_flags(vars(args))


def main(argv=None):
    args = parse(argv)
    config = config_of(args)
    try:
        config.check()
    except ValueError as e:
        raise SystemExit(f"[train] {e}")
    layout = Layout(args.dp, args.tp, args.pp, args.device, column=COLUMN, row=ROW,
                    experts=EXPERTS, cp=args.cp, cp_order=args.cp_order)
    config.zigzag = layout.zigzag  # the order the sequences come in
    trainer.check(args, layout, config)
    model = trainer.build(args, lambda: Llama(config))
    trainer.run(args, model, layout, MODEL_FLAGS,
                lambda m: f"llama: {m.num_parameters()} parameters, {args.n_layer} layers, "
                          f"{args.n_embd} channels, {args.n_head} heads ({args.n_kv_head} "
                          f"key/value), block {args.block_size}"
                          + (f", {args.n_experts} experts (top {args.top_k})"
                             if args.n_experts else "")
                          + (f", window {args.window}" if args.window else "")
                          + (f" (every {args.global_every}th layer global)"
                             if args.global_every else "")
                          + (f", documents ending at token {args.doc_sep}"
                             if args.doc_sep >= 0 else ""))


if __name__ == "__main__":
    main()
