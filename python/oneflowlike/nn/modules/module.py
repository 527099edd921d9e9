"""Module: the base class of flow.nn layers, with torch.nn.Module's interface.

A module holds parameters, buffers and child modules in three ordered dicts filled by attribute
assignment (``self.weight = Parameter(...)``, ``self.fc = Linear(...)``) or by
register_parameter / register_buffer / add_module. Calling a module runs its forward().
"""

import collections
import collections.abc

import numpy as np

from oneflowlike import _C
from oneflowlike.autograd import no_grad
from oneflowlike.nn.parameter import Parameter, record_replacement
from oneflowlike.nn.modules import hooks


class _IncompatibleKeys(
    collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
):
    """What load_state_dict returns (as torch): the keys it did not find or did not use."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _add_indent(text, spaces):
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


def _shape(t):
    return tuple(t.shape)


def _zeros_like(t):
    return _C.fill(_shape(t), t.dtype, 0.0, t.device)


_FLOATING = (_C.dtype.float16, _C.dtype.bfloat16, _C.dtype.float32, _C.dtype.float64)


def _move_arguments(args, kwargs):
    """(device, dtype) of Module.to's torch forms (to_arguments, Tensor.to's parser); the dtype
    must be floating, as torch requires of a module's."""
    from oneflowlike.ops.creation import resolve_device, to_arguments

    device, dtype, _ = to_arguments("Module.to", args, kwargs)
    if dtype is not None and dtype not in _FLOATING:
        raise TypeError(f"[Module.to] a module's dtype must be floating (its parameters are). "
                        f"However, got {dtype}.")
    if device is not None:
        device = str(resolve_device("Module.to", device))  # checked; "cuda" -> "cuda:<current>"
    return device, dtype


class Module:
    """Base class of all layers: subclasses set attributes in __init__ and define forward().

    forward() must use only flow ops, flow.nn.functional and tensor methods, and take no
    decision on tensor values: the same module runs eagerly and traced into a graph.
    """

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", {})

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f"[Module] {type(self).__name__} must define forward(). However, it has none."
        )

    def __call__(self, *args, **kwargs):
        from oneflowlike.framework.global_tensor import current_tracer
        from oneflowlike.nn import graph_sharing

        if graph_sharing._holders and current_tracer() is None:
            # Note [Graphs sharing modules]: values a graph trained, before an eager call.
            graph_sharing.module_call(self)
        if any(name in self.__dict__ for name in hooks.ATTRIBUTES):
            return hooks.call_with_hooks(self, args, kwargs)
        return self.forward(*args, **kwargs)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) before each forward (Note in nn/modules/hooks.py)."""
        return hooks.register(self, "_forward_pre_hooks", hook, with_kwargs, prepend,
                              "register_forward_pre_hook")

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) once the outputs' gradients are known (Note [Module
        backward hooks] in nn/modules/backward_hooks.py)."""
        return hooks.register(self, "_backward_pre_hooks", hook, False, prepend,
                              "register_full_backward_pre_hook")

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) once the inputs' gradients are known (Note
        [Module backward hooks] in nn/modules/backward_hooks.py)."""
        return hooks.register(self, "_backward_hooks", hook, False, prepend,
                              "register_full_backward_hook")

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args, output) after each forward (Note in nn/modules/hooks.py)."""
        return hooks.register(self, "_forward_hooks", hook, with_kwargs, prepend,
                              "register_forward_hook")

    # ---- registration ------------------------------------------------------------------------

    def _check_initialised(self, what):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"[Module] cannot assign {what} before Module.__init__() is called: call "
                f"super().__init__() first in {type(self).__name__}.__init__"
            )

    def _check_new_name(self, op, name, registry):
        if not isinstance(name, str):
            raise TypeError(f"[{op}] name must be a str. However, got {type(name).__name__}.")
        if name == "" or "." in name:
            raise KeyError(f'[{op}] name must be non-empty and contain no ".". However, got '
                           f"{name!r}.")
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"[{op}] attribute {name!r} already exists on "
                           f"{type(self).__name__}.")

    def register_parameter(self, name, param):
        """Adds ``param`` (a Parameter, or None for an absent one) under ``name``."""
        self._check_initialised("parameters")
        self._check_new_name("register_parameter", name, self._parameters)
        if param is not None and not isinstance(param, Parameter) and not getattr(
                param, "_param", False) is True:
            raise TypeError(
                f"[register_parameter] {name!r} must be a flow.nn.Parameter or None. However, "
                f"got {type(param).__name__}: wrap it as flow.nn.Parameter(tensor)."
            )
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Adds a tensor that is state but not a parameter; ``persistent=False`` keeps it out of
        state_dict."""
        self._check_initialised("buffers")
        self._check_new_name("register_buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, _C.Tensor) and not getattr(
                tensor, "is_global", False):
            raise TypeError(f"[register_buffer] {name!r} must be a Tensor or None. However, got "
                            f"{type(tensor).__name__}.")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        """Adds a child module (or None) under ``name``."""
        self._check_initialised("modules")
        self._check_new_name("add_module", name, self._modules)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"[add_module] {name!r} must be a Module or None. However, got "
                            f"{type(module).__name__}.")
        self._modules[name] = module

    register_module = add_module

    def _forget(self, name, *registries):
        self.__dict__.pop(name, None)
        for registry in registries:
            registry.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter) or getattr(value, "_param", False) is True:
            self._check_initialised("parameters")
            self._forget(name, self._buffers, self._modules)
            self.register_parameter(name, value)
            return
        params = self.__dict__.get("_parameters")
        if params is not None and name in params:
            if getattr(value, "is_global", False):
                # A parameter laid out over a placement (module.fc.weight = w.to_global(...)):
                # a leaf, as torch's nn.Parameter(...) of a redistributed tensor, whatever
                # eager autograd recorded for the move.
                if value.grad_fn is not None:
                    value = value.detach()
                old = params[name]
                if old is not None and not getattr(old, "is_global", False):
                    value._ofl_trainable = old.requires_grad
                elif old is not None:
                    value._ofl_trainable = getattr(old, "_ofl_trainable", True)
                record_replacement(old, value)
                params[name] = value
                return
            if value is not None:
                raise TypeError(
                    f"[Module] cannot assign an object of type {type(value).__name__} to "
                    f"parameter {name!r}: a flow.nn.Parameter or None is required."
                )
            params[name] = None
            return
        modules = self.__dict__.get("_modules")
        if isinstance(value, Module):
            self._check_initialised("modules")
            self._forget(name, self._parameters, self._buffers)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"[Module] cannot assign an object of type {type(value).__name__} to child "
                    f"module {name!r}: a Module or None is required."
                )
            modules[name] = None
            return
        buffers = self.__dict__.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, _C.Tensor):
                raise TypeError(
                    f"[Module] cannot assign an object of type {type(value).__name__} to buffer "
                    f"{name!r}: a Tensor or None is required."
                )
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # Only called when normal lookup fails: look in the three registries.
        state = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = state.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def get_parameter(self, target):
        """The parameter at a dotted path such as "blocks.0.attn.weight"."""
        return self._get_member(target, "_parameters", "parameter", "get_parameter")

    def get_buffer(self, target):
        """The buffer at a dotted path such as "norm.running_mean"."""
        return self._get_member(target, "_buffers", "buffer", "get_buffer")

    def _get_member(self, target, registry, kind, op):
        path, _, name = target.rpartition(".")
        owner = self.get_submodule(path)
        if name not in getattr(owner, registry):
            raise AttributeError(f"[{op}] {path or type(self).__name__} has no {kind} {name!r} "
                                 f"(looking up {target!r}).")
        return getattr(owner, registry)[name]

    def get_submodule(self, target):
        """The module at a dotted path such as "blocks.0.attn" ("" is the module itself)."""
        module = self
        if target == "":
            return module
        walked = []
        for item in target.split("."):
            child = module._modules.get(item) if isinstance(module, Module) else None
            if child is None:
                where = ".".join(walked) or type(self).__name__
                raise AttributeError(f"[get_submodule] {where} has no submodule {item!r} "
                                     f"(looking up {target!r}).")
            walked.append(item)
            module = child
        return module

    # ---- iteration ---------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(dotted name, module) for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            child_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, child_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry, prefix, recurse, remove_duplicate):
        seen = set()
        owners = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                  if recurse else [(prefix, self)])
        for owner_prefix, owner in owners:
            for name, value in getattr(owner, registry).items():
                if value is None:
                    continue
                if remove_duplicate:
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                yield owner_prefix + ("." if owner_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(dotted name, parameter); a parameter shared by two modules comes once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    # ---- modes and gradients -----------------------------------------------------------------

    def train(self, mode=True):
        """Sets training mode on this module and its descendants; returns self."""
        if not isinstance(mode, bool):
            raise ValueError(f"[train] mode must be a bool. However, got {mode!r}.")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        """Evaluation mode (dropout off); same as train(False)."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none=True):
        """Clears the parameters' gradients: to None (the default, as torch) or to zeros."""
        for param in self.parameters():
            if param.grad is not None:
                param.grad = None if set_to_none else _zeros_like(param.grad)

    def apply(self, fn):
        """Calls ``fn`` on every descendant and then on self (e.g. to initialise weights)."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- devices and dtypes ------------------------------------------------------------------

    def to(self, *args, **kwargs):
        """Moves and/or casts every parameter and buffer, as torch.nn.Module.to: ``to(device)``,
        ``to(dtype)`` (floating ones only), ``to(device, dtype)``, ``to(tensor)``. The tensors
        keep their identity (their data is replaced), so an optimizer built before sees them
        moved; gradients move with them. Returns self."""
        device, dtype = _move_arguments(args, kwargs)

        def move(t):
            if dtype is not None and t.dtype in _FLOATING:
                t = _C.cast(t, dtype)
            return t if device is None else _C.to_device(t, device)

        return self._apply(move, "to")

    def cuda(self, device=None):
        """Every parameter and buffer on CUDA device ``device`` (an index, "cuda:i" or a
        flow.device; cuda:0 by default)."""
        if device is None or isinstance(device, int):
            device = "cuda" if device is None else f"cuda:{device}"
        return self.to(device)

    def cpu(self):
        return self.to("cpu")

    def float(self):  # noqa: A003 (torch's name)
        return self.to(_C.dtype.float32)

    def double(self):
        return self.to(_C.dtype.float64)

    def half(self):
        return self.to(_C.dtype.float16)

    def bfloat16(self):
        return self.to(_C.dtype.bfloat16)

    def _apply(self, fn, op):
        """Replaces the values of every parameter and buffer t (and of its gradient) by fn(t), in
        place (``t.data = ...``): the objects stay, so whoever holds them sees the new values."""
        from oneflowlike.nn import graph_sharing

        if graph_sharing._holders:  # values a graph trained (Note [Graphs sharing modules])
            graph_sharing.release(graph_sharing.module_values(self))
        tensors = {}  # id -> (name, tensor): a shared tensor once
        for prefix, module in self.named_modules():
            for registry in (module._parameters, module._buffers):
                for name, t in registry.items():
                    if t is not None:
                        tensors.setdefault(id(t), (prefix + ("." if prefix else "") + name, t))
        # Every tensor is checked before any moves, so a refusal leaves the module as it was.
        for full, t in tensors.values():
            if getattr(t, "is_meta", False):
                raise NotImplementedError(
                    f"[Module.{op}] '{full}' was built on the meta device and has no values to "
                    "move: lay the module out with to_global(placement, sbp), which makes each "
                    "value from its initialiser (Note [Meta tensors]).")
            if getattr(t, "is_global", False):
                raise NotImplementedError(
                    f"[Module.{op}] '{full}' is a global tensor: its placement says where it "
                    "lives; move it with to_global(placement=flow.placement('cuda', ...)) "
                    "instead.")
        with no_grad():
            for _, t in tensors.values():
                new = fn(t)
                if new is not t:
                    t.data = new
                if t.grad is not None:
                    moved = fn(t.grad)
                    if moved is not t.grad:
                        t.grad = moved
        return self

    # ---- state dict --------------------------------------------------------------------------

    def _local_state(self):
        """(name, registry, value) for this module's own parameters and persistent buffers."""
        for name, param in self._parameters.items():
            if param is not None:
                yield name, self._parameters, param
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers:
                yield name, self._buffers, buffer

    def _default_state(self, name):
        """The value load_state_dict takes for this module's entry ``name`` when a state dict
        lacks it, or None (missing). BatchNorm's num_batches_tracked, which torch checkpoints
        from before it existed lack, as torch's _load_from_state_dict fills it in."""
        return None

    def _state_owners(self, prefix=""):
        """(key prefix, module) for self and every descendant, shared ones under every name
        (as torch's state_dict lists a tied weight under each of its names)."""
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_owners(prefix + name + ".")

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """{dotted name: tensor} of parameters and persistent buffers. The tensors share the
        module's storage, detached (``keep_vars=True`` returns the parameters themselves)."""
        from oneflowlike.nn import graph_sharing

        if graph_sharing._holders:
            graph_sharing.release(graph_sharing.module_values(self))  # values a graph trained
        if destination is None:
            destination = collections.OrderedDict()
        for owner_prefix, owner in self._state_owners(prefix):
            for name, _, value in owner._local_state():
                destination[owner_prefix + name] = value if keep_vars else value.detach()
        return destination

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values of ``state_dict`` into this module's parameters and buffers.

        Every shape must match. With ``strict=True`` (the default) the keys must match
        state_dict() exactly. Nothing is copied when a check fails. Returns the missing and
        unexpected keys, as torch.
        """
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"[load_state_dict] state_dict must be a mapping. However, got "
                            f"{type(state_dict).__name__}.")
        expected, missing, mismatches, pending = set(), [], [], []
        for owner_prefix, owner in self._state_owners():
            for name, registry, value in owner._local_state():
                key = owner_prefix + name
                expected.add(key)
                if key in state_dict:
                    source = state_dict[key]
                else:
                    source = owner._default_state(name)
                    if source is None:
                        missing.append(key)
                        continue
                if isinstance(source, np.ndarray):
                    source = _C.from_numpy(np.require(source, requirements="C"))
                if not (isinstance(source, _C.Tensor) or getattr(source, "is_global", False)):
                    raise TypeError(f'[load_state_dict] the value of "{key}" must be a Tensor. '
                                    f"However, got {type(source).__name__}.")
                if _shape(source) != _shape(value):
                    kind = "param" if registry is owner._parameters else "buffer"
                    mismatches.append(
                        f"size mismatch for {key}: copying a {kind} with shape {_shape(source)} "
                        f"from checkpoint, the shape in current model is {_shape(value)}."
                    )
                    continue
                pending.append((value, source))
        unexpected = [key for key in state_dict if key not in expected]
        errors = list(mismatches)
        if strict and unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if strict and missing:
            errors.insert(0, "Missing key(s) in state_dict: "
                          + ", ".join(f'"{k}"' for k in missing) + ".")
        if errors:
            hint = ""
            if strict and (missing or unexpected):
                hint = ("\nHINT: strict=False skips missing and unexpected keys (not size "
                        "mismatches).")
            raise RuntimeError(
                f"[load_state_dict] Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors) + hint
            )
        with no_grad():
            for value, source in pending:
                _copy_into(value, source)
        return _IncompatibleKeys(missing, unexpected)

    # ---- printing ----------------------------------------------------------------------------

    def extra_repr(self):
        """The module's own settings for its repr, as "in_features=4, out_features=2"."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): {_add_indent(repr(module), 2)}"
                       for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if len(extra_lines) == 1 and not child_lines:
            body = extra_lines[0]
        elif lines:
            body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{type(self).__name__}({body})"


def _copy_into(value, source):
    """value[...] = source (converting dtype), in place, as torch's load_state_dict: an optimizer
    built before loading keeps updating the loaded weights. Called under no_grad. A global
    value takes a global source in any layout, or a local one holding the whole value (the
    same on every rank), piece by piece."""
    if getattr(value, "is_global", False):
        from oneflowlike.framework import global_tensor as _gt

        if getattr(source, "is_global", False):
            source = source.to_global(placement=value.placement, sbp=value.sbp)
        else:
            source = _gt.from_logical(source.numpy(), value.placement, value.sbp)
        value, source = value._local, source._local
        if value is None:
            return
    if source.dtype != value.dtype:
        source = _C.cast(source, value.dtype)
    elif source._shares_storage_with(value):  # e.g. its own state_dict()
        source = source.clone()
    _C._assign_(value, source, "load_state_dict")


def to_factory_device(module, device):
    """A layer built with ``device=`` (torch's factory argument) moved there: its values are made
    on the CPU, as the CPU would make them, then copied (nothing to do for the CPU, also under
    the meta device)."""
    if device is not None and str(_C.device(str(device))) != "cpu:0":
        module.to(device)


def factory_dtype(op, device, dtype):
    """The dtype for a module's new parameters (float32 by default); ``device`` is checked here
    and applied by to_factory_device (the factory arguments of torch's layers)."""
    from oneflowlike import cuda

    cuda.check_device_supported(op, device)
    return _C.dtype.float32 if dtype is None else dtype
