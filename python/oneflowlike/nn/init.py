"""flow.nn.init: fill a parameter in place (as torch.nn.init), from flow's generator.

Each function writes under no_grad, as torch's do, and works on global tensors too: the
counter-based generator gives every element the value it has in the whole logical tensor, so
each rank makes only its piece of the same numbers whatever the layout (Note [Sharded
creation]). On a meta tensor it records the draw (Note [Meta tensors]).
"""

import math

from oneflowlike import _C
from oneflowlike.ops.core import device_of
from oneflowlike.autograd import no_grad
from oneflowlike.framework import meta

__all__ = ["normal_", "uniform_", "zeros_", "ones_", "constant_", "calculate_gain",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]


def _fill(tensor, value):
    """tensor[...] = value (a local tensor of tensor's logical shape)."""
    if getattr(tensor, "is_global", False):
        from oneflowlike.framework import global_tensor as _gt

        piece = _gt.from_logical(value, tensor.placement, tensor.sbp)._local
        if piece is not None:
            with no_grad():
                _C._assign_(tensor.to_local(), piece, "nn.init")
        return tensor
    with no_grad():
        _C._assign_(tensor, value.detach() if value.requires_grad else value, "nn.init")
    return tensor


def _draw(tensor, kind, a, b):
    """tensor[...] = a draw (kind "normal": mean a, std b; "uniform": [a, b)) from flow's
    generator. A meta tensor records it (Note [Meta tensors]); a global tensor makes only its
    piece (Note [Sharded creation]); both reserve the whole draw, as a local tensor does."""
    shape = tuple(tensor.shape)
    if getattr(tensor, "is_meta", False):
        tensor.init = meta.Init.draw(kind, a, b, shape)
        return tensor
    if getattr(tensor, "is_global", False):
        from oneflowlike.framework import global_tensor as _gt

        region = (_gt.local_region(shape, tensor.placement, tensor.sbp)
                  if tensor.to_local_or_none() is not None else None)
        region_fn = _C.normal_region if kind == "normal" else _C.uniform_region
        piece = _gt.as_addend(region_fn(float(a), float(b), shape, tensor.dtype, region),
                              tensor.placement, tensor.sbp)  # one rank holds a sum
        if piece is not None:
            with no_grad():
                _C._assign_(tensor.to_local(), piece, "nn.init")
        return tensor
    draw = _C.normal if kind == "normal" else _C.uniform
    return _fill(tensor, draw(float(a), float(b), shape, tensor.dtype))


def normal_(tensor, mean=0.0, std=1.0):
    return _draw(tensor, "normal", mean, std)


def uniform_(tensor, a=0.0, b=1.0):
    return _draw(tensor, "uniform", a, b)


def constant_(tensor, value):
    if getattr(tensor, "is_meta", False):
        tensor.init = meta.Init("fill", value)
        return tensor
    if getattr(tensor, "is_global", False) and not any(
            str(s) == "P" for s in tensor.sbp):  # each rank fills its piece
        local = tensor.to_local_or_none()
        if local is not None:
            with no_grad():
                _C._assign_(local, _C.fill(tuple(local.shape), tensor.dtype, float(value),
                                           local.device), "nn.init")
        return tensor
    return _fill(tensor, _C.fill(tuple(tensor.shape), tensor.dtype, float(value),
                                 device_of(tensor)))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (torch.nn.init.calculate_gain's table)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"[calculate_gain] negative_slope must be a number. However, got "
                             f"{slope!r}.")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"[calculate_gain] unsupported nonlinearity {nonlinearity!r}: one of "
                     f"{', '.join(_LINEAR + ('tanh', 'relu', 'leaky_relu', 'selu'))}.")


def _fans(tensor, op):
    """(fan_in, fan_out) of a weight: (out, in, *kernel) as torch's layers lay them out."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError(f"[{op}] needs a tensor with at least 2 dims (fan in and fan out). "
                         f"However, got shape {shape}.")
    receptive = 1
    for d in shape[2:]:
        receptive *= d
    return shape[1] * receptive, shape[0] * receptive


def xavier_uniform_(tensor, gain=1.0):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity, op):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"[{op}] mode must be 'fan_in' or 'fan_out'. However, got {mode!r}.")
    fan_in, fan_out = _fans(tensor, op)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al.); torch's defaults."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """N(0, std^2) with std = gain / sqrt(fan) (He et al.)."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"))
