"""one_hot: class indices as one-hot rows (torch.nn.functional.one_hot).

Composed of an equality between the indices and an arange, so its shape and SBP signatures are
those ops' (a split of the indices splits the result alike); it has no gradient (integers).
"""

import builtins

from oneflowlike import _C
from oneflowlike.ops.core import device_of

__all__ = []


def one_hot(tensor, num_classes=-1):
    """(..., num_classes) int64 with a 1 at each index of ``tensor`` (int64 class indices in
    [0, num_classes)). num_classes=-1 reads the largest index, which needs the values: inside
    nn.Graph.build pass num_classes."""
    if tensor.dtype != _C.dtype.int64:
        raise TypeError(f"[one_hot] needs int64 class indices. However, got {tensor.dtype!r}.")
    if isinstance(num_classes, builtins.bool) or not isinstance(num_classes, builtins.int):
        raise TypeError(f"[one_hot] num_classes must be an int. However, got {num_classes!r}.")
    if num_classes == -1:
        if tensor.is_lazy:
            raise ValueError("[one_hot] num_classes=-1 reads the largest index, which a traced "
                             "value (in nn.Graph.build, or an op on global tensors) does not "
                             "have: pass num_classes.")
        num_classes = int(_C.reduce_max(tensor, [], False).item()) + 1 if tensor.numel() else 0
    elif num_classes < 1:
        raise ValueError(f"[one_hot] num_classes must be positive or -1. However, got "
                         f"{num_classes}.")
    if not tensor.is_lazy and tensor.numel():
        low = int(_C.neg(_C.reduce_max(_C.neg(tensor), [], False)).item())
        high = int(_C.reduce_max(tensor, [], False).item())
        if low < 0 or high >= num_classes:
            raise ValueError(f"[one_hot] class indices must lie in [0, {num_classes}). However, "
                             f"got values in [{low}, {high}].")
    classes = _C.arange(0.0, float(num_classes), 1.0, _C.dtype.int64, device_of(tensor))
    hits = _C.eq(_C.reshape(tensor, tuple(tensor.shape) + (1,)), classes)
    return _C.cast(hits, _C.dtype.int64)


NN_FUNCTIONAL = {"one_hot": one_hot}
TENSOR_METHODS = {}
