"""Sample text from a GPT that train.py trained and saved (common/sampling.py):

    .venv/bin/python examples/gpt/train.py --steps 300 --save /tmp/gpt
    .venv/bin/python examples/gpt/sample.py /tmp/gpt --prompt "In the beginning" --tokens 200
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

from common import sampling  # noqa: E402
from common.sampling import generate  # noqa: E402,F401 (tests reach it as sample.generate)
from model import GPT, GPTConfig  # noqa: E402


def build(saved):
    """The GPT of a train.py run's arguments."""
    return GPT(GPTConfig(block_size=saved["block_size"], n_layer=saved["n_layer"],
                         n_head=saved["n_head"], n_embd=saved["n_embd"], bias=saved["bias"],
                         tied_head=saved["tied_head"]))


def load_model(checkpoint, device="cpu"):
    return sampling.load(checkpoint, build, device)


if __name__ == "__main__":
    from train import COLUMN, ROW  # noqa: E402  train.py's tensor-parallel splits

    sampling.main(build, column=COLUMN, row=ROW)
