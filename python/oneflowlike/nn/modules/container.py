"""Containers: Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict (torch.nn's)."""

import collections.abc
import operator

from oneflowlike.nn.modules.module import Module


def _index(op, idx, size):
    """``idx`` (an int, negative counts from the end) as a position in [0, size)."""
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"[{op}] index {idx} is out of range for {size} modules.")
    return idx + size if idx < 0 else idx


def _check_module(op, module):
    if not isinstance(module, Module):
        raise TypeError(f"[{op}] expects Modules. However, got {type(module).__name__}.")
    return module


class Sequential(Module):
    """Runs its modules in order, each on the previous one's output:
    Sequential(Linear(4, 8), ReLU()) or Sequential(OrderedDict(fc=..., act=...))."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, _check_module("Sequential", module))
        else:
            for k, module in enumerate(args):
                self.add_module(str(k), _check_module("Sequential", module))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index("Sequential", idx, len(self))]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index("Sequential", idx, len(self))]
        self._modules[key] = _check_module("Sequential", module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), _check_module("Sequential", module))
        return self

    def forward(self, input):  # noqa: A002 (torch's name)
        for module in self:
            input = module(input)  # noqa: A001
        return input


class ModuleList(Module):
    """A list of modules whose parameters belong to the owner; names are "0", "1", ..."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(_index("ModuleList", idx, len(self)))]

    def __setitem__(self, idx, module):
        key = str(_index("ModuleList", idx, len(self)))
        self._modules[key] = _check_module("ModuleList", module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), _check_module("ModuleList", module))
        return self

    def extend(self, modules):
        if not isinstance(modules, collections.abc.Iterable):
            raise TypeError(f"[ModuleList] extend expects an iterable of Modules. However, got "
                            f"{type(modules).__name__}.")
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        """Puts ``module`` before position ``index`` (renumbering the ones after it)."""
        _check_module("ModuleList", module)
        modules = list(self._modules.values())
        index = operator.index(index)
        modules.insert(index, module)
        self._modules.clear()
        for k, m in enumerate(modules):
            self._modules[str(k)] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            "[ModuleList] has no forward(): iterate over it and call the modules.")


class ModuleDict(Module):
    """A dict of modules whose parameters belong to the owner, in insertion order."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, _check_module("ModuleDict", module))

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key):
        return self._modules.pop(key)

    def clear(self):
        self._modules.clear()

    def update(self, modules):
        """Adds (name, module) pairs from a mapping or an iterable of pairs."""
        items = modules.items() if isinstance(modules, collections.abc.Mapping) else modules
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"[ModuleDict] update expects a mapping or (name, module) "
                                f"pairs. However, got an element {item!r}.")
            self[item[0]] = item[1]

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            "[ModuleDict] has no forward(): look modules up by name and call them.")


def _as_parameter(op, value):
    """A Parameter as it is; a tensor made one (as torch's containers do)."""
    from oneflowlike import _C
    from oneflowlike.nn.parameter import Parameter

    if isinstance(value, Parameter) or getattr(value, "_param", False) is True:
        return value
    if isinstance(value, _C.Tensor):
        return Parameter(value)
    raise TypeError(f"[{op}] holds parameters (tensors). However, got {type(value).__name__}.")


class ParameterList(Module):
    """A list of parameters that belong to the owner; names are "0", "1", ... (tensors given
    become Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[str(_index("ParameterList", idx, len(self)))]

    def __setitem__(self, idx, value):
        key = str(_index("ParameterList", idx, len(self)))
        self._parameters[key] = _as_parameter("ParameterList", value)

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def append(self, value):
        self.register_parameter(str(len(self)), _as_parameter("ParameterList", value))
        return self

    def extend(self, values):
        if not isinstance(values, collections.abc.Iterable):
            raise TypeError(f"[ParameterList] extend expects an iterable of tensors. However, "
                            f"got {type(values).__name__}.")
        for value in values:
            self.append(value)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError("[ParameterList] has no forward(): index it.")


class ParameterDict(Module):
    """A dict of parameters by str key that belong to the owner (tensors given become
    Parameters)."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.update(values)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, value):
        if key in self._parameters:
            self._parameters[key] = _as_parameter("ParameterDict", value)
        else:
            self.register_parameter(key, _as_parameter("ParameterDict", value))

    def __delitem__(self, key):
        del self._parameters[key]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def update(self, values):
        items = values.items() if hasattr(values, "items") else values  # a ParameterDict too
        for key, value in items:
            self[key] = value

    def forward(self, *args, **kwargs):
        raise NotImplementedError("[ParameterDict] has no forward(): index it.")
