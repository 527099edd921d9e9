"""Rearrangements with torch's names: flip, roll, repeat and repeat_interleave; and the zigzag order of a sequence
that balances causal attention over context-parallel ranks (F.zigzag, F.unzigzag).

Composed of index_select, slices, cat, expand and reshape, so their SBP signatures, CUDA kernels
and gradients are those ops'. Each result is a copy (torch's flip and repeat copy too; torch's
roll as well).
"""

import operator

from oneflowlike import _C
from oneflowlike.ops.core import device_of, own_copy
from oneflowlike.ops.shape_ops import _dim, _slice_along

__all__ = ["flip", "roll", "repeat_interleave"]


def _dims(op, dims, ndim):
    if isinstance(dims, int):
        dims = (dims,)
    dims = [_dim(d, max(ndim, 1), op) for d in dims]
    if len(set(dims)) != len(dims):
        raise ValueError(f"[{op}] dims must differ. However, got {tuple(dims)}.")
    return dims


def flip(input, dims):  # noqa: A002 (torch's names)
    """``input`` with the order of its elements reversed along each of ``dims``."""
    out = input
    for d in _dims("flip", dims, input.ndim):
        n = input.shape[d] if input.ndim else 1
        if n > 1:
            reverse = _C.arange(float(n - 1), -1.0, -1.0, _C.dtype.int64, device_of(input))
            out = _C.index_select(out, d, reverse)
    return out if out is not input else own_copy(input)  # a copy, as torch's


def roll(input, shifts, dims=None):  # noqa: A002
    """Elements shifted by ``shifts`` along ``dims``, those leaving one end coming back at the
    other; without dims, over the flattened tensor, keeping its shape."""
    if dims is None:
        if isinstance(shifts, (tuple, list)) and len(shifts) == 1:
            shifts = shifts[0]
        if not isinstance(shifts, int):
            raise ValueError(f"[roll] without dims takes one int shift. However, got {shifts!r}.")
        flat = _C.reshape(input, (input.numel(),))
        return _C.reshape(roll(flat, shifts, 0), tuple(input.shape))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = _dims("roll", dims, input.ndim)
    if len(shifts) != len(dims):
        raise ValueError(f"[roll] takes one shift per dim. However, got shifts {shifts} and "
                         f"dims {tuple(dims)}.")
    out = input
    for shift, d in zip(shifts, dims):
        n = input.shape[d]
        s = operator.index(shift) % n if n else 0
        if s:
            out = _C.concat([_slice_along(out, d, n - s, n), _slice_along(out, d, 0, n - s)], d)
    return out if out is not input else own_copy(input)  # a copy, as torch's


def repeat(self, *sizes):
    """Tensor.repeat: ``self`` tiled ``sizes[i]`` times along each axis (leading sizes add
    axes), as torch's."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(operator.index(s) for s in sizes)
    if len(sizes) < self.ndim:
        raise ValueError(f"[repeat] takes at least one size per dim of the {self.ndim}-d tensor. "
                         f"However, got {sizes}.")
    if any(s < 0 for s in sizes):
        raise ValueError(f"[repeat] sizes must be non-negative. However, got {sizes}.")
    shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
    # (r0, s0, r1, s1, ...) from (1, s0, 1, s1, ...), then the pairs merged.
    spread = tuple(v for s in shape for v in (1, s))
    tiled = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    out = _C.expand(_C.reshape(self, spread), tiled)
    return _C.reshape(out, tuple(r * s for r, s in zip(sizes, shape)))


def repeat_interleave(input, repeats, dim=None):  # noqa: A002
    """torch.repeat_interleave with an int ``repeats``: each element repeated that many times in
    a row along ``dim`` (without dim, of the flattened tensor), e.g. key/value heads spread
    over the query heads of grouped-query attention. Per-element repeats (a tensor) are not
    supported."""
    try:
        if isinstance(repeats, bool):
            raise TypeError
        r = operator.index(repeats)
    except TypeError:
        raise TypeError(f"[repeat_interleave] repeats must be an int (a tensor of repeats per "
                        f"element is not supported). However, got {type(repeats).__name__}."
                        ) from None
    if r < 0:
        raise ValueError(f"[repeat_interleave] repeats must be non-negative. However, got {r}.")
    if dim is None:
        input, d = _C.reshape(input, (input.numel(),)), 0
    else:
        d = _dim(dim, max(input.ndim, 1), "repeat_interleave")
        if input.ndim == 0:
            input = _C.reshape(input, (1,))
    shape = tuple(input.shape)
    spread = _C.reshape(input, shape[:d + 1] + (1,) + shape[d + 1:])
    out = _C.expand(spread, shape[:d + 1] + (r,) + shape[d + 1:])
    return _C.reshape(out, shape[:d] + (shape[d] * r,) + shape[d + 1:])


def _zigzag_chunks(op, input, dim, n):
    """(axis, chunk length) of ``input``'s ``dim`` cut in 2n chunks, checked."""
    from oneflowlike.ops.attention import _zigzag_pieces  # noqa: PLC0415  one check of n

    n = _zigzag_pieces(op, n, least=1)
    d = _dim(dim, input.ndim, op)
    if input.shape[d] % (2 * n):
        raise ValueError(f"[{op}] n = {n} cuts dim {dim} in {2 * n} chunks: its size must be a "
                         f"multiple of {2 * n}. However, got shape {tuple(input.shape)}.")
    return d, input.shape[d] // (2 * n)


def _chunks_in_order(input, d, chunk, order):
    return _C.concat([_slice_along(input, d, c * chunk, (c + 1) * chunk) for c in order], d)


def zigzag(input, dim, n):  # noqa: A002
    """``input`` with axis ``dim`` (a sequence) in the order that balances causal attention over
    ``n`` contiguous pieces (Note [Zigzag order] in oneflowlike/ops/attention.h): cut in 2n
    chunks, stored as chunks 0, 2n-1, 1, 2n-2, ..., n-1, n, so piece i holds chunks i and
    2n-1-i. n = 1 keeps the order (a copy). Slices and a concat: their SBP, kernels and
    gradients."""
    d, chunk = _zigzag_chunks("zigzag", input, dim, n)
    order = [s // 2 if s % 2 == 0 else 2 * n - 1 - s // 2 for s in range(2 * n)]
    return _chunks_in_order(input, d, chunk, order)


def unzigzag(input, dim, n):  # noqa: A002
    """The inverse of ``zigzag``: axis ``dim`` back in the sequence's order."""
    d, chunk = _zigzag_chunks("unzigzag", input, dim, n)
    stored_at = [2 * c if c < n else 2 * (2 * n - 1 - c) + 1 for c in range(2 * n)]
    return _chunks_in_order(input, d, chunk, stored_at)


NN_FUNCTIONAL = {"zigzag": zigzag, "unzigzag": unzigzag}

TENSOR_METHODS = {"flip": lambda self, *dims: flip(self, dims[0] if len(dims) == 1 else dims),
                  "roll": roll, "repeat": repeat, "repeat_interleave": repeat_interleave}
