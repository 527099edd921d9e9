"""Tokenizes a text file into a flat uint16 token file (nanoGPT's .bin format) for
``train.py --data-bin``: byte-level tokens (vocabulary 256, the examples' models'), so any text
works without a vocabulary file.

    .venv/bin/python examples/common/prepare_tokens.py examples/data/kjv-genesis-deuteronomy.txt \\
        /tmp/kjv.bin
"""

import argparse
import os

import numpy as np


def tokenize(text_bytes):
    """The byte-level tokens of ``text_bytes`` as uint16."""
    return np.frombuffer(text_bytes, dtype=np.uint8).astype(np.uint16)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("text", help="the text file to tokenize")
    p.add_argument("out", help="the .bin file to write")
    args = p.parse_args(argv)
    with open(args.text, "rb") as f:
        tokens = tokenize(f.read())
    tmp = args.out + ".tmp"
    tokens.tofile(tmp)
    os.replace(tmp, args.out)  # never a half-written file under the final name
    print(f"{args.out}: {len(tokens)} tokens (uint16, vocabulary 256)")


if __name__ == "__main__":
    main()
