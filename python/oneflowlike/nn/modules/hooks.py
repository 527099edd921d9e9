"""Forward hooks of modules, as torch's: register_forward_pre_hook(hook) runs hook(module, args)
before forward (a result other than None replaces the positional arguments: a tuple, or one
value), register_forward_hook(hook) runs hook(module, args, output) after it (a result other
than None replaces the output); with_kwargs=True passes the keyword arguments too (a pre-hook
then returns (args, kwargs) or None), prepend=True runs the hook before the others. Each
returns a handle whose remove() unregisters it.

Inside nn.Graph.build the hooks run while the graph is traced, on its traced values: what they
compute becomes part of the plan, and a hook that keeps a value keeps a traced one (it has data
only as a graph output). Backward hooks: backward_hooks.py.
"""

import itertools

from oneflowlike.nn.modules import backward_hooks

_ids = itertools.count()
# Where a module keeps its hooks (by handle id); a module with none of them is called directly.
ATTRIBUTES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


class RemovableHandle:
    """What register_*_hook returns: remove() takes the hook out (once; again is harmless)."""

    def __init__(self, hooks):
        self._hooks = hooks
        self.id = next(_ids)

    def remove(self):
        self._hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register(module, attribute, hook, with_kwargs, prepend, op):
    if not callable(hook):
        raise TypeError(f"[{op}] hook must be callable. However, got {type(hook).__name__}.")
    hooks = module.__dict__.setdefault(attribute, {})
    handle = RemovableHandle(hooks)
    entry = (hook, with_kwargs)
    if prepend:
        rest = dict(hooks)
        hooks.clear()
        hooks[handle.id] = entry
        hooks.update(rest)
    else:
        hooks[handle.id] = entry
    return handle


def call_with_hooks(module, args, kwargs):
    """module.forward(*args, **kwargs) between its pre-hooks and hooks."""
    for hook, with_kwargs in list(module.__dict__.get("_forward_pre_hooks", {}).values()):
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise TypeError(f"[forward_pre_hook] a hook registered with_kwargs=True "
                                    f"returns (args, kwargs) or None. However, "
                                    f"{getattr(hook, '__name__', hook)!s} returned "
                                    f"{type(result).__name__}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    state = None
    if backward_hooks.wanted(module):
        state, args = backward_hooks.wrap_inputs(module, args, kwargs)
    output = module.forward(*args, **kwargs)
    for hook, with_kwargs in list(module.__dict__.get("_forward_hooks", {}).values()):
        result = hook(module, args, kwargs, output) if with_kwargs else hook(module, args, output)
        if result is not None:
            output = result
    if state is not None:
        output = backward_hooks.wrap_outputs(state, output)
    return output
