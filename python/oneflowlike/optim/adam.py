"""Adam and AdamW (torch.optim.Adam / AdamW) over the adam_update op."""

from oneflowlike import _C
from oneflowlike.optim.optimizer import Optimizer, scalar_like, zeros_like


def _check_hyper_parameters(name, lr, betas, eps, weight_decay):
    if lr < 0.0:
        raise ValueError(f"[{name}] lr must be non-negative. However, got lr={lr}.")
    if eps < 0.0:
        raise ValueError(f"[{name}] eps must be non-negative. However, got eps={eps}.")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"[{name}] betas must be two values in [0, 1). However, got {betas}.")
    if weight_decay < 0.0:
        raise ValueError(
            f"[{name}] weight_decay must be non-negative. However, got {weight_decay}.")


class Adam(Optimizer):
    _decoupled_weight_decay = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        _check_hyper_parameters(type(self).__name__, lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def _update(self, param, grad, group, state):
        if not state:
            state["step"] = 0
            state["exp_avg"] = zeros_like(param)
            state["exp_avg_sq"] = zeros_like(param)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        _C.adam_update(param, grad, state["exp_avg"], state["exp_avg_sq"],
                       scalar_like(group["lr"], param), scalar_like(state["step"], param), beta1,
                       beta2, group["eps"], group["weight_decay"], self._decoupled_weight_decay)


class AdamW(Adam):
    """Adam with decoupled weight decay: param *= 1 - lr * weight_decay before the step."""

    _decoupled_weight_decay = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
