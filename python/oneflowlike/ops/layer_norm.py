"""Layer normalisation over the trailing dimensions."""

import numbers

import numpy as np

from oneflowlike import _C
from oneflowlike.ops.core import tensor

__all__ = []


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm: normalise over the trailing ``normalized_shape`` axes,
    then scale by ``weight`` and shift by ``bias`` (ones and zeros when None)."""
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(d) for d in normalized_shape)
    shape = tuple(input.shape)
    n = len(normalized_shape)
    if n == 0 or n > len(shape) or shape[len(shape) - n:] != normalized_shape:
        raise ValueError(
            "[layer_norm] normalized_shape must be a non-empty match of the trailing dims of "
            f"input. However, got normalized_shape {normalized_shape} and input {shape}."
        )
    if weight is None:
        weight = tensor(np.ones(normalized_shape), dtype=input.dtype)
    if bias is None:
        bias = tensor(np.zeros(normalized_shape), dtype=input.dtype)
    return _C.layer_norm(input, weight, bias, len(shape) - n, float(eps))[0]


TENSOR_METHODS = {}

NN_FUNCTIONAL = {
    "layer_norm": layer_norm,
}
