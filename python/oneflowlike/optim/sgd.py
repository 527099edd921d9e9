"""Stochastic gradient descent with momentum (torch.optim.SGD) over the sgd_update op."""

from oneflowlike import _C
from oneflowlike.optim.optimizer import Optimizer, scalar_like, zeros_like


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        if lr < 0.0:
            raise ValueError(f"[SGD] lr must be non-negative. However, got lr={lr}.")
        if momentum < 0.0:
            raise ValueError(f"[SGD] momentum must be non-negative. However, got {momentum}.")
        if weight_decay < 0.0:
            raise ValueError(
                f"[SGD] weight_decay must be non-negative. However, got {weight_decay}.")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(
                "[SGD] nesterov momentum requires a positive momentum and zero dampening. "
                f"However, got momentum={momentum}, dampening={dampening}.")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, param, grad, group, state):
        momentum = group["momentum"]
        dampening = group["dampening"]
        if momentum != 0:
            buffer = state.get("momentum_buffer")
            if buffer is None:
                # Note [SGD first step] in ops/optimizer.h: buffer = d_p from a zero buffer.
                buffer = state["momentum_buffer"] = zeros_like(param)
                dampening = 0.0
        else:
            buffer = grad  # unused by the op when momentum is 0
        _C.sgd_update(param, grad, buffer, scalar_like(group["lr"], param), momentum, dampening,
                      group["weight_decay"], group["nesterov"])
