"""Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_)."""

import math

import oneflowlike as flow
from oneflowlike import _C
from oneflowlike.autograd import no_grad


@no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales the gradients of ``parameters`` so that their total norm is at most ``max_norm``.

    The total norm is that of all gradients joined into one vector, of order ``norm_type``
    (a positive float, or inf for the largest magnitude). Gradients are multiplied by
    min(1, max_norm / (total_norm + 1e-6)), as torch, and replaced (``param.grad`` becomes
    the scaled tensor). Returns the total norm before clipping as a 0-d tensor. Everything
    is computed with ops (no values read back) unless ``error_if_nonfinite`` is set.
    """
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"[clip_grad_norm_] norm_type must be positive or inf. However, got "
                         f"{norm_type}.")
    if not params:
        return flow.zeros(())
    grads = [p.grad for p in params]
    # Gradients may lie on several placements (pipeline stages trained eagerly on global
    # tensors) or devices (a model split over GPUs, as torch's): each part is reduced where its
    # gradient is and moved to the first one's placement or device.
    is_global = getattr(grads[0], "is_global", False)
    home = grads[0].placement if is_global else grads[0].device

    def gathered(part):
        if not is_global:
            return part.to(home)
        return part.to_global(placement=home, sbp=_broadcast(home))

    if math.isinf(norm_type):
        total = flow.amax(flow.stack([gathered(flow.amax(g.abs())) for g in grads]))
    elif norm_type == 2.0 and all(g.dtype in (flow.float32, flow.float64) for g in grads):
        # One multi-tensor sum of squares per group of gradients that share a placement and
        # layout (or a device) and a dtype (Note [Multi-tensor updates]): each gradient's part
        # is its (g * g).sum() as below, added in the parameters' order within a group.
        from oneflowlike.framework import global_tensor  # noqa: PLC0415

        total = None
        for group in global_tensor.multi_tensor_groups(grads):
            part = gathered(global_tensor.multi_tensor_call(
                _C.multi_tensor_sum_squares, group, name="clip_grad_norm_"))
            total = part if total is None else total + part
        total = total.sqrt()
    else:
        total = None
        for g in grads:
            power = (g * g) if norm_type == 2.0 else g.abs() ** norm_type
            part = gathered(power.sum())
            total = part if total is None else total + part
        total = total.sqrt() if norm_type == 2.0 else total ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(
            f"[clip_grad_norm_] the total norm of order {norm_type} of the gradients must be "
            f"finite. However, got {total.item()}.\nHINT: pass error_if_nonfinite=False to "
            "scale the gradients anyway."
        )
    coef = max_norm / (total + 1e-6)
    if is_global:
        one = flow.ones((), dtype=coef.dtype, placement=home, sbp=_broadcast(home))
    else:
        one = flow.ones((), dtype=coef.dtype, device=home)
    coef = flow.where(coef < one, coef, one)  # min(coef, 1) without reading the value
    for p in params:
        g = p.grad
        c = coef if coef.dtype == g.dtype else coef.to(g.dtype)
        if is_global and g.placement != home:
            c = c.to_global(placement=g.placement, sbp=_broadcast(g.placement))
        elif not is_global and g.device != home:
            c = c.to(g.device)
        p.grad = g * c
    return total


def _broadcast(placement):
    return (flow.sbp.broadcast,) * len(placement.hierarchy)


@no_grad()
def clip_grad_value_(parameters, clip_value):
    """Limits every gradient element of ``parameters`` to [-clip_value, clip_value] (the
    gradients are replaced, as clip_grad_norm_ does)."""
    if isinstance(parameters, _C.Tensor) or getattr(parameters, "is_global", False):
        parameters = [parameters]
    clip_value = float(clip_value)
    if not clip_value >= 0:
        raise ValueError(f"[clip_grad_value_] clip_value must be non-negative. However, got "
                         f"{clip_value}.")
    for p in parameters:
        if p.grad is not None:
            p.grad = p.grad.clamp(-clip_value, clip_value)
