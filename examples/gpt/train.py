"""Train a byte-level GPT on the King James text (or synthetic bytes) with data, tensor and
pipeline parallelism chosen by flags.

One device:
    .venv/bin/python examples/gpt/train.py --steps 50
Four ranks, data x pipeline parallel:
    .venv/bin/python -m oneflowlike.distributed.launch --nproc_per_node 4 examples/gpt/train.py \\
        --dp 2 --pp 2 --micro-batches 4

The model (model.py) is written once; common/layout.py lays it out with placements and SBP, and
common/trainer.py runs the loop the examples share. Rank 0 prints a line per step and, with
--log-json, writes one JSON object per step.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

import oneflowlike as flow  # noqa: E402
from common import trainer  # noqa: E402
from common.data import ByteData  # noqa: E402,F401 (tests and benchmarks reach it as train.ByteData)
from common.layout import Layout  # noqa: E402
from common.trainer import TrainGraph, lr_lambda  # noqa: E402,F401
from model import GPT, GPTConfig  # noqa: E402

# Megatron's splits, by parameter name suffix, along the tensor-parallel dimension: the
# attention's c_attn and the MLP's c_fc column-parallel, the two c_proj row-parallel.
COLUMN = ("attn.c_attn.weight", "attn.c_attn.bias", "mlp.c_fc.weight", "mlp.c_fc.bias")
ROW = ("attn.c_proj.weight", "mlp.c_proj.weight")

# What must match between a checkpoint's run and the run that resumes it.
MODEL_FLAGS = ("n_layer", "n_embd", "n_head", "block_size", "bias", "tied_head")


def parse(argv=None):
    p = trainer.parser(__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--bias", action="store_true", help="biases in Linear and LayerNorm")
    p.add_argument("--tied-head", action="store_true", help="output head = token embedding")
    return p.parse_args(argv)


def make_layout(args):
    return Layout(args.dp, args.tp, args.pp, args.device, column=COLUMN, row=ROW, cp=args.cp,
                  cp_order=args.cp_order)


def main(argv=None):
    args = parse(argv)
    config = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                       n_embd=args.n_embd, bias=args.bias, tied_head=args.tied_head)
    layout = make_layout(args)
    config.zigzag = layout.zigzag  # the order the sequences come in
    trainer.check(args, layout, config)
    model = trainer.build(args, lambda: GPT(config))
    trainer.run(args, model, layout, MODEL_FLAGS,
                lambda m: f"gpt: {m.num_parameters()} parameters, {args.n_layer} layers, "
                          f"{args.n_embd} channels, {args.n_head} heads, block {args.block_size}")


if __name__ == "__main__":
    main()
