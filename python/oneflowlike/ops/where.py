"""Selection by a bool tensor: where(condition, input, other) and masked_fill."""

import numbers

from oneflowlike import _C

__all__ = ["where", "masked_fill"]


def _is_number(x):
    return isinstance(x, numbers.Number) and not isinstance(x, _C.Tensor)


def _number_like(value, like):
    """A 0-d tensor for a number operand: like's dtype, or float32 when a float meets an
    integer or bool tensor (where() then promotes the tensor, as torch does)."""
    if isinstance(value, float) and not like.dtype.is_floating_point:
        return _C.fill((), _C.dtype.float32, value)
    return _C.fill((), like.dtype, float(value))


def _number_pair(a, b):
    if isinstance(a, float) or isinstance(b, float):
        dtype = _C.dtype.float32
    elif isinstance(a, bool) and isinstance(b, bool):
        dtype = _C.dtype.bool
    else:
        dtype = _C.dtype.int64
    return _C.fill((), dtype, float(a)), _C.fill((), dtype, float(b))


def where(condition, input=None, other=None):  # noqa: A002 (torch's names)
    """``input`` where ``condition`` (bool) is true, else ``other``; all three broadcast.
    ``input`` and ``other`` may be Python numbers."""
    if input is None or other is None:
        raise NotImplementedError(
            "[where] where(condition) with one argument (the indices of nonzeros) is not "
            "supported; pass input and other"
        )
    if _is_number(input) and _is_number(other):
        input, other = _number_pair(input, other)
    elif _is_number(input):
        input = _number_like(input, other)
    elif _is_number(other):
        other = _number_like(other, input)
    return _C.where(condition, input, other)


def masked_fill(input, mask, value):  # noqa: A002
    """``input`` with ``value`` wherever ``mask`` (bool, broadcast to input's shape) is true."""
    if isinstance(value, _C.Tensor):
        if value.numel() != 1:
            raise ValueError(
                "[masked_fill] value must be a number or a one-element tensor. However, got a "
                f"tensor of shape {value.shape}"
            )
        value = value.item()
    return _C.masked_fill(input, mask, value)


TENSOR_METHODS = {
    "where": lambda self, condition, other: where(condition, self, other),
    "masked_fill": masked_fill,
}
