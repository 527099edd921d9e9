"""softmax and log_softmax along one dimension."""

from oneflowlike import _C

__all__ = ["softmax", "log_softmax"]


def _dim(dim):
    # torch's F.softmax without dim picks a legacy default; here it means the last axis.
    return -1 if dim is None else int(dim)


def softmax(input, dim=None):
    """exp(input) / sum(exp(input)) along ``dim`` (the last axis when None)."""
    return _C.softmax(input, _dim(dim))


def log_softmax(input, dim=None):
    """input - log(sum(exp(input))) along ``dim`` (the last axis when None)."""
    return _C.log_softmax(input, _dim(dim))


TENSOR_METHODS = {
    "softmax": softmax,
    "log_softmax": log_softmax,
}

NN_FUNCTIONAL = {
    "softmax": softmax,
    "log_softmax": log_softmax,
}
