"""Reductions: sum, mean, amax/amin, max/min, var/std, logsumexp, all/any (over all axes or
some); max/min with a dim give (values, indices) through the max_dim/min_dim ops
(oneflowlike/ops/sort.h).

var, std, logsumexp, all, any and the elementwise forms of max/min are composed of the
reduction ops and elementwise ops, so their shapes, SBP signatures and gradients are those ops'.
"""

import builtins
import numbers

from oneflowlike import _C
from oneflowlike import return_types

__all__ = ["sum", "mean", "amax", "amin", "max", "min", "var", "std", "logsumexp", "all", "any"]


def _axes(dim):
    if isinstance(dim, builtins.bool):
        raise TypeError(f"[reduce] dim must be an int or a sequence of ints. However, got "
                        f"{dim!r}.")
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


def amin(input, dim=None, keepdim=False):  # noqa: A002
    return _C.reduce_min(input, _axes(dim), keepdim)


def max(input, dim=None, keepdim=False):  # noqa: A001,A002
    """The maximum of all elements; with an int ``dim``, (values, indices) along it as torch
    (``flow.return_types.max``: the first maximum's index, NaN winning); with a tensor, the
    elementwise maximum of two tensors."""
    if isinstance(dim, _C.Tensor) or getattr(dim, "is_global", False):
        return _elementwise_extremum(input, dim, _C.gt)
    if dim is not None:
        return return_types.max(*_C.max_dim(input, dim, keepdim))
    return _C.reduce_max(input, [], False)


def min(input, dim=None, keepdim=False):  # noqa: A001,A002
    """The minimum of all elements; with an int ``dim``, (values, indices) along it as torch;
    with a tensor, the elementwise minimum of two tensors (``min(a, b)``)."""
    if isinstance(dim, _C.Tensor) or getattr(dim, "is_global", False):
        return _elementwise_extremum(input, dim, _C.lt)
    if dim is not None:
        return return_types.min(*_C.min_dim(input, dim, keepdim))
    return amin(input)


def _elementwise_extremum(a, b, better):
    """b where better(b, a), else a, with NaN from either side winning, as torch.maximum."""
    pick = _C.where(better(b, a), b, a)
    return _C.where(_C.eq(b, b), pick, b)  # b != b: b is NaN


def _count(input, dim, op):
    """How many elements each result of reducing over ``dim`` gathers."""
    shape = tuple(input.shape)
    if not shape:
        return 1
    axes = range(len(shape)) if dim is None else _axes(dim)
    n = 1
    for a in {a % len(shape) if -len(shape) <= a < len(shape) else a for a in axes}:
        if not 0 <= a < len(shape):
            raise IndexError(f"[{op}] dim {a} is out of range for a {len(shape)}-d tensor.")
        n *= shape[a]
    return n


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """The variance over ``dim`` (all when None): sum((x - mean)^2) / (N - correction), with
    torch's default correction 1 (unbiased); ``unbiased=False`` is correction 0. As torch's
    overload, ``var(False)`` is ``var(unbiased=False)``."""
    if isinstance(dim, builtins.bool):  # torch.var(input, unbiased)
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ValueError("[var] give unbiased or correction, not both.")
    if correction is None:
        correction = 0 if unbiased is False else 1
    if not isinstance(correction, numbers.Number):
        raise TypeError(f"[var] correction must be a number. However, got {correction!r}.")
    if not input.dtype.is_floating_point:
        raise TypeError(f"[var] needs a floating-point tensor. However, got {input.dtype!r}.")
    n = _count(input, dim, "var")
    centred = _C.sub(input, _C.reduce_mean(input, _axes(dim), True))
    squares = _C.reduce_sum(_C.mul(centred, centred), _axes(dim), keepdim)
    denominator = builtins.max(n - correction, 0)
    if denominator == 0:  # torch gives nan (inf * 0), with a warning
        return _C.scalar_mul(squares, float("nan"))
    return _C.scalar_mul(squares, 1.0 / denominator)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """sqrt(var(...)) with var's arguments (``std(False)`` too)."""
    return _C.sqrt(var(input, dim, unbiased, keepdim, correction=correction))


def logsumexp(input, dim, keepdim=False):  # noqa: A002
    """log(sum(exp(input))) over ``dim`` (an int or a sequence), without overflow: each slice is
    shifted by its maximum first, a constant for autograd, so the gradient is softmax(input),
    as torch's. A slice whose maximum is infinite is not shifted (all -inf gives -inf, a +inf
    gives +inf); integers sum as float32, as torch."""
    from oneflowlike.ops.nonfinite import isinf
    from oneflowlike.ops.where import masked_fill

    if not input.dtype.is_floating_point:
        input = _C.cast(input, _C.dtype.float32)  # noqa: A001
    axes = _axes(dim)
    shift = _C.reduce_max(input, axes, True).detach()
    shift = masked_fill(shift, isinf(shift), 0.0)
    total = _C.reduce_sum(_C.exp(_C.sub(input, shift)), axes, keepdim)
    return _C.add(_C.log(total), shift if keepdim else _C.reshape(shift, tuple(total.shape)))


def _false():
    return _C.fill((), _C.dtype.bool, 0.0)


def _as_bool(input):
    """input != 0 (bool tensors as they are)."""
    if input.dtype == _C.dtype.bool:
        return input
    return _C.eq(_C.eq(input, _C.fill((), input.dtype, 0.0)), _false())


def _over_nothing(input, dim, keepdim, value):
    """any/all over an empty axis, as torch: False / True (a max over nothing is refused)."""
    axes = _axes(dim)
    shape = list(input.shape)
    if not shape or builtins.any(not isinstance(a, int) or not -len(shape) <= a < len(shape)
                        for a in axes):
        return None  # 0-d, or a bad dim: the reduction's own checks speak
    reduced = set(range(len(shape))) if not axes else {a % len(shape) for a in axes}
    if builtins.all(shape[a] != 0 for a in reduced):
        return None
    if keepdim:
        out = [1 if a in reduced else n for a, n in enumerate(shape)]
    else:
        out = [n for a, n in enumerate(shape) if a not in reduced]
    return _C.fill(tuple(out), _C.dtype.bool, float(value))


def any(input, dim=None, keepdim=False):  # noqa: A001,A002
    """Whether some element (over ``dim``) is nonzero; a bool tensor."""
    empty = _over_nothing(input, dim, keepdim, False)
    if empty is not None:
        return empty
    return _C.reduce_max(_as_bool(input), _axes(dim), keepdim)


def all(input, dim=None, keepdim=False):  # noqa: A001,A002
    """Whether every element (over ``dim``) is nonzero; a bool tensor."""
    empty = _over_nothing(input, dim, keepdim, True)
    if empty is not None:
        return empty
    some_false = _C.reduce_max(_C.eq(_as_bool(input), _false()), _axes(dim), keepdim)
    return _C.eq(some_false, _false())


TENSOR_METHODS = {"sum": sum, "mean": mean, "amax": amax, "amin": amin, "max": max, "min": min,
                  "logsumexp": logsumexp,
                  "var": var, "std": std, "all": all, "any": any}
