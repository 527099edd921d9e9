"""Sample text from a LLaMA that train.py trained and saved (common/sampling.py):

    .venv/bin/python examples/llama/train.py --steps 300 --save /tmp/llama
    .venv/bin/python examples/llama/sample.py /tmp/llama --prompt "In the beginning"
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

from common import sampling  # noqa: E402
from common.sampling import generate  # noqa: E402,F401 (tests reach it as sample.generate)
from llama_model import Llama, config_from_flags  # noqa: E402


def build(saved):
    """The LLaMA of a train.py run's arguments."""
    return Llama(config_from_flags(saved))


def load_model(checkpoint, device="cpu"):
    return sampling.load(checkpoint, build, device)


if __name__ == "__main__":
    from train import COLUMN, ROW  # noqa: E402  train.py's tensor-parallel splits

    sampling.main(build, column=COLUMN, row=ROW)
