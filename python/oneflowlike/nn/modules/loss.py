"""Loss modules: CrossEntropyLoss and MSELoss."""

import oneflowlike as flow
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module

_REDUCTIONS = ("mean", "sum", "none")


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss with class-index targets: input (N, C) or (N, C, d1, ...),
    target (N,) or (N, d1, ...) int32/int64; ``weight``, ``ignore_index`` (-100 by default, as
    torch; None: every target is a class), ``reduction`` and ``label_smoothing`` as in
    F.cross_entropy."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"[CrossEntropyLoss] reduction must be one of {_REDUCTIONS}. "
                             f"However, got {reduction!r}.")
        self.weight = weight
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):  # noqa: A002 (torch's names)
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(Module):
    """The mean squared error, as torch.nn.MSELoss (F.mse_loss)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"[MSELoss] reduction must be one of {_REDUCTIONS}. However, got "
                             f"{reduction!r}.")
        self.reduction = reduction

    def forward(self, input, target):  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)
