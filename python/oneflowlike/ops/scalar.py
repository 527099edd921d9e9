"""Tensor-scalar arithmetic (the number operands of +, *, ** and pow).

scalar_add and scalar_mul are what the operators of elementwise.py call for a Python number;
``tensor ** number`` and ``number ** tensor`` are defined here.
"""

import numbers

from oneflowlike import _C

__all__ = ["scalar_add", "scalar_mul", "scalar_pow", "scalar_rpow", "pow"]


def _is_number(x):
    return isinstance(x, numbers.Number) and not isinstance(x, _C.Tensor)


def _float_for(x, s):
    """Integer tensors meet float numbers as float32, as in torch (int + 2.0 is float)."""
    if isinstance(s, float) and not x.dtype.is_floating_point:
        return _C.cast(x, _C.dtype.float32)
    return x


def scalar_add(input, other):  # noqa: A002 (torch's names)
    """input + other for a number ``other``."""
    return _C.scalar_add(_float_for(input, other), other)


def scalar_mul(input, other):  # noqa: A002
    """input * other for a number ``other``."""
    return _C.scalar_mul(_float_for(input, other), other)


def scalar_pow(input, exponent):  # noqa: A002
    """input ** exponent for a number ``exponent`` (integer tensors compute in float32)."""
    return _C.scalar_pow(input, exponent)


def scalar_rpow(input, base):  # noqa: A002
    """base ** input for a number ``base`` (integer tensors compute in float32)."""
    return _C.scalar_rpow(input, base)


def pow(input, exponent):  # noqa: A001,A002
    """input ** exponent where one side is a tensor and the other a Python number."""
    if isinstance(input, _C.Tensor) and _is_number(exponent):
        return scalar_pow(input, exponent)
    if _is_number(input) and isinstance(exponent, _C.Tensor):
        return scalar_rpow(exponent, input)
    if isinstance(input, _C.Tensor) and isinstance(exponent, _C.Tensor):
        raise TypeError(
            "[pow] the exponent or the base must be a Python number: tensor ** tensor is not "
            "supported (there is no binary pow op). However, got two tensors of shapes "
            f"{input.shape} and {exponent.shape}; use exp(exponent * log(input)) instead"
        )
    raise TypeError(
        "[pow] expected a tensor and a number. However, got "
        f"{type(input).__name__} and {type(exponent).__name__}"
    )


def _pow_method(self, exponent):
    return pow(self, exponent)


def _rpow_method(self, base):
    return pow(base, self)


TENSOR_METHODS = {
    "pow": _pow_method,
    "__pow__": _pow_method,
    "__rpow__": _rpow_method,
}
