"""mse_loss: the mean squared error (torch.nn.functional.mse_loss), composed of sub, mul and a
reduction, so its SBP signatures and gradient are those ops'."""

from oneflowlike import _C

__all__ = []

_REDUCTIONS = ("mean", "sum", "none")


def mse_loss(input, target, reduction="mean"):  # noqa: A002 (torch's names)
    """(input - target)^2, averaged ("mean"), summed ("sum") or kept ("none"); the shapes must
    be equal (torch only warns when they broadcast, which is rarely what was meant)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"[mse_loss] reduction must be one of {_REDUCTIONS}. However, got "
                         f"{reduction!r}.")
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"[mse_loss] input and target must have one shape. However, got input "
                         f"{tuple(input.shape)} and target {tuple(target.shape)}.")
    diff = _C.sub(input, target)
    squares = _C.mul(diff, diff)
    if reduction == "mean":
        return _C.reduce_mean(squares, [], False)
    if reduction == "sum":
        return _C.reduce_sum(squares, [], False)
    return squares


NN_FUNCTIONAL = {"mse_loss": mse_loss}
TENSOR_METHODS = {}
