"""What nn.Graph refuses because the plan would silently train the wrong thing: local tensors in
a global graph (Note [Local and global do not mix in a graph]) and, at every call, changes to
what the trace saw (modes, parameters, which of them train, the optimizer's settings)."""

import inspect

from oneflowlike import _C
from oneflowlike.framework import global_tensor as _gt
from oneflowlike.nn.graph_optimizer import _optimizer_setup, _trains
from oneflowlike.nn.modules.hooks import ATTRIBUTES as _HOOK_ATTRIBUTES

_HOOKS = frozenset(_HOOK_ATTRIBUTES)


class GraphRefusalsMixin:
    """nn.Graph's checks of its inputs, modules and optimizer against the trace; a part of
    Graph, which traces (_compile) and records what these compare with."""

    def _input_names(self, count):
        """build()'s parameter names, for messages ("input 'x'")."""
        try:
            names = [p.name for p in inspect.signature(self.build).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        return [f"input '{names[i]}'" if i < len(names) else f"input {i}" for i in range(count)]

    def _check_one_kind(self, args, placement):
        """Note [Local and global do not mix in a graph]: a graph whose inputs or parameters are
        global runs one plan over all its ranks, where a local tensor would be taken as the
        same value on every rank: local data would train without reducing gradients and
        local weights could drift apart, silently. Every rank refuses it, naming the tensor
        and the fix."""
        names = self._input_names(len(args))
        for name, a in zip(names, args):
            if isinstance(a, _C.Tensor):
                raise TypeError(
                    f"[nn.Graph] {name} of {type(self).__name__} is a local tensor "
                    f"{tuple(a.shape)}, but the graph is global (its tensors are placed on "
                    f"{placement!r}): each rank would train on its own data without reducing "
                    "gradients. Make it global, each rank giving its shard: "
                    f"x.to_global(placement={placement!r}, sbp=flow.sbp.split(0)).")
        for full, _, registry_name, _, value, _ in self._named_variables():
            if not isinstance(value, _gt.GlobalTensor):
                kind = "parameter" if registry_name == "_parameters" else "buffer"
                raise TypeError(
                    f"[nn.Graph] {kind} '{full}' {tuple(value.shape)} of {type(self).__name__} is "
                    f"a local tensor, but the graph is global (placed on {placement!r}): each "
                    "rank would start from and keep its own copy. Lay the module out first: "
                    f"module.to_global({placement!r}, flow.sbp.broadcast).")

    def _fingerprint(self):
        """What decides the plan's variables and which of them train: the objects the modules
        hold, their requires_grad, and the optimizer's parameters. One pass, compared each
        call."""
        held = tuple((full, id(value), value.requires_grad, _held_as(value))
                     for full, _, _, _, value, _ in self._named_variables())
        optimized = tuple((g, id(p)) for g, group in enumerate(self._optimizers[0].param_groups)
                          for p in group["params"]) if self._optimizers else ()
        return held, optimized, self._hooks_fingerprint()

    def _hooks_fingerprint(self):
        """The hooks of every module (nn/modules/hooks.py), which the trace ran or refused."""
        return tuple((name,) + _hooks_of(m.__dict__)
                     for attr, module in self._modules.items()
                     for name, m in module.named_modules(prefix=attr)
                     if any(m.__dict__.get(a) for a in _HOOK_ATTRIBUTES))

    def _snapshot_modules(self):
        """Note [Checking a graph's modules each call]: _fingerprint walks the module tree by
        name, which took 2.3 ms of a 10 ms decoding step (a 23 M-parameter LLaMA). What it
        compares is kept here flat, over the module tree as it was when last checked: each
        registry dict (the module's own) and the objects it holds, in order; each variable's requires_grad, dtype
        and device; the hooks. A call compares these by identity (no names, no generators);
        only where something differs does the full fingerprint run, to raise naming what
        changed, or to take a new snapshot where nothing that matters did."""
        # Each module's registries, and the graph's own modules (g.m = other) apart: a reference
        # to the graph's __dict__ here would make the graph a cycle, freed only by the collector
        # (Note [Graphs sharing modules] frees a dropped graph by reference counts).
        registries, variables, hooks = [], [], []
        own = (self._modules, tuple(map(id, self._modules.values())))
        # The tree as it is now (a module swapped in since the trace, with the same names and
        # parameters, is watched from here on), each module once.
        modules = {id(m): m for attr, module in self._modules.items()
                   for _, m in module.named_modules(prefix=attr)}
        for module in modules.values():
            state = module.__dict__
            for registry_name in ("_modules", "_parameters", "_buffers"):
                registry = state[registry_name]
                registries.append((state, registry_name, registry,
                                   tuple(map(id, registry.values()))))
                if registry_name != "_modules":
                    variables += [(v, v.requires_grad, _held_as(v)) for v in registry.values()
                                  if v is not None]
            hooks.append((state, _hooks_of(state) if _HOOKS & state.keys() else None))
        self._module_snapshot = (own, registries, variables, hooks)

    def _modules_unchanged(self):
        """Whether the snapshot still holds (Note [Checking a graph's modules each call])."""
        snapshot = self.__dict__.get("_module_snapshot")
        if snapshot is None:
            return False
        own, registries, variables, hooks = snapshot
        if self._modules is not own[0] or tuple(map(id, self._modules.values())) != own[1]:
            return False
        for state, registry_name, registry, ids in registries:
            if state[registry_name] is not registry or tuple(map(id, registry.values())) != ids:
                return False
        for value, requires_grad, held in variables:
            if value.requires_grad != requires_grad or _held_as(value) != held:
                return False
        for state, then in hooks:
            if (then is not None or _HOOKS & state.keys()) and _hooks_of(state) != then:
                return False
        if self._optimizers:
            optimized = tuple((g, id(p)) for g, group in enumerate(self._optimizers[0].param_groups)
                              for p in group["params"])
            if optimized != self._traced_fingerprint[1]:
                return False
        return True

    def _check_unchanged_since_trace(self):
        """The plan holds what the trace saw: the modules' train/eval modes (dropout), their
        parameters and which of them train, the optimizer's kind and hyper-parameters but lr.
        A change would be silently ignored: refuse it."""
        if not self._modules_unchanged():
            self._check_fingerprint()
            self._snapshot_modules()  # nothing that matters changed
        self._check_modes_and_optimizer()

    def _check_fingerprint(self):
        fingerprint = self._fingerprint()
        if fingerprint[2] != self._traced_fingerprint[2]:
            now, then = dict((n, h) for n, *h in fingerprint[2]), dict(
                (n, h) for n, *h in self._traced_fingerprint[2])
            changed = sorted(n for n in set(now) | set(then) if now.get(n) != then.get(n))
            raise RuntimeError(
                f"[nn.Graph] hooks of {changed[:8]} were registered or removed after "
                f"{type(self).__name__} traced them: the plan runs the hooks the trace ran "
                "(and no others). Register hooks before the first call, or build a new graph.")
        if fingerprint != self._traced_fingerprint:
            held = {full: value for full, _, _, _, value, _ in self._named_variables()}
            traced = {full: value for full, value, *_ in self._variables}
            replaced = sorted(n for n in set(held) | set(traced)
                              if held.get(n) is not traced.get(n))
            if replaced:
                raise RuntimeError(
                    f"[nn.Graph] the modules' parameters or buffers {replaced[:8]} were added, "
                    f"removed or replaced after {type(self).__name__} traced them: the graph "
                    "keeps its own copies. Lay the model out before the first call, or build a "
                    "new graph.")
            traced_as = {f: h for f, _, _, h in self._traced_fingerprint[0]}
            moved = sorted(full for full, value, *_ in self._variables
                           if _held_as(value) != traced_as.get(full))
            if moved:
                raise RuntimeError(
                    f"[nn.Graph] the modules' parameters or buffers {moved[:8]} moved to another "
                    f"device or dtype (module.to) after {type(self).__name__} traced them: the "
                    "graph keeps its own copies where it compiled them. Move the model before "
                    "the first call, or build a new graph.")
            trained = self._trained_parameters()
            changed = sorted(full for full, value, _, registry_name, _ in self._variables
                             if registry_name == "_parameters"
                             and _trains(value, trained) != self._compiled_trains[full])
            raise RuntimeError(
                f"[nn.Graph] which parameters train changed after {type(self).__name__} "
                f"compiled ({changed[:8]}: requires_grad or the optimizer's params): the plan "
                "trains what it compiled with. Build a new graph to freeze or unfreeze "
                "parameters.")

    def _check_modes_and_optimizer(self):
        for name, module, training in self._traced_modes:
            if module.training != training:
                mode = "train()" if training else "eval()"
                raise RuntimeError(
                    f"[nn.Graph] {type(self).__name__} was traced with '{name}' in {mode} mode, "
                    f"and it is now in {'train()' if module.training else 'eval()'} mode: a "
                    "compiled graph keeps the mode it was traced in. Build a separate graph for "
                    "evaluation (one graph per mode, as in OneFlow), sharing the modules.")
        if self._optimizers:
            kind, hyper = _optimizer_setup(self._optimizers[0])
            hyper.pop("lr")
            compiled_kind, compiled = self._compiled_optimizer
            hyper["kind"], compiled = kind, dict(compiled, kind=compiled_kind)
            changed = sorted(k for k in set(hyper) | set(compiled)
                             if hyper.get(k) != compiled.get(k))
            if changed:
                raise ValueError(
                    f"[nn.Graph] the optimizer's {', '.join(changed)} changed after "
                    f"{type(self).__name__} compiled ({', '.join(f'{k}={compiled.get(k)}' for k in changed)}"
                    f" -> {', '.join(f'{k}={hyper.get(k)}' for k in changed)}): the plan keeps the "
                    "compiled values, and only lr is fed each step. Build a new graph to train "
                    "with other hyper-parameters.")


def _hooks_of(state):
    """The hooks a module (its __dict__) holds, per kind (nn/modules/hooks.py)."""
    return tuple(tuple(state.get(a, ())) for a in _HOOK_ATTRIBUTES)


def _held_as(value):
    """(dtype, device) of a module's local tensor, which Module.to changes in place."""
    if isinstance(value, _C.Tensor):
        return (value.dtype, value.device)
    return None
