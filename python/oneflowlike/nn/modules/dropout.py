"""Dropout: random zeroing while training, the identity in eval mode."""

from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module


class Dropout(Module):
    """torch.nn.Dropout: in training mode zeroes each element with probability ``p`` (from
    flow's generator) and scales the others by 1 / (1 - p); returns the input in eval mode."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"[Dropout] p must be in [0, 1]. However, got {p}.")
        if inplace:
            raise NotImplementedError(
                "[Dropout] inplace=True is not supported: ops never write their inputs here")
        self.p = p
        self.inplace = inplace

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"
