"""Activation modules: ReLU, SiLU, GELU, Tanh, Softmax, and Identity."""

from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module

_GELU_APPROXIMATIONS = ("none", "tanh")


class ReLU(Module):
    """max(x, 0), as torch.nn.ReLU."""

    def __init__(self, inplace=False):
        super().__init__()
        if inplace:
            raise NotImplementedError(
                "[ReLU] inplace=True is not supported: ops never write their inputs here")
        self.inplace = inplace

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.relu(input)


class SiLU(Module):
    """x * sigmoid(x), as torch.nn.SiLU."""

    def __init__(self, inplace=False):
        super().__init__()
        if inplace:
            raise NotImplementedError(
                "[SiLU] inplace=True is not supported: ops never write their inputs here")
        self.inplace = inplace

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.silu(input)


class GELU(Module):
    """x * Phi(x), as torch.nn.GELU; ``approximate="tanh"`` uses
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in _GELU_APPROXIMATIONS:
            raise ValueError(f"[GELU] approximate must be one of {_GELU_APPROXIMATIONS}. "
                             f"However, got {approximate!r}.")
        self.approximate = approximate

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    """tanh(x), as torch.nn.Tanh."""

    def forward(self, input):  # noqa: A002
        return F.tanh(input)


class Softmax(Module):
    """softmax over ``dim``, as torch.nn.Softmax (dim must be given: torch's implicit choice
    is deprecated)."""

    def __init__(self, dim=None):
        super().__init__()
        if dim is None or isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"[Softmax] dim must be an int (the axis that sums to 1). However, "
                             f"got {dim!r}.")
        self.dim = dim

    def forward(self, input):  # noqa: A002
        return F.softmax(input, dim=self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Identity(Module):
    """Returns its input (arguments to the constructor are ignored, as torch.nn.Identity)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input
