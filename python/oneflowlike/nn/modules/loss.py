"""Loss modules: CrossEntropyLoss and MSELoss."""

import oneflowlike as flow
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module

_REDUCTIONS = ("mean", "sum", "none")


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss with class-index targets: input (N, C) or (N, C, d1, ...),
    target (N,) or (N, d1, ...) int32/int64.

    Targets equal to ``ignore_index`` (-100 by default, as torch) add no loss and no gradient
    and are not counted by the mean; ``ignore_index=None`` skips that masking. Class weights
    and label smoothing are not supported (nor by F.cross_entropy).
    """

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"[CrossEntropyLoss] reduction must be one of {_REDUCTIONS}. "
                             f"However, got {reduction!r}.")
        if weight is not None or label_smoothing != 0.0:
            raise NotImplementedError(
                "[CrossEntropyLoss] class weights and label smoothing are not supported; got "
                f"weight={'a tensor' if weight is not None else None}, "
                f"label_smoothing={label_smoothing!r}")
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(self, input, target):  # noqa: A002 (torch's names)
        if self.ignore_index is None:
            return F.cross_entropy(input, target, reduction=self.reduction)
        # The fused op takes labels in [0, C) only: ignored positions look up class 0 and are
        # zeroed afterwards. The mask comes from ops, so this also traces into a graph.
        if getattr(target, "is_global", False):  # eager on global tensors: a global constant
            ignore = flow.full((), self.ignore_index, dtype=target.dtype,
                               placement=target.placement,
                               sbp=(flow.sbp.broadcast,) * len(target.placement.hierarchy))
        else:
            ignore = flow.full((), self.ignore_index, dtype=target.dtype)
        keep = target != ignore  # (N, d1, ...) bool
        loss = F.cross_entropy(input, flow.where(keep, target, 0), reduction="none")
        loss = flow.where(keep, loss, 0.0)
        if self.reduction == "none":
            return loss
        total = loss.sum()
        if self.reduction == "sum":
            return total
        return total / keep.to(loss.dtype).sum()


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
