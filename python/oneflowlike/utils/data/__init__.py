"""flow.utils.data: datasets, samplers and a DataLoader with torch.utils.data's names.

- ``Dataset``, ``TensorDataset``, ``TokenDataset`` (a memory-mapped flat token file, nanoGPT's
  ``.bin``);
- ``SequentialSampler``, ``RandomSampler`` (seeded, one permutation per epoch),
  ``DistributedSampler`` (each data-parallel rank its shard, torch's partition rule);
- ``DataLoader``: batches, shuffling with a seed, ``drop_last``, loading ahead in worker
  processes (``get_worker_info``), collation to tensors, and a position (``state_dict``) that
  checkpoints carry so a resumed run sees the batches an uninterrupted one would.
"""

from oneflowlike.utils.data.collate import default_collate
from oneflowlike.utils.data.dataloader import DataLoader
from oneflowlike.utils.data.dataset import Dataset, TensorDataset
from oneflowlike.utils.data.distributed import DistributedSampler
from oneflowlike.utils.data.sampler import RandomSampler, Sampler, SequentialSampler
from oneflowlike.utils.data.token_dataset import TokenDataset
from oneflowlike.utils.data.worker import WorkerInfo, get_worker_info

__all__ = ["Dataset", "TensorDataset", "TokenDataset", "Sampler", "SequentialSampler",
           "RandomSampler", "DistributedSampler", "DataLoader", "default_collate", "get_worker_info",
           "WorkerInfo"]
