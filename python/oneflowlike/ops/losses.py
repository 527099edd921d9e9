"""Loss functions with torch's names and formulas, composed of existing ops (so every device,
layout and graph has them, with their gradients): l1_loss, smooth_l1_loss, huber_loss,
binary_cross_entropy, binary_cross_entropy_with_logits, nll_loss and kl_div. cross_entropy
and mse_loss have files of their own."""

import oneflowlike as flow
from oneflowlike.ops.cross_entropy import class_loss, classes_last

__all__ = []

_REDUCTIONS = ("mean", "sum", "none")


def _reduced(op, loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"[{op}] reduction must be one of {_REDUCTIONS}. However, got "
                     f"{reduction!r}.")


def _same_shape(op, input, target):  # noqa: A002
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"[{op}] input and target must have one shape. However, got input "
                         f"{tuple(input.shape)} and target {tuple(target.shape)}.")


def l1_loss(input, target, reduction="mean"):  # noqa: A002 (torch's names)
    """|input - target|."""
    _same_shape("l1_loss", input, target)
    return _reduced("l1_loss", (input - target).abs(), reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):  # noqa: A002
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta 0: l1)."""
    _same_shape("smooth_l1_loss", input, target)
    if beta < 0:
        raise ValueError(f"[smooth_l1_loss] beta must be non-negative. However, got {beta}.")
    d = (input - target).abs()
    if beta == 0:
        return _reduced("smooth_l1_loss", d, reduction)
    return _reduced("smooth_l1_loss", flow.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta),
                    reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):  # noqa: A002
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta)."""
    _same_shape("huber_loss", input, target)
    if delta <= 0:
        raise ValueError(f"[huber_loss] delta must be positive. However, got {delta}.")
    d = (input - target).abs()
    return _reduced("huber_loss", flow.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta),
                    reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",  # noqa: A002
                                     pos_weight=None):
    """-(pos_weight y log s(x) + (1 - y) log(1 - s(x))) of logits x, in torch's stable form:
    (1 - y) x + (1 + (pos_weight - 1) y) (log(1 + exp(-|x|)) + max(-x, 0))."""
    _same_shape("binary_cross_entropy_with_logits", input, target)
    softplus_neg = flow.log(flow.exp(-input.abs()) + 1.0) + flow.clamp_min(-input, 0.0)
    scale = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + scale * softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduced("binary_cross_entropy_with_logits", loss, reduction)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):  # noqa: A002
    """-(y log p + (1 - y) log(1 - p)) of probabilities p, each log at least -100 (torch's)."""
    _same_shape("binary_cross_entropy", input, target)
    log_p = flow.clamp_min(flow.log(input), -100.0)
    log_q = flow.clamp_min(flow.log(1.0 - input), -100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    if weight is not None:
        loss = loss * weight
    return _reduced("binary_cross_entropy", loss, reduction)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):  # noqa: A002
    """-input[i, target[i]] (log-probabilities (N, C) or (N, C, d1, ...)), scaled by the
    target's class weight; targets equal to ignore_index count for nothing, and "mean" divides
    by the weights of those that count, as torch."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"[nll_loss] reduction must be one of {_REDUCTIONS}. However, got "
                         f"{reduction!r}.")
    if input.ndim == 1:
        input, target = input.unsqueeze(0), target.unsqueeze(0)  # noqa: A001
    input = classes_last("nll_loss", input, target, weight, rows_too=True)  # noqa: A001
    return class_loss(lambda x, t: -flow.gather(x, -1, t.unsqueeze(-1)).squeeze(-1), input,
                      target, weight, ignore_index, reduction)


def kl_div(input, target, reduction="mean", log_target=False):  # noqa: A002
    """target (log target - input) pointwise (0 where target is 0), input being
    log-probabilities; reduction "batchmean" divides the sum by the batch size (the
    mathematical KL divergence), "mean" by the number of elements, as torch."""
    if log_target:
        loss = flow.exp(target) * (target - input)
    else:
        positive = target > 0
        log_t = flow.log(flow.where(positive, target, 1.0))
        loss = flow.where(positive, target * (log_t - input), 0.0)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduced("kl_div", loss, reduction)


NN_FUNCTIONAL = {"l1_loss": l1_loss, "smooth_l1_loss": smooth_l1_loss,
                 "huber_loss": huber_loss,
                 "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
                 "binary_cross_entropy": binary_cross_entropy, "nll_loss": nll_loss,
                 "kl_div": kl_div}
TENSOR_METHODS = {}
