"""Byte-level data: the text is its own tokenization (vocabulary 256). ByteData: each step samples
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


class TokenBatches:
    """Training batches from a flat token file (prepare_tokens.py writes one) through
    flow.utils.data: a TokenDataset of block_size windows, a DistributedSampler giving this
    rank's data-parallel index its shard (ranks that differ only in tp or pp share it), and a
    DataLoader prefetching on a background thread (slicing a memory map releases the GIL: a
    worker process would cost more than it saves, docs/benchmarks.md). Each rank loads only its
    rows. The loader's
    position goes into checkpoints (Note [Loader position] in flow.utils.data.DataLoader)."""

    def __init__(self, path, block_size, batch_size, dp, dp_index, seed):
        data = flow.utils.data
        dataset = data.TokenDataset(path, block_size)
        sampler = data.DistributedSampler(dataset, num_replicas=dp, rank=dp_index, shuffle=True,
                                          seed=seed, drop_last=True)
        self.loader = data.DataLoader(dataset, batch_size=batch_size // dp, sampler=sampler,
                                      drop_last=True, num_workers=1,
                                      worker_type="thread")
        if len(self.loader) == 0:
            raise ValueError(f"the token file {path!r} has {len(dataset)} windows of "
                             f"{block_size}: fewer than one batch of {batch_size}.")
        self._batches = None

    def next(self):
        """This rank's (tokens, targets) of the next step: int64 tensors (batch / dp, block)."""
        while True:
            if self._batches is None:
                self._batches = iter(self.loader)  # the next epoch, or the rest of this one
            try:
                return next(self._batches)
            except StopIteration:
                self._batches = None

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)
        self._batches = None
