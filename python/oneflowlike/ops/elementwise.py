"""Arithmetic and comparison with broadcasting, and the Tensor operators built on them.

A Python number operand becomes a scalar op (x + 2 is scalar_add, 2 / x is 2 * x ** -1), so
it never allocates a tensor; mixed tensor dtypes are promoted as in torch.
"""

import numbers

from oneflowlike import _C
from oneflowlike.ops import scalar as _scalar

__all__ = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "eq",
           "ne", "gt", "lt", "ge", "le"]


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


def ge(input, other):  # noqa: A002
    return ne(lt(input, other), True)


def le(input, other):  # noqa: A002
    return ne(gt(input, other), True)


def _promote_pair(input, other):
    if _is_number(input):
        input = _as_tensor(input, other)
    if _is_number(other):
        other = _as_tensor(other, input)
    return input, other


subtract = sub
multiply = mul
divide = div
true_divide = div


def _reverse(fn):
    return lambda self, other: fn(other, self)


TENSOR_METHODS = {
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
}
