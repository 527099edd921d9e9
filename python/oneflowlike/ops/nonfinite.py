"""isnan, isinf, isfinite and nan_to_num (torch's names): the checks a training loop makes on
losses and gradients, and the replacement of what they find.

Composed of comparisons and where (NaN is the one value unequal to itself; an infinity minus
itself is NaN), so every dtype, device, layout and graph has them; nan_to_num's gradient flows
to the elements it keeps. Integer tensors hold no NaN or infinity.
"""

import numpy as np

from oneflowlike import _C
from oneflowlike.ops.core import device_of, own_copy
from oneflowlike.ops.elementwise import ne

__all__ = ["isnan", "isinf", "isfinite", "nan_to_num"]

# The largest finite value of each floating dtype (torch's nan_to_num default for infinities).
_LARGEST = {"float16": float(np.finfo(np.float16).max), "bfloat16": 3.3895313892515355e38,
            "float32": float(np.finfo(np.float32).max),
            "float64": float(np.finfo(np.float64).max)}


def _floating(t):
    return t.dtype.is_floating_point


def _all(input, value):  # noqa: A002
    return _C.fill(tuple(input.shape), _C.dtype.bool, value, device_of(input))


def isnan(input):  # noqa: A002 (torch's names)
    """True where ``input`` is NaN."""
    return ne(input, input) if _floating(input) else _all(input, 0.0)


def isinf(input):  # noqa: A002
    """True where ``input`` is +inf or -inf."""
    if not _floating(input):
        return _all(input, 0.0)
    inf = _C.fill((), input.dtype, float("inf"), device_of(input))
    return _C.eq(_C.abs(input), inf)


def isfinite(input):  # noqa: A002
    """True where ``input`` is neither NaN nor infinite."""
    if not _floating(input):
        return _all(input, 1.0)
    return _C.eq(_C.sub(input, input), _C.fill((), input.dtype, 0.0, device_of(input)))


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):  # noqa: A002
    """``input`` with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (by
    default the dtype's largest finite value and its negative)."""
    if not _floating(input):
        return own_copy(input)  # a copy, as torch's
    largest = _LARGEST[input.dtype.name]
    device = device_of(input)
    inf = _C.fill((), input.dtype, float("inf"), device)

    def value(v, default):
        return _C.fill((), input.dtype, float(default if v is None else v), device)

    out = _C.where(ne(input, input), value(nan, 0.0), input)
    out = _C.where(_C.eq(out, inf), value(posinf, largest), out)
    return _C.where(_C.eq(out, _C.neg(inf)), value(neginf, -largest), out)


TENSOR_METHODS = {"isnan": isnan, "isinf": isinf, "isfinite": isfinite, "nan_to_num": nan_to_num}
