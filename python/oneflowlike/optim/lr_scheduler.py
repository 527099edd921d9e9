"""Learning-rate schedulers (flow.optim.lr_scheduler), with torch.optim.lr_scheduler's names,
formulas and stepping.

A scheduler sets each param group's "lr" from the group's initial lr and an epoch counter
``last_epoch``. Constructing one sets the lr of epoch 0; each step() advances one epoch
(call it after optimizer.step()). Every schedule here is computed in closed form from
torch's documented definitions, so lr(epoch) does not depend on the path taken to reach it.
"""

import bisect
import math
import numbers
import types

from oneflowlike.optim.optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "CosineAnnealingLR", "LinearLR", "LambdaLR",
           "SequentialLR", "ExponentialLR", "ConstantLR", "PolynomialLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "ReduceLROnPlateau"]


class LRScheduler:
    """Base class. Subclasses define ``lr_at(base_lr, epoch)``, or override get_lr()."""

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"[{type(self).__name__}] optimizer must be a flow.optim.Optimizer. "
                            f"However, got {type(optimizer).__name__}.")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for k, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"[{type(self).__name__}] resuming at last_epoch={last_epoch} needs "
                        f"'initial_lr' in every param group. However, param_groups[{k}] has "
                        "none: load the optimizer's state_dict first.")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self.step()

    def lr_at(self, base_lr, epoch):
        raise NotImplementedError(f"{type(self).__name__} does not define lr_at")

    def get_lr(self):
        """The lr of every param group at ``last_epoch``."""
        return [self.lr_at(base_lr, self.last_epoch) for base_lr in self.base_lrs]

    def get_last_lr(self):
        """The lrs the last step() set, one per param group."""
        return list(self._last_lr)

    def step(self, epoch=None):
        """Advances one epoch (or jumps to ``epoch``) and sets the param groups' lr."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        """Everything but the optimizer, as torch."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def __repr__(self):
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, last_lr={self._last_lr})"


def _check_positive_int(scheduler, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"[{scheduler}] {name} must be a positive int. However, got {value!r}.")


def per_group(scheduler, name, value, groups):
    """``value`` for each of ``groups`` param groups: a list or tuple holds one each, anything
    else is every group's."""
    if isinstance(value, (list, tuple)):
        if len(value) != groups:
            raise ValueError(f"[{scheduler}] {name} must hold one value per param group "
                             f"({groups}). However, got {len(value)}.")
        return list(value)
    return [value] * groups


_LRScheduler = LRScheduler  # torch's older name


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        _check_positive_int("StepLR", "step_size", step_size)
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= epoch); a milestone listed twice counts
    twice, as in torch."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2: from base_lr at
    epoch 0 to eta_min at T_max (and back up after, as torch's schedule)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803 (torch name)
        _check_positive_int("CosineAnnealingLR", "T_max", T_max)
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        cosine = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return self.eta_min + (base_lr - self.eta_min) * cosine


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from start_factor at epoch 0 to
    end_factor at total_iters and staying there (a warmup with the defaults)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"[LinearLR] start_factor must be in (0, 1]. However, got "
                             f"{start_factor}.")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"[LinearLR] end_factor must be in [0, 1]. However, got "
                             f"{end_factor}.")
        _check_positive_int("LinearLR", "total_iters", total_iters)
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        progress = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** epoch


class ConstantLR(LRScheduler):
    """lr = base_lr * factor before epoch total_iters, base_lr from there on."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if not 0 <= factor <= 1:
            raise ValueError(f"[ConstantLR] factor must be in [0, 1]. However, got {factor}.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * (self.factor if epoch < self.total_iters else 1.0)


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        _check_positive_int("PolynomialLR", "total_iters", total_iters)
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * (1.0 - min(epoch, self.total_iters) / self.total_iters) ** self.power


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to eta_min over T_0 epochs, restarting at base_lr; each
    cycle T_mult times longer than the one before (SGDR)."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):  # noqa: N803
        _check_positive_int("CosineAnnealingWarmRestarts", "T_0", T_0)
        _check_positive_int("CosineAnnealingWarmRestarts", "T_mult", T_mult)
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        if self.T_mult == 1:
            return self._cosine(base_lr, epoch % self.T_0, self.T_0)
        t_cur, t_i = epoch, self.T_0
        while t_cur >= t_i:  # whole cycles, counted exactly (a float log missed restarts);
            t_cur -= t_i  # they grow geometrically, so few
            t_i *= self.T_mult
        return self._cosine(base_lr, t_cur, t_i)

    def _cosine(self, base_lr, t_cur, t_i):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); one function, or a list with one per param group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        groups = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        self.lr_lambdas = per_group("LambdaLR", "lr_lambda", lr_lambda, groups)
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"[LambdaLR] lr_lambda must be callable. However, got {fn!r}.")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * fn(self.last_epoch)
                for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        """As torch: functions and lambdas are not saved (None); callable objects are saved as
        their __dict__."""
        state = {key: value for key, value in self.__dict__.items()
                 if key not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if _is_function(fn) else dict(fn.__dict__)
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, fn_state in zip(self.lr_lambdas, saved):
            if fn_state is not None:
                fn.__dict__.update(fn_state)


def _is_function(fn):
    return isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__")


class SequentialLR(LRScheduler):
    """Runs ``schedulers`` one after another: schedulers[i] takes over at epoch
    milestones[i - 1] and counts its own epochs from 0 there."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        schedulers = list(schedulers)
        milestones = [int(m) for m in milestones]
        if not schedulers:
            raise ValueError("[SequentialLR] expects at least one scheduler. However, got none.")
        for k, scheduler in enumerate(schedulers):
            if getattr(scheduler, "optimizer", None) is not optimizer:
                raise ValueError(
                    f"[SequentialLR] every scheduler must drive the optimizer passed to "
                    f"SequentialLR. However, schedulers[{k}] ({type(scheduler).__name__}) drives "
                    "another one.")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"[SequentialLR] expects one milestone fewer than schedulers. However, got "
                f"{len(schedulers)} schedulers and {len(milestones)} milestones.")
        if milestones != sorted(milestones):
            raise ValueError(f"[SequentialLR] milestones must be increasing. However, got "
                             f"{milestones}.")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        # Constructing each scheduler set the lr for its epoch 0; undo that, then start the
        # first one at its epoch 0 (torch's order).
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in schedulers:
            scheduler.last_epoch -= 1
        schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self):
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        state = {key: value for key, value in self.__dict__.items()
                 if key not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [scheduler.state_dict() for scheduler in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved = state.pop("_schedulers")
        self.__dict__.update(state)
        for scheduler, scheduler_state in zip(self._schedulers, saved):
            scheduler.load_state_dict(scheduler_state)


from oneflowlike.optim.one_cycle import OneCycleLR  # noqa: E402
from oneflowlike.optim.plateau import ReduceLROnPlateau  # noqa: E402
