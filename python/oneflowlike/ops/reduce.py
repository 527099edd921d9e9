"""Reductions: sum, mean, amax, max (over all axes or some)."""

from oneflowlike import _C

__all__ = ["sum", "mean", "amax", "max"]


def _axes(dim):
    if dim is None:
        return []
    if isinstance(dim, int):
        return [dim]
    return list(dim)


def sum(input, dim=None, keepdim=False):  # noqa: A001,A002 (torch's names)
    """Sum over ``dim`` (an int, a sequence, or None for all)."""
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        return input
    return _C.reduce_sum(input, _axes(dim), keepdim)


def mean(input, dim=None, keepdim=False):  # noqa: A002
    return _C.reduce_mean(input, _axes(dim), keepdim)


def amax(input, dim=None, keepdim=False):  # noqa: A002
    return _C.reduce_max(input, _axes(dim), keepdim)


def max(input, dim=None, keepdim=False):  # noqa: A001,A002
    """The maximum of all elements. With ``dim``, torch also returns indices; that form is not
    available yet (there is no argmax op): use amax for the values."""
    if dim is not None:
        raise NotImplementedError(
            "[max] max(input, dim) returns (values, indices) in torch, and indices are not "
            "available yet; use flow.amax(input, dim) for the values")
    return _C.reduce_max(input, [], False)


TENSOR_METHODS = {"sum": sum, "mean": mean, "amax": amax, "max": max}
