"""Loss modules with torch's names, each calling its F. function."""

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


def _loss_module(name, function, *fields, doc):
    """A Module whose forward(input, target) is F.function(input, target, **its fields)."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        bound = dict(zip([f for f, _ in fields], args))
        unknown = set(kwargs) - {f for f, _ in fields}
        if unknown or len(args) > len(fields):
            raise TypeError(f"[{name}] takes {[f for f, _ in fields]}. However, got "
                            f"{len(args)} positional and {sorted(kwargs)}.")
        for field, default in fields:
            setattr(self, field, kwargs.get(field, bound.get(field, default)))

    def forward(self, input, target):  # noqa: A002
        return getattr(F, function)(input, target, **{f: getattr(self, f) for f, _ in fields})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__doc__": doc})


L1Loss = _loss_module("L1Loss", "l1_loss", ("reduction", "mean"), doc="F.l1_loss as a module.")
SmoothL1Loss = _loss_module("SmoothL1Loss", "smooth_l1_loss", ("reduction", "mean"),
                            ("beta", 1.0), doc="F.smooth_l1_loss as a module.")
HuberLoss = _loss_module("HuberLoss", "huber_loss", ("reduction", "mean"), ("delta", 1.0),
                         doc="F.huber_loss as a module.")
BCELoss = _loss_module("BCELoss", "binary_cross_entropy", ("weight", None),
                       ("reduction", "mean"), doc="F.binary_cross_entropy as a module.")
BCEWithLogitsLoss = _loss_module("BCEWithLogitsLoss", "binary_cross_entropy_with_logits",
                                 ("weight", None), ("reduction", "mean"), ("pos_weight", None),
                                 doc="F.binary_cross_entropy_with_logits as a module.")
NLLLoss = _loss_module("NLLLoss", "nll_loss", ("weight", None), ("ignore_index", -100),
                       ("reduction", "mean"), doc="F.nll_loss as a module.")
KLDivLoss = _loss_module("KLDivLoss", "kl_div", ("reduction", "mean"), ("log_target", False),
                         doc="F.kl_div as a module.")
