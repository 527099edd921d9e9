"""nn.Graph's checkpoints: graph.state_dict() and load_state_dict() (the graph's variables and
Note [Training state in a graph's state dict]), and sync_to_modules()."""

import copy

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike.framework import agreement as _agreement
from oneflowlike.framework import global_tensor as _gt
from oneflowlike.nn.graph_optimizer import _trains

# Note [Training state in a graph's state dict]
# Resuming must give exactly the uninterrupted curve, so graph.state_dict() holds, besides the
# variables, what the optimizer and LR scheduler carry in Python: the step count (Adam's bias
# correction and SGD's first step read it), the param groups' hyper-parameters (the lr a
# schedule reached) and the scheduler's state. They are JSON values, which flow.save keeps in
# the manifest.
OPTIMIZER_STATE = "_graph.optimizer"  # {"step": int, "param_groups": [hyper-parameters]}
LR_SCHEDULER_STATE = "_graph.lr_scheduler"  # the scheduler's state_dict()
# set_grad_scaler: {"scale", "good_steps", "steps"}, the graph's variables of Note [Dynamic loss
# scaling in a graph], which every rank holds.
GRAD_SCALER_STATE = "_graph.grad_scaler"
_SCALER_VARIABLES = {"scale": "_loss_scale", "good_steps": "_loss_scale.good_steps",
                     "steps": "_loss_scale.steps"}


class GraphStateMixin:
    """The state dict of an nn.Graph; a part of Graph, whose variables (_variables, written by
    _write_variable in the runtime) it reads and writes."""

    def _state_entries(self):
        """(name, the module value whose layout it shares) of every parameter, buffer and, once
        compiled, optimizer state ("<param>.momentum", "<param>.exp_avg", ...)."""
        if self._compiled:
            variables = [(full, value, registry_name == "_parameters")
                         for full, value, _, registry_name, _ in self._variables]
        else:
            variables = [(full, value, is_param)
                         for full, _, _, _, value, is_param in self._named_variables()]
        trained = self._trained if self._compiled else self._trained_parameters()
        entries = []
        for full, value, is_param in variables:
            entries.append((full, value))
            if is_param and _trains(value, trained):
                # A template before the first call: the state has its parameter's layout.
                for suffix in self._optimizer_state_suffixes():
                    entries.append((full + suffix, value))
        return entries

    def state_dict(self):
        """Every parameter, buffer and optimizer state by name (the modules' names prefixed by
        the graph attribute): global tensors in a global graph, local tensors otherwise. Before
        the first call, the modules' values (the layouts flow.load(like=...) needs)."""
        return self._state_dict()

    def _state_dict(self):
        rank = env.get_rank()
        out = {}
        for name, value in self._state_entries():
            if not self._compiled:
                # The modules' values; optimizer state starts at zero, in its parameter's layout.
                is_state = name.endswith(self._optimizer_state_suffixes())
                out[name] = _zeros_like(value) if is_state else value
                continue
            local = None
            if name in self._local_variables:
                local = self._runtime.read_variable_pieces(name).get(rank)
            if isinstance(value, _gt.GlobalTensor):
                placement, sbp = self._plan_layout(name, value)
                out[name] = _gt.GlobalTensor(local, value.shape, value.dtype, placement, sbp)
            else:
                out[name] = self._on_local_device(local)
        out.update(self._training_state())
        return out

    def _training_state(self):
        """Note [Training state in a graph's state dict]."""
        if not self._optimizers:
            return {}
        groups = [{k: v for k, v in group.items() if k != "params"}
                  for group in self._optimizers[0].param_groups]
        state = {OPTIMIZER_STATE: copy.deepcopy({"step": self._step, "param_groups": groups})}
        if self._lr_schedulers:
            state[LR_SCHEDULER_STATE] = copy.deepcopy(self._lr_schedulers[0].state_dict())
        if self._grad_scaler is not None:
            state[GRAD_SCALER_STATE] = self._scaler_state()
        return state

    def _scaler_state(self):
        """The loss scale and its step counts: from the graph once compiled (every rank holds
        them), the scaler's starting values before."""
        if self._runtime is None:
            return {"scale": self._grad_scaler._scale, "good_steps": 0.0, "steps": 0.0}
        rank = env.get_rank()
        state = {}
        for key, name in _SCALER_VARIABLES.items():
            piece = self._runtime.read_variable_pieces(name).get(rank)
            if piece is None:  # every rank of the job holds them (autograd.cpp)
                raise RuntimeError(f"[nn.Graph] rank {rank} holds no '{name}': the loss scale "
                                   "is missing from this rank's part of the plan.")
            state[key] = float(piece.numpy())
        return state

    def _write_scaler_state(self, saved):
        rank = env.get_rank()
        for key, name in _SCALER_VARIABLES.items():
            value = _C.from_numpy(np.asarray(saved[key], dtype=np.float32))
            self._runtime.write_variable_pieces(name, {rank: value})

    def _load_training_state(self, state, strict):
        """Restores the step count, the param groups' hyper-parameters and the scheduler's
        state (Note [Training state in a graph's state dict])."""
        for key, present in ((OPTIMIZER_STATE, bool(self._optimizers)),
                             (LR_SCHEDULER_STATE, bool(self._lr_schedulers)),
                             (GRAD_SCALER_STATE, self._grad_scaler is not None)):
            if strict and key in state and not present:
                what = {OPTIMIZER_STATE: "an optimizer", LR_SCHEDULER_STATE: "an LR scheduler",
                        GRAD_SCALER_STATE: "a grad scaler"}[key]
                raise KeyError(f"[nn.Graph] load_state_dict got '{key}', but "
                               f"{type(self).__name__} has no {what}.")
            if strict and present and key not in state:
                raise KeyError(
                    f"[nn.Graph] load_state_dict needs '{key}' (from graph.state_dict()): "
                    "without it training would resume with the step count or schedule of a new "
                    "run. Pass strict=False to load the variables alone.")
        saved = state.get(OPTIMIZER_STATE)
        if saved is not None and self._optimizers:
            groups = self._optimizers[0].param_groups
            if len(saved["param_groups"]) != len(groups):
                raise ValueError(f"[nn.Graph] the saved optimizer has {len(saved['param_groups'])} "
                                 f"param groups. However, this one has {len(groups)}.")
            for group, saved_group in zip(groups, saved["param_groups"]):
                for key, value in saved_group.items():
                    if isinstance(group.get(key), tuple) and isinstance(value, list):
                        value = tuple(value)  # JSON has no tuples (betas)
                    group[key] = value
            self._step = int(saved["step"])
        saved = state.get(LR_SCHEDULER_STATE)
        if saved is not None and self._lr_schedulers:
            self._lr_schedulers[0].load_state_dict(copy.deepcopy(saved))
        saved = state.get(GRAD_SCALER_STATE)
        if saved is not None and self._grad_scaler is not None:
            if self._runtime is None:
                self._pending_scaler_state = dict(saved)  # written once compiled
            else:
                self._write_scaler_state(saved)

    def load_state_dict(self, state, strict=True):
        """Writes values (as state_dict gives them, in any layout) into the graph, with the
        optimizer's step count and hyper-parameters and the LR scheduler's state; before the
        first call the tensors are kept and written once it has compiled. ``strict``: every
        key must be known and present."""
        state = dict(state)
        training = {k: state.pop(k) for k in (OPTIMIZER_STATE, LR_SCHEDULER_STATE,
                                              GRAD_SCALER_STATE) if k in state}
        names = [name for name, _ in self._state_entries()]
        if not self._compiled:  # optimizer state is known by its suffixes before the first call
            unknown = sorted(k for k in state if k not in names and not any(
                k.startswith(n + ".") for n in names))
        else:
            unknown = sorted(set(state) - set(names))
        missing = [n for n in names if n not in state]
        if strict and (unknown or missing):
            raise KeyError(f"[nn.Graph] load_state_dict got unexpected keys {unknown} and lacks "
                           f"keys {missing[:8]}{' ...' if len(missing) > 8 else ''}. Pass "
                           "strict=False to load a part.")
        # Everything is checked before anything changes: no half-loaded state.
        for name, value in self._state_entries():
            if name in state and tuple(state[name].shape) != tuple(value.shape):
                raise ValueError(f"[nn.Graph] '{name}' has shape {tuple(value.shape)}. However, "
                                 f"load_state_dict got {tuple(state[name].shape)}.")
        self._check_local_values_agree(state)
        self._load_training_state(training, strict)
        if not self._compiled:
            self._pending_state = state
            return
        from oneflowlike.nn import graph_sharing

        graph_sharing.rebind_moved(self)  # the module tensors' memory, where they moved
        self._write_state(state)
        graph_sharing.claim(self, set(state))  # Note [Graphs sharing modules]: the newest

    def _check_local_values_agree(self, state):
        """Note [Local and global do not mix in a graph], for loaded values: a local tensor
        given for a global variable is taken as its whole value, which is right only when every
        rank gives the same (flow.load without like=); one that differs between ranks is
        refused on every rank (collective: every rank loads the same names)."""
        local = {name: state[name].numpy() for name, value in self._state_entries()
                 if name in state and isinstance(value, _gt.GlobalTensor)
                 and isinstance(state[name], _C.Tensor)}
        differ = _agreement.differing(local)
        if differ:
            raise ValueError(
                f"[nn.Graph] load_state_dict got local tensors for global variables of "
                f"{type(self).__name__} that differ between ranks: {differ[:8]}. Each rank would "
                "load its own value of one variable. Load with flow.load(path, "
                "like=graph.state_dict()) (each rank reads its pieces), or pass global tensors.")

    def _write_state(self, state):
        for name, _ in self._state_entries():
            if name in state:
                self._write_variable(name, state[name])

    def sync_to_modules(self):
        """Copies the newest values of this graph's variables into the modules' parameters and
        buffers (other graphs on the same modules, and eager calls of them, do it when they need
        to: Note [Graphs sharing modules] in graph_sharing.py). The newest: where another graph
        trained the modules since this one ran, its values, not this graph's older copy."""
        from oneflowlike.nn import graph_sharing

        if self._compiled:
            graph_sharing.release([value for _, value, *_ in self._variables])


def _zeros_like(value):
    if isinstance(value, _gt.GlobalTensor):
        local = None if value._local is None else _C.fill(tuple(value._local.shape), value.dtype, 0.0)
        return _gt.GlobalTensor(local, value.shape, value.dtype, value.placement, value.sbp)
    return _C.fill(tuple(value.shape), value.dtype, 0.0, value.device)
