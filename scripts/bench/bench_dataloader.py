"""DataLoader worker processes against torch's DataLoader, measured side by side.

    .venv/bin/python scripts/bench/bench_dataloader.py [--workers 0 1 2] [--repeats 3]

The dataset's ``__getitem__`` does Python work (a byte-pair count over a window of the corpus,
the kind of tokenizing a loader does on the fly) and returns int64 arrays, so the GIL-bound part
is what worker processes take off the training loop. One epoch of ``--batches`` batches of 16
samples, timed from iter() (worker start included) to the last batch; each side's loader is
built from the same dataset class, in the same process, alternating. Reports ms per epoch and
the ratio torch / ours (> 1: ours faster).
"""

import argparse
import pathlib
import statistics
import time

import numpy as np

_CORPUS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "data" / \
    "kjv-genesis-deuteronomy.txt"


class PairCounts:
    """Sample i: the window of 2,048 bytes at i * 512, and for each byte the count of its pair
    with the next byte within the window, counted in Python."""

    def __init__(self, samples):
        self.text = _CORPUS.read_bytes()
        self.samples = samples

    def __len__(self):
        return self.samples

    def __getitem__(self, i):
        start = (i * 512) % (len(self.text) - 2049)
        window = self.text[start:start + 2049]
        counts = {}
        for a, b in zip(window, window[1:]):
            counts[(a, b)] = counts.get((a, b), 0) + 1
        tokens = np.frombuffer(window[:-1], dtype=np.uint8).astype(np.int64)
        pairs = np.array([counts[(a, b)] for a, b in zip(window, window[1:])], dtype=np.int64)
        return tokens, pairs


def epoch(loader):
    start = time.perf_counter()
    n = 0
    for tokens, _ in loader:
        n += int(tokens.shape[0])
    return 1e3 * (time.perf_counter() - start), n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch

    import oneflowlike as flow

    dataset = PairCounts(16 * args.batches)
    print(f"# DataLoader epoch of {args.batches} batches of 16 (Python work per sample), "
          f"{args.repeats} repeats; {time.strftime('%Y-%m-%d')}")
    for workers in args.workers:
        times = {"ours": [], "torch": []}
        for _ in range(args.repeats):
            ours = flow.utils.data.DataLoader(dataset, batch_size=16, num_workers=workers)
            theirs = torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=workers)
            for side, loader in (("ours", ours), ("torch", theirs)):
                ms, n = epoch(loader)
                assert n == 16 * args.batches
                times[side].append(ms)
        ours, theirs = (statistics.median(times[s]) for s in ("ours", "torch"))
        print(f"num_workers {workers}: ours {ours:.0f} ms, torch {theirs:.0f} ms, torch/ours "
              f"{theirs / ours:.2f}")


if __name__ == "__main__":
    main()
