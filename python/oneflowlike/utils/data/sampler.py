"""Samplers: the order in which a DataLoader visits a dataset's indices."""

import numpy as np


class Sampler:
    """Yields dataset indices; ``set_epoch(e)`` (when defined) picks epoch e's order."""

    def __iter__(self):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.n = len(data_source)

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


class RandomSampler(Sampler):
    """A permutation per epoch drawn from (seed, epoch): the same on every rank and in every run
    with that seed, so a resumed run can find its place. (torch's draws a fresh seed per epoch
    from its global generator; the values differ from torch's.)"""

    def __init__(self, data_source, seed=0):
        self.n = len(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist())

    def __len__(self):
        return self.n
