"""DistributedSampler: each data-parallel rank its shard of the dataset."""

import math

import numpy as np

from oneflowlike.utils.data.sampler import Sampler


class DistributedSampler(Sampler):
    """torch.utils.data.DistributedSampler's partition: the (shuffled, with seed + epoch)
    indices, padded by wrapping around to a multiple of ``num_replicas`` (or cut down to one with
    ``drop_last``), and rank r takes every num_replicas-th from r. Without shuffling the shards
    are torch's exactly; with it, the permutation is numpy's (torch's generator differs).

    ``num_replicas`` and ``rank`` default to the job's world size and rank; in a layout with
    tensor or pipeline parallelism pass the data-parallel ones (ranks that hold the same data
    shard get the same indices)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        from oneflowlike import env

        num_replicas = env.get_world_size() if num_replicas is None else int(num_replicas)
        rank = env.get_rank() if rank is None else int(rank)
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"[DistributedSampler] rank must be in [0, num_replicas). However, "
                             f"got rank {rank} and num_replicas {num_replicas}.")
        self.n = len(dataset)
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.epoch = 0
        if drop_last and self.n % num_replicas:
            self.num_samples = self.n // num_replicas
        else:
            self.num_samples = math.ceil(self.n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(self.n).tolist()
        else:
            indices = list(range(self.n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            pad = self.total_size - len(indices)
            while pad > 0:  # wrap around, as torch (several times for tiny datasets)
                indices += indices[:pad]
                pad = self.total_size - len(indices)
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
