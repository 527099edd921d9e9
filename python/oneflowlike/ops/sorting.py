"""Orders along one dim: argmax/argmin, topk, sort/argsort (max/min with a dim are in reduce.py),
the Python side of oneflowlike/ops/sort.h.

Each is one op giving (values, indices) (Note [Orders and ties] in oneflowlike/ops/sort.h):
ties go to the smaller index, so argmax is the first maximum (torch on the CPU) and sort is
stable (torch's ``stable=True``; ``stable=False`` gives the stable order too, one of the orders
it allows); NaN counts as larger than every number.
"""

from oneflowlike import _C
from oneflowlike import return_types

__all__ = ["argmax", "argmin", "topk", "sort", "argsort"]


def _arg_extremum(op, input, dim, keepdim):  # noqa: A002
    if dim is None:  # over all elements, as torch: a 0-d index (all-ones shape with keepdim)
        flat = _C.reshape(input, (-1,))
        index = op(flat, 0, False)[1]
        return _C.reshape(index, (1,) * len(input.shape)) if keepdim else index
    return op(input, dim, keepdim)[1]


def argmax(input, dim=None, keepdim=False):  # noqa: A002 (torch's names)
    """The index of the first maximum along ``dim`` (of the flattened input when None), int64;
    NaN counts as the maximum."""
    return _arg_extremum(_C.max_dim, input, dim, keepdim)


def argmin(input, dim=None, keepdim=False):  # noqa: A002
    """The index of the first minimum along ``dim`` (of the flattened input when None), int64;
    NaN counts as the minimum, as torch.min propagates it."""
    return _arg_extremum(_C.min_dim, input, dim, keepdim)


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """(values, indices) of the ``k`` largest (``largest=False``: smallest) values along ``dim``,
    always in order (so ``sorted=False`` gives the sorted order too); equal values by index."""
    return return_types.topk(*_C.topk(input, k, dim, largest, sorted))


def sort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    """(values, indices): ``input`` sorted along ``dim``; stable (equal values keep their order,
    descending too), NaN last ascending and first descending, as torch."""
    return return_types.sort(*_C.sort(input, dim, descending, stable))


def argsort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    """The indices of ``sort``."""
    return _C.sort(input, dim, descending, stable)[1]


TENSOR_METHODS = {"argmax": argmax, "argmin": argmin, "topk": topk, "sort": sort,
                  "argsort": argsort}
