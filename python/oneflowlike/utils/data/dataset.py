"""Map-style datasets: anything with ``__getitem__`` and ``__len__``."""

import numpy as np


class Dataset:
    """The base of map-style datasets (torch.utils.data.Dataset): subclasses define
    ``__getitem__(index)`` and ``__len__()``."""

    def __getitem__(self, index):
        raise NotImplementedError(f"[Dataset] {type(self).__name__} must define __getitem__.")

    def __len__(self):
        raise NotImplementedError(f"[Dataset] {type(self).__name__} must define __len__.")


class TensorDataset(Dataset):
    """Samples are rows: item i is the tuple of each tensor's (or array's) row i."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("[TensorDataset] needs at least one tensor.")
        self.arrays = [t.numpy() if hasattr(t, "numpy") else np.asarray(t) for t in tensors]
        lengths = {len(a) for a in self.arrays}
        if len(lengths) != 1:
            raise ValueError(f"[TensorDataset] every tensor must have as many rows. However, got "
                             f"{[len(a) for a in self.arrays]}.")

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])
