"""Normalisation over the trailing dimensions: layer_norm and rms_norm."""

import numbers

from oneflowlike import _C
from oneflowlike.ops.core import device_of

__all__ = []

# torch.finfo(dtype).eps: rms_norm's default epsilon, as torch.nn.functional.rms_norm's.
_MACHINE_EPSILON = {
    _C.dtype.float32: 2.0 ** -23,
    _C.dtype.float64: 2.0 ** -52,
    _C.dtype.float16: 2.0 ** -10,
    _C.dtype.bfloat16: 2.0 ** -7,
}


def _normalized_shape(op, input, normalized_shape):  # noqa: A002
    """normalized_shape as a tuple, checked against input's trailing dims."""
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(d) for d in normalized_shape)
    shape = tuple(input.shape)
    n = len(normalized_shape)
    if n == 0 or n > len(shape) or shape[len(shape) - n:] != normalized_shape:
        raise ValueError(
            f"[{op}] normalized_shape must be a non-empty match of the trailing dims of "
            f"input. However, got normalized_shape {normalized_shape} and input {shape}."
        )
    return normalized_shape


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """torch.nn.functional.layer_norm: normalise over the trailing ``normalized_shape`` axes,
    then scale by ``weight`` and shift by ``bias`` (ones and zeros when None)."""
    normalized_shape = _normalized_shape("layer_norm", input, normalized_shape)
    # Fill ops, not tensors from data: inside a trace they are part of the graph, not constants.
    if weight is None:
        weight = _C.fill(normalized_shape, input.dtype, 1.0, device_of(input))
    if bias is None:
        bias = _C.fill(normalized_shape, input.dtype, 0.0, device_of(input))
    begin = len(input.shape) - len(normalized_shape)
    return _C.layer_norm(input, weight, bias, begin, float(eps))[0]


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the trailing
    ``normalized_shape`` axes, times ``weight`` (ones when None); ``eps`` None is the dtype's
    machine epsilon, as torch."""
    normalized_shape = _normalized_shape("rms_norm", input, normalized_shape)
    if eps is None:
        if input.dtype not in _MACHINE_EPSILON:
            raise TypeError(f"[rms_norm] input must have a floating dtype. However, got "
                            f"{input.dtype}.")
        eps = _MACHINE_EPSILON[input.dtype]
    if weight is None:
        weight = _C.fill(normalized_shape, input.dtype, 1.0, device_of(input))
    begin = len(input.shape) - len(normalized_shape)
    return _C.rms_norm(input, weight, begin, float(eps))[0]


TENSOR_METHODS = {}

NN_FUNCTIONAL = {
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
}
