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


def cross_entropy(input, target, weight=None, *, reduction="mean",  # noqa: A002 (torch name)
                  label_smoothing=0.0):
    """torch.nn.functional.cross_entropy with class-index targets.

    input (N, C) with target (N,), input (C,) with target (), or input (N, C, d1, ...) with
    target (N, d1, ...). ``reduction`` is "mean", "sum" or "none". Class weights, probability
    targets and label smoothing are not supported.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"[cross_entropy] reduction must be one of {_REDUCTIONS}. However, got {reduction!r}.")
    if weight is not None or label_smoothing != 0.0:
        raise NotImplementedError(
            "[cross_entropy] class weights and label smoothing are not supported; got "
            f"weight={'a tensor' if weight is not None else None}, "
            f"label_smoothing={label_smoothing!r}")
    if input.ndim > 2:
        expected = (input.shape[0],) + tuple(input.shape[2:])
        if tuple(target.shape) != expected:
            raise ValueError(
                f"[cross_entropy] target must have shape {expected} (input without its class "
                f"axis 1). However, got input {tuple(input.shape)}, target {tuple(target.shape)}.")
        # (N, C, d1, ...) -> (N, d1, ..., C): the op reduces over the last axis.
        import oneflowlike as flow

        permute = getattr(flow, "permute", None)
        if permute is None:
            raise NotImplementedError(
                "[cross_entropy] an input of shape (N, C, d1, ...) needs flow.permute to move the "
                f"class axis last, which is not available yet; got input {tuple(input.shape)}")
        input = permute(input, [0] + list(range(2, input.ndim)) + [1])  # noqa: A001
    loss = _C.sparse_softmax_cross_entropy(input, target)
    if reduction == "sum":
        return _C.reduce_sum(loss, [], False)
    if reduction == "mean":
        return _C.reduce_mean(loss, [], False)
    return loss


NN_FUNCTIONAL = {
    "cross_entropy": cross_entropy,
    "sparse_softmax_cross_entropy": sparse_softmax_cross_entropy,
}
