"""default_collate: a list of samples to one batch of tensors."""

import numbers

import numpy as np


def _stack(values):
    from oneflowlike import tensor

    array = np.stack([v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in values])
    if array.dtype == np.float64:
        array = array.astype(np.float32)  # as torch: Python floats batch to the default dtype
    elif array.dtype.kind in "ui" and array.dtype != np.int32:
        array = array.astype(np.int64)
    return tensor(array)


def default_collate(batch):
    """As torch.utils.data.default_collate: samples that are tensors, arrays or numbers stack
    into one tensor (integers to int64, floats to float32); tuples and lists collate each
    position, dicts each key."""
    if not batch:
        raise ValueError("[default_collate] got an empty batch.")
    first = batch[0]
    if isinstance(first, dict):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, (tuple, list)):
        if any(len(sample) != len(first) for sample in batch):
            raise ValueError("[default_collate] every sample must have as many fields. However, "
                             f"got lengths {sorted({len(s) for s in batch})}.")
        return type(first)(default_collate(list(field)) for field in zip(*batch))
    if isinstance(first, (numbers.Number, np.ndarray, np.generic)) or hasattr(first, "numpy"):
        return _stack(batch)
    raise TypeError(f"[default_collate] cannot batch samples of type {type(first).__name__}: "
                    "pass a collate_fn.")
