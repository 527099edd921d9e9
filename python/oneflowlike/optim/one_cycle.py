"""OneCycleLR (torch.optim.lr_scheduler's): the 1cycle policy, lr from max_lr / div_factor up
to max_lr over pct_start of the steps and down to that / final_div_factor, cosine or linear,
with the momentum (SGD's momentum, Adam's beta1) cycling the other way; three_phase comes back
to the initial lr before the final descent. Computed per step in closed form, as torch's."""

import math

from oneflowlike.optim.lr_scheduler import LRScheduler, per_group


class OneCycleLR(LRScheduler):
    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("[OneCycleLR] needs total_steps, or epochs and steps_per_epoch.")
            total_steps = epochs * steps_per_epoch
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"[OneCycleLR] total_steps must be a positive int. However, got "
                             f"{total_steps!r}.")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"[OneCycleLR] pct_start must be in [0, 1]. However, got "
                             f"{pct_start}.")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"[OneCycleLR] anneal_strategy must be 'cos' or 'linear'. However, "
                             f"got {anneal_strategy!r}.")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        self.cycle_momentum = cycle_momentum
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                             "base_momentum", "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum",
                             "max_momentum")]
        else:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum",
                             "max_momentum")]
        groups = optimizer.param_groups
        if last_epoch == -1:
            for group, peak in zip(groups, per_group("OneCycleLR", "max_lr", max_lr, len(groups))):
                group["initial_lr"] = peak / div_factor
                group["max_lr"] = peak
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self._use_beta1 = "betas" in optimizer.defaults
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and not self._use_beta1:
                raise ValueError("[OneCycleLR] cycle_momentum needs an optimizer with momentum "
                                 "or betas. However, the optimizer has neither: pass "
                                 "cycle_momentum=False.")
            bases = per_group("OneCycleLR", "base_momentum", base_momentum, len(groups))
            maxes = per_group("OneCycleLR", "max_momentum", max_momentum, len(groups))
            if last_epoch == -1:
                for group, low, high in zip(groups, bases, maxes):
                    self._set_momentum(group, high)
                    group["base_momentum"], group["max_momentum"] = low, high
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self._use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"[OneCycleLR] stepped {step} times, past total_steps "
                             f"{self.total_steps}.")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for k, (end, lr_from, lr_to, m_from, m_to) in enumerate(self._phases):
                if step <= end or k == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m_from], group[m_to], pct))
                    break
                start = end
        return lrs
