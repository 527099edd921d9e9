"""Loss modules with torch's names, each calling its F. function."""

from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module

_REDUCTIONS = ("mean", "sum", "none")


def _loss_module(name, function, *fields, doc):
    """A Module whose forward(input, target) is F.function(input, target, **its fields), with
    torch's constructor: its arguments in torch's order, size_average and reduce (deprecated in
    torch) refused unless None, tensors (weight, pos_weight) held as buffers, so that .to(),
    to_global and state_dict carry them, as torch's."""
    names = [f for f, _ in fields]

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(fields) or set(kwargs) - set(names):
            raise TypeError(f"[{name}] takes {names}. However, got {len(args)} positional and "
                            f"{sorted(kwargs)}.")
        given = {**dict(zip(names, args)), **kwargs}
        for legacy in ("size_average", "reduce"):
            if given.get(legacy) is not None:
                raise ValueError(f"[{name}] {legacy} is deprecated in torch and not taken here: "
                                 "pass reduction='mean', 'sum' or 'none'.")
        if given.get("reduction", "mean") not in _REDUCTIONS + (("batchmean",) if name ==
                                                                 "KLDivLoss" else ()):
            raise ValueError(f"[{name}] reduction must be one of {_REDUCTIONS}. However, got "
                             f"{given['reduction']!r}.")
        for field, default in fields:
            if field in ("size_average", "reduce"):
                continue
            value = given.get(field, default)
            if field in ("weight", "pos_weight"):
                self.register_buffer(field, value)
            else:
                setattr(self, field, value)

    def forward(self, input, target):  # noqa: A002
        return getattr(F, function)(input, target, **{
            f: getattr(self, f) for f in names if f not in ("size_average", "reduce")})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__doc__": doc})


_LEGACY = (("size_average", None), ("reduce", None))

CrossEntropyLoss = _loss_module(
    "CrossEntropyLoss", "cross_entropy", ("weight", None), _LEGACY[0], ("ignore_index", -100),
    _LEGACY[1], ("reduction", "mean"), ("label_smoothing", 0.0),
    doc="torch.nn.CrossEntropyLoss with class-index targets (F.cross_entropy): weight, "
        "ignore_index (-100; None: every target is a class), reduction, label_smoothing.")
MSELoss = _loss_module("MSELoss", "mse_loss", *_LEGACY, ("reduction", "mean"),
                       doc="The mean squared error, as torch.nn.MSELoss (F.mse_loss).")
L1Loss = _loss_module("L1Loss", "l1_loss", *_LEGACY, ("reduction", "mean"),
                      doc="F.l1_loss as a module.")
SmoothL1Loss = _loss_module("SmoothL1Loss", "smooth_l1_loss", *_LEGACY, ("reduction", "mean"),
                            ("beta", 1.0), doc="F.smooth_l1_loss as a module.")
HuberLoss = _loss_module("HuberLoss", "huber_loss", ("reduction", "mean"), ("delta", 1.0),
                         doc="F.huber_loss as a module.")
BCELoss = _loss_module("BCELoss", "binary_cross_entropy", ("weight", None), *_LEGACY,
                       ("reduction", "mean"), doc="F.binary_cross_entropy as a module.")
BCEWithLogitsLoss = _loss_module("BCEWithLogitsLoss", "binary_cross_entropy_with_logits",
                                 ("weight", None), *_LEGACY, ("reduction", "mean"),
                                 ("pos_weight", None),
                                 doc="F.binary_cross_entropy_with_logits as a module.")
NLLLoss = _loss_module("NLLLoss", "nll_loss", ("weight", None), _LEGACY[0],
                       ("ignore_index", -100), _LEGACY[1], ("reduction", "mean"),
                       doc="F.nll_loss as a module.")
KLDivLoss = _loss_module("KLDivLoss", "kl_div", *_LEGACY, ("reduction", "mean"),
                         ("log_target", False), doc="F.kl_div as a module.")
