"""Vector norms: flow.norm, Tensor.norm and flow.linalg.vector_norm (torch's names) over all
elements or over ``dim``, for p = 2 (the default), 1, inf, -inf, 0 and any other real p.

Composed of abs, powers and reductions, so every device, layout and graph has them. The
2-norm's gradient at a zero vector is 0, as torch's (sqrt's derivative there is infinite, and
the composed form would give 0 * inf = NaN): the square root reads 1 where the sum is 0, and
where() passes that branch no gradient.
"""

import math

from oneflowlike import _C
from oneflowlike.ops.core import device_of
from oneflowlike.ops.elementwise import ne
from oneflowlike.ops.reduce import _axes

__all__ = ["norm"]


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002 (torch's names)
    """(sum |x|^ord)^(1/ord) over ``dim`` (all elements when None); ord inf / -inf: the largest /
    smallest |x|; ord 0: the number of nonzero elements."""
    if not x.dtype.is_floating_point:
        raise TypeError(f"[vector_norm] takes a floating tensor. However, got {x.dtype!r}.")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"[vector_norm] ord must be a number. However, got {ord!r}.")
    if dtype is not None:
        x = _C.cast(x, dtype)
    if x.dtype in (_C.dtype.float16, _C.dtype.bfloat16):
        # As torch: 16-bit values are summed in float32 (their squares overflow float16 from
        # 256 on), and the norm rounded back once.
        return _C.cast(vector_norm(_C.cast(x, _C.dtype.float32), ord, dim, keepdim), x.dtype)
    axes = _axes(dim)
    a = _C.abs(x)
    if ord == math.inf:
        return _C.reduce_max(a, axes, keepdim)
    if ord == -math.inf:
        return _C.reduce_min(a, axes, keepdim)
    zero = _C.fill((), x.dtype, 0.0, device_of(x))
    if ord == 0:  # a count: its gradient is zero (torch's), through the product by 0
        count = _C.reduce_sum(_C.cast(ne(x, zero), x.dtype), axes, keepdim)
        return _C.add(count, _C.reduce_sum(_C.scalar_mul(a, 0.0), axes, keepdim))
    if ord == 1:
        return _C.reduce_sum(a, axes, keepdim)
    if ord == 2:
        s = _C.reduce_sum(_C.mul(x, x), axes, keepdim)
        positive = _C.gt(s, zero)
        one = _C.fill((), x.dtype, 1.0, device_of(x))
        return _C.where(positive, _C.sqrt(_C.where(positive, s, one)), zero)
    return _C.scalar_pow(_C.reduce_sum(_C.scalar_pow(a, float(ord)), axes, keepdim),
                         1.0 / float(ord))


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):  # noqa: A002
    """torch.norm for vector norms: p "fro" or 2 (the default), 1, inf, -inf, 0 or any real
    number, over ``dim`` (an int or a tuple of ints; all elements when None). Matrix norms
    ("nuc", or a number over two dims) are not supported."""
    if p == "fro":
        p = 2
    elif isinstance(p, str):
        raise NotImplementedError(f"[norm] p={p!r} (a matrix norm) is not supported; vector "
                                  "norms take p a number, or 'fro'.")
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


def normalize(input, p=2.0, dim=1, eps=1e-12):  # noqa: A002
    """input / max(||input||_p over dim, eps) (torch.nn.functional.normalize)."""
    n = vector_norm(input, p, dim, keepdim=True)
    return _C.div(input, _C.where(_C.lt(n, _C.fill((), n.dtype, eps, device_of(n))),
                                  _C.fill((), n.dtype, eps, device_of(n)), n))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """The cosine of the angle between x1 and x2 along dim (they broadcast), each normalised
    by max(its 2-norm, eps) first, as torch."""
    return (normalize(x1, 2.0, dim, eps) * normalize(x2, 2.0, dim, eps)).sum(dim)


TENSOR_METHODS = {"norm": norm}
NN_FUNCTIONAL = {"normalize": normalize, "cosine_similarity": cosine_similarity}
