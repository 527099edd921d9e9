"""Index ops along a dim: gather (torch.gather) and index_select.

Both are differentiable in ``input`` (their gradients scatter-add into zeros, deterministically),
not in ``index``; an index outside [0, input.shape[dim]) raises IndexError.
"""

import numpy as np

from oneflowlike import _C

__all__ = ["gather", "index_select"]


def _as_index(op, index):
    """A tensor as it is; a list, tuple or NumPy array made into one (int64)."""
    if isinstance(index, _C.Tensor) or getattr(index, "is_global", False):
        return index
    if isinstance(index, (list, tuple, np.ndarray)):
        from oneflowlike.ops.core import tensor

        return tensor(index)
    raise TypeError(f"[{op}] index must be a tensor of int32 or int64 indices (or a list of "
                    f"ints). However, got {type(index).__name__} {index!r:.40}.")


def gather(input, dim, index, *, sparse_grad=False):  # noqa: A002 (torch's names)
    """``out[i][j][k] = input[index[i][j][k]][j][k]`` for dim 0 (and so on): ``index`` int32/int64
    of ``input``'s rank, no larger than ``input`` on the other dims; out is shaped like index."""
    if sparse_grad:
        raise NotImplementedError("[gather] sparse_grad=True is not supported: the gradient is "
                                  "a dense tensor.")
    return _C.gather(input, dim, _as_index("gather", index))


def index_select(input, dim, index):  # noqa: A002
    """The slices of ``input`` along ``dim`` picked by a 1-d int32/int64 ``index``."""
    return _C.index_select(input, dim, _as_index("index_select", index))


TENSOR_METHODS = {"gather": gather, "index_select": index_select}
