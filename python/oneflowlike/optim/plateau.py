"""ReduceLROnPlateau (torch.optim.lr_scheduler's): lr times factor once a metric has not
improved for more than patience steps, then a cooldown; step(metric) after each evaluation.
With nn.Graph, call it yourself (the graph reads each group's lr at every call)."""

import math

from oneflowlike.optim.optimizer import Optimizer


class ReduceLROnPlateau:
    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[ReduceLROnPlateau] optimizer must be a flow.optim.Optimizer. "
                            f"However, got {type(optimizer).__name__}.")
        if factor >= 1.0:
            raise ValueError(f"[ReduceLROnPlateau] factor must be below 1. However, got "
                             f"{factor}.")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"[ReduceLROnPlateau] mode must be 'min' or 'max' and "
                             f"threshold_mode 'rel' or 'abs'. However, got {mode!r}, "
                             f"{threshold_mode!r}.")
        from oneflowlike.optim.lr_scheduler import per_group

        self.min_lrs = per_group("ReduceLROnPlateau", "min_lr", min_lr,
                                 len(optimizer.param_groups))
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def _is_better(self, a):
        rel = self.threshold_mode == "rel"
        if self.mode == "min":
            return a < (self.best * (1.0 - self.threshold) if rel else self.best - self.threshold)
        return a > (self.best * (1.0 + self.threshold) if rel else self.best + self.threshold)

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(group["lr"] * self.factor, floor)
                if group["lr"] - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self):
        return list(self._last_lr)

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
