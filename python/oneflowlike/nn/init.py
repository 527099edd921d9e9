"""flow.nn.init: fill a parameter in place (as torch.nn.init), from flow's generator."""

from oneflowlike import _C

__all__ = ["normal_", "uniform_", "zeros_", "ones_", "constant_"]


def _fill(tensor, value):
    _C._copy_(tensor, value.detach() if value.requires_grad else value)
    return tensor


def normal_(tensor, mean=0.0, std=1.0):
    return _fill(tensor, _C.normal(float(mean), float(std), tuple(tensor.shape), tensor.dtype))


def uniform_(tensor, a=0.0, b=1.0):
    return _fill(tensor, _C.uniform(float(a), float(b), tuple(tensor.shape), tensor.dtype))


def constant_(tensor, value):
    return _fill(tensor, _C.fill(tuple(tensor.shape), tensor.dtype, float(value)))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)
