"""Arithmetic and comparison with broadcasting, and the Tensor operators built on them.

A Python number operand becomes a scalar op (x + 2 is scalar_add, 2 / x is 2 * x ** -1), so
it never allocates a tensor; mixed tensor dtypes are promoted as in torch.
"""

import numbers

from oneflowlike import _C
from oneflowlike.ops import scalar as _scalar

__all__ = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "eq",
           "ne", "gt", "lt", "ge", "le", "clamp", "clip", "clamp_min", "clamp_max", "isclose",
           "allclose", "logical_and", "logical_or", "logical_xor", "logical_not"]


def _is_number(x):
    return isinstance(x, numbers.Number) and not isinstance(x, _C.Tensor)


def _float_for(x, s):
    """Integer tensors meet float numbers as float32, as in torch."""
    if isinstance(s, float) and not x.dtype.is_floating_point:
        return _C.cast(x, _C.dtype.float32)
    return x


def _as_tensor(value, like):
    from oneflowlike.ops.core import as_tensor_like

    return as_tensor_like(value, like)


def add(input, other, alpha=1):  # noqa: A002 (torch's names)
    if _is_number(other):
        return _scalar.scalar_add(_float_for(input, other), other * alpha)
    if _is_number(input):
        return add(other, input)
    if alpha != 1:
        other = _scalar.scalar_mul(other, alpha)
    return _C.add(input, other)


def sub(input, other, alpha=1):  # noqa: A002
    if _is_number(other):
        return _scalar.scalar_add(_float_for(input, other), -other * alpha)
    if _is_number(input):
        return _scalar.scalar_add(_scalar.scalar_mul(other, -1), input)
    if alpha != 1:
        other = _scalar.scalar_mul(other, alpha)
    return _C.sub(input, other)


def mul(input, other):  # noqa: A002
    if _is_number(other):
        return _scalar.scalar_mul(_float_for(input, other), other)
    if _is_number(input):
        return mul(other, input)
    return _C.mul(input, other)


def div(input, other):  # noqa: A002
    """True division; integer tensors divide as float32, as in torch."""
    if _is_number(other):
        x = input if input.dtype.is_floating_point else _C.cast(input, _C.dtype.float32)
        return _scalar.scalar_mul(x, 1.0 / other)
    if _is_number(input):
        x = other if other.dtype.is_floating_point else _C.cast(other, _C.dtype.float32)
        return _scalar.scalar_mul(_scalar.scalar_pow(x, -1.0), input)
    if not input.dtype.is_floating_point and not other.dtype.is_floating_point:
        input, other = _C.cast(input, _C.dtype.float32), _C.cast(other, _C.dtype.float32)
    return _C.div(input, other)


def _compare(fn):
    def compare(input, other):  # noqa: A002
        if _is_number(input):
            input = _as_tensor(input, other)
        if _is_number(other):
            other = _as_tensor(other, input)
        return fn(input, other)

    return compare


eq = _compare(_C.eq)
gt = _compare(_C.gt)
lt = _compare(_C.lt)


def ne(input, other):  # noqa: A002
    return _C.eq(_C.eq(*_promote_pair(input, other)), _C.fill((), _C.dtype.bool, 0.0))


def _either(a, b):
    return _C.where(a, _C.fill((), _C.dtype.bool, 1.0), b)


# a >= b is a > b or a == b, not "not a < b": NaN compares false both ways, as in torch.
def ge(input, other):  # noqa: A002
    input, other = _promote_pair(input, other)
    return _either(_C.gt(input, other), _C.eq(input, other))


def le(input, other):  # noqa: A002
    input, other = _promote_pair(input, other)
    return _either(_C.lt(input, other), _C.eq(input, other))


def _promote_pair(input, other):
    if _is_number(input):
        input = _as_tensor(input, other)
    if _is_number(other):
        other = _as_tensor(other, input)
    return input, other


def _bound(value, like, op):
    if _is_number(value):
        dtype = like.dtype if (like.dtype.is_floating_point or isinstance(value, int)) \
            else _C.dtype.float32
        return _C.fill((), dtype, float(value))
    if isinstance(value, _C.Tensor) or getattr(value, "is_global", False):
        return value
    raise TypeError(f"[{op}] bounds must be numbers or tensors. However, got "
                    f"{type(value).__name__}.")


def clamp(input, min=None, max=None):  # noqa: A001,A002 (torch's names)
    """Each element limited to [min, max] (numbers or tensors that broadcast); elements below
    min become min, then those above max become max, so min > max gives max, as in torch. NaN
    stays NaN. The gradient flows where the element was kept."""
    if min is None and max is None:
        raise ValueError("[clamp] needs min or max (or both). However, got neither.")
    out = input
    if min is not None:
        if _is_number(min):
            out = _float_for(out, min)
        lo = _bound(min, out, "clamp")
        out = _C.where(_C.lt(out, lo), lo, out)
    if max is not None:
        if _is_number(max):
            out = _float_for(out, max)
        hi = _bound(max, out, "clamp")
        out = _C.where(_C.gt(out, hi), hi, out)
    return out


clip = clamp


def clamp_min(input, min):  # noqa: A001,A002
    """clamp(input, min=min)."""
    return clamp(input, min=min)


def clamp_max(input, max):  # noqa: A001,A002
    """clamp(input, max=max)."""
    return clamp(input, max=max)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Elementwise input == other or |input - other| <= atol + rtol * |other| (torch's
    formula); NaNs are close to each other only with ``equal_nan``. A bool tensor."""
    if not (input.dtype.is_floating_point and other.dtype.is_floating_point):
        input, other = _C.cast(input, _C.dtype.float64), _C.cast(other, _C.dtype.float64)
    tolerance = _scalar.scalar_add(_scalar.scalar_mul(_C.abs(other), float(rtol)), float(atol))
    within = le(_C.abs(_C.sub(input, other)), tolerance)
    # An infinite other makes the tolerance infinite: only an equal value is close to it.
    finite = _C.eq(_C.sub(other, other), _C.fill((), other.dtype, 0.0))
    false = _C.fill((), _C.dtype.bool, 0.0)
    close = _C.where(_C.eq(input, other), _C.fill((), _C.dtype.bool, 1.0),
                     _C.where(finite, within, false))
    if equal_nan:
        both_nan = _C.where(ne(input, input), ne(other, other), _C.fill((), _C.dtype.bool, 0.0))
        close = _C.where(both_nan, _C.fill((), _C.dtype.bool, 1.0), close)
    return close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Whether every element of input is close to other's (isclose); a Python bool. On global
    tensors every rank of the placement must call it (it reads the value)."""
    import oneflowlike as flow  # the flow-level functions, which also take global tensors

    return bool(flow.all(flow.isclose(input, other, rtol=rtol, atol=atol, equal_nan=equal_nan)))


def _truth(x):
    """``x`` as a bool tensor: itself, x != 0 for other dtypes (torch's logical ops), or a
    number's truth."""
    if _is_number(x):
        return _C.fill((), _C.dtype.bool, float(bool(x)))
    return x if x.dtype == _C.dtype.bool else ne(x, 0)


def logical_and(input, other):  # noqa: A002
    """Elementwise ``input and other`` (nonzero is true), broadcast; a bool tensor."""
    a, b = _truth(input), _truth(other)
    return _C.where(a, b, _C.fill((), _C.dtype.bool, 0.0))


def logical_or(input, other):  # noqa: A002
    """Elementwise ``input or other`` (nonzero is true), broadcast; a bool tensor."""
    a, b = _truth(input), _truth(other)
    return _C.where(a, _C.fill((), _C.dtype.bool, 1.0), b)


def logical_xor(input, other):  # noqa: A002
    """Elementwise: exactly one of input and other is true (nonzero); a bool tensor."""
    return ne(_truth(input), _truth(other))


def logical_not(input):  # noqa: A002
    """Elementwise ``not input`` (nonzero is true); a bool tensor."""
    return _C.eq(_truth(input), _C.fill((), _C.dtype.bool, 0.0))


def _bool_operator(name, fn):
    """The operator ``name`` (&, |, ^) of bool tensors: ``fn``; on other dtypes torch's bitwise
    operation, which this library does not have, is refused naming the dtype rather than run as
    a logical one (3 & 6 is 2, not True)."""
    def operator(self, other):
        for x in (self, other):
            dtype = bool if _is_number(x) and isinstance(x, bool) else getattr(x, "dtype", None)
            if dtype not in (bool, _C.dtype.bool):
                got = type(x).__name__ if dtype is None else dtype
                raise TypeError(f"[{name}] works on bool tensors (masks) only: bitwise operations "
                                f"on other dtypes are not supported. However, got {got}. Compare "
                                f"first (x != 0), or use flow.logical_and/or/xor.")
        return fn(self, other)

    return operator


def _invert(self):
    if self.dtype != _C.dtype.bool:
        raise TypeError(f"[__invert__] ~ works on bool tensors (masks) only: bitwise not of "
                        f"other dtypes is not supported. However, got {self.dtype}. Use "
                        f"flow.logical_not.")
    return logical_not(self)


subtract = sub
multiply = mul
divide = div
true_divide = div


def _reverse(fn):
    return lambda self, other: fn(other, self)


TENSOR_METHODS = {
    "clamp": clamp,
    "clip": clamp,
    "clamp_min": clamp_min,
    "clamp_max": clamp_max,
    "isclose": isclose,
    "allclose": allclose,
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "eq": eq,
    "ne": ne,
    "gt": gt,
    "lt": lt,
    "ge": ge,
    "le": le,
    "__add__": add,
    "__radd__": _reverse(add),
    "__sub__": sub,
    "__rsub__": _reverse(sub),
    "__mul__": mul,
    "__rmul__": _reverse(mul),
    "__truediv__": div,
    "__rtruediv__": _reverse(div),
    "__eq__": eq,
    "__ne__": ne,
    "__gt__": gt,
    "__lt__": lt,
    "__ge__": ge,
    "__le__": le,
    "__hash__": lambda self: id(self),
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_xor": logical_xor,
    "logical_not": logical_not,
    "__and__": _bool_operator("__and__", logical_and),
    "__rand__": _bool_operator("__rand__", logical_and),
    "__or__": _bool_operator("__or__", logical_or),
    "__ror__": _bool_operator("__ror__", logical_or),
    "__xor__": _bool_operator("__xor__", logical_xor),
    "__rxor__": _bool_operator("__rxor__", logical_xor),
    "__invert__": _invert,
}
