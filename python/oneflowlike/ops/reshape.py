"""Shape views: reshape, view, flatten, squeeze, unsqueeze, expand."""

from oneflowlike import _C

__all__ = ["reshape", "flatten", "squeeze", "unsqueeze", "expand", "broadcast_to"]


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def reshape(input, shape):  # noqa: A002
    return _C.reshape(input, tuple(shape))


def flatten(input, start_dim=0, end_dim=-1):  # noqa: A002
    nd = max(input.ndim, 1)
    start = start_dim + nd if start_dim < 0 else start_dim
    end = end_dim + nd if end_dim < 0 else end_dim
    if not (0 <= start <= end < nd):
        raise IndexError(
            f"[flatten] start_dim {start_dim} and end_dim {end_dim} must be ordered dims of a "
            f"{input.ndim}-d tensor")
    shape = list(input.shape) or [1]
    merged = 1
    for d in shape[start:end + 1]:
        merged *= d
    return _C.reshape(input, tuple(shape[:start] + [merged] + shape[end + 1:]))


def squeeze(input, dim=None):  # noqa: A002
    shape = list(input.shape)
    if dim is None:
        return _C.reshape(input, tuple(d for d in shape if d != 1))
    d = dim + input.ndim if dim < 0 else dim
    if not 0 <= d < max(input.ndim, 1):
        raise IndexError(f"[squeeze] dim {dim} is out of range for a {input.ndim}-d tensor")
    if input.ndim == 0 or shape[d] != 1:
        return input
    return _C.reshape(input, tuple(shape[:d] + shape[d + 1:]))


def unsqueeze(input, dim):  # noqa: A002
    nd = input.ndim + 1
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < nd:
        raise IndexError(f"[unsqueeze] dim {dim} is out of range for a {input.ndim}-d tensor "
                         f"(expected in [{-nd}, {nd - 1}])")
    shape = list(input.shape)
    return _C.reshape(input, tuple(shape[:d] + [1] + shape[d:]))


def expand(input, *sizes):  # noqa: A002
    from oneflowlike.ops.shape_ops import copy_not_view

    return copy_not_view(_C.expand(input, _shape_args(sizes)), input)


def broadcast_to(input, shape):  # noqa: A002
    from oneflowlike.ops.shape_ops import copy_not_view

    return copy_not_view(_C.expand(input, tuple(shape)), input)


TENSOR_METHODS = {
    "reshape": lambda self, *shape: _C.reshape(self, _shape_args(shape)),
    "view": lambda self, *shape: _C.reshape(self, _shape_args(shape)),
    "flatten": flatten,
    "squeeze": squeeze,
    "unsqueeze": unsqueeze,
    "expand": expand,
    "expand_as": lambda self, other: expand(self, *other.shape),
    "reshape_as": lambda self, other: _C.reshape(self, other.shape),
    "view_as": lambda self, other: _C.reshape(self, other.shape),
}
