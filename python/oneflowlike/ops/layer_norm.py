"""Layer normalisation over the trailing dimensions."""

import numbers

from oneflowlike import _C

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
    # Fill ops, not tensors from data: inside a trace they are part of the graph, not constants.
    if weight is None:
        weight = _C.fill(normalized_shape, input.dtype, 1.0)
    if bias is None:
        bias = _C.fill(normalized_shape, input.dtype, 0.0)
    return _C.layer_norm(input, weight, bias, len(shape) - n, float(eps))[0]


TENSOR_METHODS = {}

NN_FUNCTIONAL = {
    "layer_norm": layer_norm,
}
