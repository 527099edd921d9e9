"""Cross-entropy loss over class logits, fused with the softmax
(``sparse_softmax_cross_entropy``)."""

from oneflowlike import _C

__all__ = []
TENSOR_METHODS = {}

_REDUCTIONS = ("mean", "sum", "none")


def sparse_softmax_cross_entropy(logits, labels):
    """Per-sample loss ``logsumexp(logits) - logits[label]`` over the LAST axis:
    logits (..., C) float, labels (...) int32/int64 -> (...). (OneFlow's argument order.)"""
    return _C.sparse_softmax_cross_entropy(logits, labels)


def cross_entropy(input, target, weight=None, *, ignore_index=-100,  # noqa: A002 (torch name)
                  reduction="mean", label_smoothing=0.0):
    """torch.nn.functional.cross_entropy with class-index targets.

    input (N, C) with target (N,), input (C,) with target (), or input (N, C, d1, ...) with
    target (N, d1, ...). ``reduction`` is "mean", "sum" or "none". As in torch: a target equal
    to ``ignore_index`` (-100 by default; None: every target is a class) gives a loss of 0 and
    no gradient, and "mean" divides by the weight of the targets that count (their number
    without ``weight``; 0 / 0 = NaN when none does); ``weight`` (C,) scales each class's loss;
    ``label_smoothing`` mixes the target with the uniform distribution over the classes.
    Probability targets are not supported.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"[cross_entropy] reduction must be one of {_REDUCTIONS}. However, got {reduction!r}.")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"[cross_entropy] label_smoothing must be in [0, 1]. However, got "
                         f"{label_smoothing!r}.")
    input = classes_last("cross_entropy", input, target, weight)  # noqa: A001
    if ignore_index is None and weight is None and label_smoothing == 0.0:
        loss = _C.sparse_softmax_cross_entropy(input, target)
        if reduction == "sum":
            return _C.reduce_sum(loss, [], False)
        if reduction == "mean":
            return _C.reduce_mean(loss, [], False)
        return loss
    return class_loss(_C.sparse_softmax_cross_entropy, input, target, weight, ignore_index,
                      reduction, label_smoothing)


def classes_last(op, input, target, weight, rows_too=False):  # noqa: A002
    """``input`` with its class axis last ((N, C, d1, ...) -> (N, d1, ..., C)), after checking
    that ``target`` is the input without its class axis (for 2-d inputs too with ``rows_too``;
    else the op checks those) and that ``weight`` holds one value per class."""
    classes = input.shape[-1] if input.ndim < 2 else input.shape[1]
    if weight is not None and tuple(weight.shape) != (classes,):
        raise ValueError(f"[{op}] weight must have shape ({classes},), one value per class of "
                         f"input {tuple(input.shape)}. However, got {tuple(weight.shape)}.")
    if input.ndim > 2 or (rows_too and input.ndim == 2):
        expected = (input.shape[0],) + tuple(input.shape[2:])
        if tuple(target.shape) != expected:
            raise ValueError(
                f"[{op}] target must have shape {expected} (input without its class axis 1). "
                f"However, got input {tuple(input.shape)}, target {tuple(target.shape)}.")
    if input.ndim > 2:
        import oneflowlike as flow

        input = flow.permute(input, [0] + list(range(2, input.ndim)) + [1])  # noqa: A001
    return input


def class_loss(row_loss, input, target, weight, ignore_index, reduction, smoothing=0.0):  # noqa: A002
    """Note [Ignored targets]: ``row_loss(input, target)`` of the rows whose target counts,
    each scaled by its class's weight, written with the ops that exist, so that every device,
    layout and graph has it and its gradient (cross_entropy's and nll_loss's). The row losses
    take classes in [0, C) only: an ignored row computes the loss of class 0, and where() (not
    a product: that row's loss may be inf) makes it 0. "mean" divides by the weights of the
    rows that count, as torch."""
    import oneflowlike as flow

    keep = None
    if ignore_index is not None:
        keep = target != ignore_index
        target = flow.where(keep, target, 0)
    loss = row_loss(input, target)
    scale = None  # per row: its class's weight (what "mean" divides by, with the kept rows)
    if weight is not None:
        scale = flow.index_select(weight, 0, target.reshape(-1)).reshape(tuple(target.shape))
        scale = scale.to(loss.dtype)
        loss = loss * scale
    if smoothing != 0.0:
        # Against the uniform target, torch's form: -sum_c w_c log p_c / C per row (weighted by
        # the classes, not by the row's target), mixed in after the weights.
        log_p = flow.nn.functional.log_softmax(input, -1).to(loss.dtype)
        if weight is not None:
            log_p = log_p * weight.to(loss.dtype)
        loss = loss * (1.0 - smoothing) + log_p.sum(-1) * (-smoothing / input.shape[-1])
    if keep is not None:
        loss = flow.where(keep, loss, 0.0)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    if keep is not None:
        scale = keep.to(loss.dtype) if scale is None else flow.where(keep, scale, 0.0)
    return loss.mean() if scale is None else total / scale.sum()


NN_FUNCTIONAL = {
    "cross_entropy": cross_entropy,
    "sparse_softmax_cross_entropy": sparse_softmax_cross_entropy,
}
