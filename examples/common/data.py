"""Byte-level data: the text is its own tokenization (vocabulary 256). Each step samples
batch_size windows of block_size + 1 bytes at places drawn from (seed, step), the same on every
rank; each data-parallel rank keeps only its rows (flow.tensor with an S(0) placement slices
locally, nothing is sent)."""

import numpy as np

import oneflowlike as flow


class ByteData:
    def __init__(self, path=None, block_size=64, seed=1, synthetic=False):
        if synthetic:
            rng = np.random.default_rng(seed)
            self.data = rng.integers(0, 256, 1 << 16).astype(np.uint8)
        else:
            with open(path, "rb") as f:
                self.data = np.frombuffer(f.read(), dtype=np.uint8)
        if len(self.data) < block_size + 2:
            raise ValueError(f"the data ({len(self.data)} bytes) is shorter than a block.")
        self.block_size = block_size
        self.seed = seed

    def batch(self, step, batch_size):
        """(tokens, targets), each (batch_size, block_size) int64 numpy arrays."""
        rng = np.random.default_rng([self.seed, step])
        # A window is block_size + 1 bytes: the last start is len - block_size - 1 (inclusive).
        starts = rng.integers(0, len(self.data) - self.block_size, batch_size)
        rows = np.stack([self.data[s:s + self.block_size + 1] for s in starts]).astype(np.int64)
        return rows[:, :-1].copy(), rows[:, 1:].copy()

    @staticmethod
    def to_global(array, placement, sbp):
        return flow.tensor(array, placement=placement, sbp=sbp)
