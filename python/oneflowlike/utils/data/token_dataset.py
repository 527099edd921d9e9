"""TokenDataset: training windows of a memory-mapped flat token file (nanoGPT's .bin)."""

import os

import numpy as np

from oneflowlike.utils.data.dataset import Dataset


class TokenDataset(Dataset):
    """A flat file of tokens (``dtype``, uint16 as nanoGPT writes it) read through a memory map:
    item i is (tokens[i*s : i*s + block_size], tokens[i*s + 1 : i*s + block_size + 1]) as int64
    arrays, the inputs and their next-token targets, with stride s = ``stride`` (default
    block_size: windows that do not overlap). Only the pages a batch touches are read."""

    def __init__(self, path, block_size, dtype=np.uint16, stride=None):
        if not os.path.exists(path):
            raise FileNotFoundError(f"[TokenDataset] no token file at {path!r}.")
        self.path, self.block_size = path, int(block_size)
        self.stride = self.block_size if stride is None else int(stride)
        if self.block_size < 1 or self.stride < 1:
            raise ValueError(f"[TokenDataset] block_size and stride must be positive. However, "
                             f"got {block_size} and {stride}.")
        self.tokens = np.memmap(path, dtype=dtype, mode="r")
        if len(self.tokens) < self.block_size + 1:
            raise ValueError(f"[TokenDataset] {path!r} holds {len(self.tokens)} tokens, fewer "
                             f"than one window of block_size + 1 = {self.block_size + 1}.")
        self.n = (len(self.tokens) - self.block_size - 1) // self.stride + 1

    def __getstate__(self):
        # A worker process (Note [Worker processes]) maps the file again: pickling the memory map
        # would copy the whole file into the pickle.
        state = dict(self.__dict__)
        state["tokens"] = None
        state["dtype"] = self.tokens.dtype.str
        return state

    def __setstate__(self, state):
        dtype = state.pop("dtype")
        self.__dict__.update(state)
        self.tokens = np.memmap(self.path, dtype=np.dtype(dtype), mode="r")

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if not -self.n <= index < self.n:
            raise IndexError(f"[TokenDataset] index {index} is out of range for {self.n} windows.")
        start = (index % self.n) * self.stride
        window = np.asarray(self.tokens[start:start + self.block_size + 1], dtype=np.int64)
        return window[:-1], window[1:]
