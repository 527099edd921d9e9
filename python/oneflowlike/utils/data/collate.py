"""default_collate: a list of samples to one batch of tensors."""

import numbers

import numpy as np


def _stack(values):
    from oneflowlike import _C, stack, tensor

    if all(isinstance(v, _C.Tensor) for v in values):
        return stack(values)  # their dtype, bfloat16 and float64 included, as torch
    array = np.stack([v.numpy() if hasattr(v, "numpy") else np.asarray(v) for v in values])
    if array.dtype == np.float64:
        # Python floats and numpy's default float64 arrays batch to the default dtype, so a
        # dataset of np.random arrays feeds a float32 model as it is.
        array = array.astype(np.float32)
    elif array.dtype.kind in "ui" and array.dtype != np.int32:
        array = array.astype(np.int64)  # token ids (uint16 files) batch to what embedding takes
    return tensor(array)


def default_collate(batch):
    """As torch.utils.data.default_collate: samples that are tensors, arrays or numbers stack
    into one tensor (tensors keep their dtype; arrays and numbers: integers other than int32 to
    int64, float64 to float32); tuples and lists collate each position, dicts each key."""
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
