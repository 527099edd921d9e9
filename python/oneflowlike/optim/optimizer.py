"""The Optimizer base class: parameter groups, per-parameter state, zero_grad, state_dict."""

import numpy as np

from oneflowlike import _C
from oneflowlike.autograd import enable_grad, no_grad


class _ParamState:
    """Per-parameter state keyed by the parameter object itself (tensors compare elementwise,
    so they are looked up by identity). Missing entries start as empty dicts, as in torch."""

    def __init__(self):
        self._entries = {}  # id(param) -> (param, state dict)

    def __getitem__(self, param):
        entry = self._entries.get(id(param))
        if entry is None:
            entry = self._entries[id(param)] = (param, {})
        return entry[1]

    def __setitem__(self, param, state):
        self._entries[id(param)] = (param, state)

    def __contains__(self, param):
        return id(param) in self._entries

    def __len__(self):
        return len(self._entries)

    def items(self):
        return [(p, s) for p, s in self._entries.values()]

    def clear(self):
        self._entries.clear()


def _numpy_dtype(param):
    return np.float64 if param.dtype == _C.dtype.float64 else np.float32


def _on_device_of(t, param):
    """t on param's device (itself when it is there, or when param has none: a meta or global
    parameter): the update ops take all their inputs on one."""
    device = getattr(param, "device", None) if isinstance(param, _C.Tensor) else None
    return t if device is None or t.device == device else t._to_device(str(device))


def scalar_like(value, param):
    """A scalar tensor () holding ``value`` with the dtype and device the update ops expect for
    ``param``."""
    return _on_device_of(_C.from_numpy(np.asarray(value, dtype=_numpy_dtype(param))), param)


def zeros_like(param):
    return _on_device_of(_C.from_numpy(np.zeros(tuple(param.shape), dtype=_numpy_dtype(param))),
                         param)


def _saved(value, param):
    """A copy of a state value for state_dict. The state of a global parameter is kept as this
    rank's pieces (the update runs on pieces); saved, it is a global tensor laid out as the
    parameter, so flow.save writes it as one and it loads onto any layout."""
    if not isinstance(value, _C.Tensor):
        return value
    if getattr(param, "is_global", False):
        from oneflowlike.framework.global_tensor import GlobalTensor

        return GlobalTensor(value.clone(), param.shape, value.dtype, param.placement, param.sbp)
    return value.clone()


def _restored(value, param):
    """The state value to keep for ``param`` from a saved one (_saved's inverse)."""
    if getattr(value, "is_global", False):
        if not getattr(param, "is_global", False):
            raise TypeError("[optim] the saved state is of a global parameter, and this "
                            "optimizer's parameter is local: lay the model out first.")
        piece = value.to_global(placement=param.placement, sbp=param.sbp).to_local_or_none()
        return None if piece is None else piece.clone()
    if getattr(param, "is_global", False) and isinstance(value, _C.Tensor):
        # A whole value every rank holds (flow.load without `like` gives them so, whatever
        # ranks saved it): each rank keeps its piece, as Module.load_state_dict does.
        if value.ndim > 0 and tuple(value.shape) != tuple(param.shape):
            raise ValueError(f"[optim] a saved state value of shape {tuple(value.shape)} does not "
                             f"fit its global parameter of shape {tuple(param.shape)}.")
        if value.ndim == 0:  # a per-parameter scalar (none today): every rank keeps it
            return value.clone()
        from oneflowlike.framework.global_tensor import from_logical

        piece = from_logical(value, param.placement, param.sbp).to_local_or_none()
        return None if piece is None else piece.clone()
    if not isinstance(value, _C.Tensor):
        return value
    # A copy, on the parameter's device (a checkpoint loads on the CPU): the update reads both.
    moved = _on_device_of(value, param)
    return value.clone() if moved is value else moved


class Optimizer:
    """Base class of flow.optim optimizers (torch.optim.Optimizer's interface).

    Subclasses implement ``_update(param, grad, group, state)``, which runs one fused update op
    on one parameter; ``step`` calls it under no_grad for every parameter that has a gradient.
    """

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = _ParamState()
        self.param_groups = []
        if isinstance(params, _C.Tensor):
            raise TypeError(
                "[optim] params must be an iterable of tensors or dicts. However, got a single "
                "tensor.")
        params = list(params)
        if not params:
            raise ValueError("[optim] params must not be empty. However, got an empty list.")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """Adds a group: a dict with "params" and any hyper-parameters to override."""
        if not isinstance(param_group, dict):
            raise TypeError(f"[optim] a param group must be a dict. However, got {param_group!r}.")
        group = dict(param_group)
        params = group.get("params")
        params = [params] if isinstance(params, _C.Tensor) else list(params or [])
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            # Global tensors (parameters of a module laid out with to_global) are optimized by
            # the nn.Graph the optimizer is added to.
            # A meta parameter (Note [Meta tensors]) is the one a layout will replace.
            if not isinstance(p, _C.Tensor) and not getattr(p, "is_global", False) and not \
                    getattr(p, "is_meta", False):
                raise TypeError(f"[optim] can only optimize tensors. However, got {type(p)}.")
            if not p.is_leaf:
                raise ValueError("[optim] can't optimize a non-leaf tensor (one computed from "
                                 "others). However, got a tensor with a grad_fn.")
            if id(p) in seen:
                raise ValueError("[optim] a parameter appears in more than one param group.")
            seen.add(id(p))
        group["params"] = params
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Clears the gradients: to None (the default, as in torch) or to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                elif getattr(p, "is_global", False):
                    from oneflowlike import zeros

                    p.grad = zeros(p.shape, dtype=p.dtype, placement=p.placement, sbp=p.sbp)
                else:
                    p.grad = zeros_like(p)

    def step(self, closure=None):
        """Updates every parameter that has a gradient; ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    if getattr(p, "is_global", False):
                        # The gradient is laid out as the parameter (reading .grad reduced a
                        # partial sum), so the elementwise update runs on each rank's pieces;
                        # the state holds this rank's pieces too.
                        if p.to_local_or_none() is None:
                            continue  # this rank holds no piece
                        self._update(p.to_local(), grad.to_local(), group, self.state[p])
                    else:
                        self._update(p, grad, group, self.state[p])
        return loss

    def _update(self, param, grad, group, state):
        # Each optimizer (SGD, Adam, AdamW) applies its own fused update op.
        raise NotImplementedError(f"{type(self).__name__} does not define _update")

    def state_dict(self):
        """{"state": {index: {name: value}}, "param_groups": [{..., "params": [indices]}]} with
        parameters numbered in group order, as in torch. Tensors are copies."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for p, s in self.state.items():
            if id(p) in index and s:
                state[index[id(p)]] = {k: _saved(v, p) for k, v in s.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restores hyper-parameters and state saved by state_dict (groups must match)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"[optim] the state dict has {len(saved_groups)} param groups. However, the "
                f"optimizer has {len(self.param_groups)}.")
        for saved, group in zip(saved_groups, self.param_groups):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"[optim] a saved param group has {len(saved['params'])} parameters. "
                    f"However, the optimizer's group has {len(group['params'])}.")
        self.state.clear()
        for saved, group in zip(saved_groups, self.param_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = value
            for i, p in zip(saved["params"], group["params"]):
                s = state_dict["state"].get(i)
                if s is not None:
                    self.state[p] = {k: _restored(v, p) for k, v in s.items()}

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)
