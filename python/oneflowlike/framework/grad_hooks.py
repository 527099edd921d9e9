"""Tensor.register_hook and Tensor.grad_fn on local tensors, as torch's (Note [Gradient hooks] in
oneflowlike/autograd.h): hook(grad) sees the tensor's gradient, summed over the backward, and
may return a replacement; Tensor.retain_grad() and retains_grad come from the C++ binding."""

from oneflowlike import _C


class RemovableHandle:
    """What register_hook returns: remove() takes the hook out (again is harmless), also once
    the tensor has gone (a computed tensor's hooks live on its node). It keeps nothing alive."""

    def __init__(self, tensor, hook_id):
        self._remove = tensor._hook_remover(hook_id)
        self.id = hook_id

    def remove(self):
        self._remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class GradFn:
    """A computed tensor's grad_fn: the op that made it (name() gives torch's style, e.g.
    "MulBackward"). A leaf's grad_fn is None."""

    def __init__(self, op):
        self._op = op

    def name(self):
        if self._op[:1].isupper():  # an autograd.Function's class name, as it is
            return self._op + "Backward"
        return "".join(part.capitalize() for part in self._op.split("_")) + "Backward"

    def __repr__(self):
        return f"<{self.name()}>"


def register_hook(self, hook):
    """hook(grad) -> None or a replacement gradient, called when backward has this tensor's
    gradient (Note [Gradient hooks]). Local tensors outside nn.Graph.build only."""
    if _C._is_lazy(self):
        raise RuntimeError("[register_hook] a value traced inside nn.Graph.build has no "
                           "gradient of its own to hook: the graph's backward is compiled.")
    if not callable(hook):
        raise TypeError(f"[register_hook] hook must be callable. However, got "
                        f"{type(hook).__name__}.")
    return RemovableHandle(self, self._register_hook(hook))


def grad_fn(self):
    name = self._grad_fn_name
    return None if name is None else GradFn(name)


def install():
    _C.Tensor.register_hook = register_hook
    _C.Tensor.grad_fn = property(grad_fn)
