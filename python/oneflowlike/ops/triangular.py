"""tril and triu: the lower or upper triangle of the last two axes (torch.tril, torch.triu),
the rest zero; causal masks are built with them.

Composed of two aranges, a comparison and a where, so their shapes, SBP signatures, CUDA kernels
and gradient (the kept elements') are those ops'.
"""

from oneflowlike import _C
from oneflowlike.ops.core import device_of
from oneflowlike.ops.elementwise import le

__all__ = ["tril", "triu"]


def _triangle(op, input, diagonal, lower):  # noqa: A002
    if input.ndim < 2:
        raise ValueError(f"[{op}] needs a tensor of at least 2 dims (a matrix or a batch of "
                         f"them). However, got shape {tuple(input.shape)}.")
    if isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise TypeError(f"[{op}] diagonal must be an int. However, got {diagonal!r}.")
    rows, cols = input.shape[-2], input.shape[-1]
    device = device_of(input)
    row = _C.reshape(_C.arange(0.0, float(rows), 1.0, _C.dtype.int64, device), (rows, 1))
    col = _C.arange(float(-diagonal), float(cols - diagonal), 1.0, _C.dtype.int64, device)
    # Element (i, j) is kept where j - i <= diagonal (tril) or >= diagonal (triu).
    keep = le(col, row) if lower else le(row, col)
    return _C.where(keep, input, _C.fill((), input.dtype, 0.0, device))


def tril(input, diagonal=0):  # noqa: A002 (torch's names)
    """The elements on and below the ``diagonal``-th diagonal of the last two axes (0: the main
    one, positive: above it, negative: below it); the others zero."""
    return _triangle("tril", input, diagonal, True)


def triu(input, diagonal=0):  # noqa: A002
    """The elements on and above the ``diagonal``-th diagonal of the last two axes; the others
    zero."""
    return _triangle("triu", input, diagonal, False)


TENSOR_METHODS = {"tril": tril, "triu": triu}
