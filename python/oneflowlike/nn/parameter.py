"""Parameter: a tensor that a Module registers as one of its trainable weights."""

import weakref

from oneflowlike import _C


class Parameter(_C.Tensor):
    """A leaf tensor marked as a module parameter, as torch.nn.Parameter.

    ``Parameter(data)`` shares ``data``'s storage without its autograd history and requires
    grad unless ``requires_grad=False``. Assigning one to a Module attribute registers it.
    Ops on a parameter return plain tensors.
    """

    def __new__(cls, data=None, requires_grad=True):
        if getattr(data, "is_meta", False):  # Note [Meta tensors]: a meta parameter
            from oneflowlike.framework.meta import MetaTensor

            return MetaTensor(data.shape, data.dtype, data.init, requires_grad, param=True)
        return super().__new__(cls)

    def __init__(self, data, requires_grad=True):
        if not isinstance(data, _C.Tensor):
            raise TypeError(
                f"[Parameter] data must be a Tensor. However, got {type(data).__name__}."
            )
        super().__init__(data)
        # A parameter made of a copy that indexing or a view-like op made (nn.Parameter(w.t()))
        # is a tensor of its own: loading and initialising write into it.
        _C._unmark_indexed_copy(self)
        if requires_grad:
            self.requires_grad = True

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


# Note [Replaced parameters]
# Laying a module out puts new global tensors in its parameter slots (Module.to_global,
# nn.Graph.set_stage, `fc.weight = fc.weight.to_global(sbp=...)`), while an optimizer built
# before still holds the old objects. Each new value remembers, by weak reference, every value
# it replaced (transitively), so nn.Graph can tell that an optimizer's parameter is now held by
# its modules in another layout and train exactly the optimizer's parameters. Weak references:
# an old value (a whole logical tensor) is not kept alive by its successor.


def record_replacement(old, new):
    """Notes that ``new`` took ``old``'s place in a module's parameter slot."""
    if old is None or new is None or old is new:
        return
    new._ofl_replaced = getattr(old, "_ofl_replaced", ()) + (weakref.ref(old),)


def replaced_values(value):
    """The values ``value`` replaced that are still alive (Note [Replaced parameters])."""
    return [old for old in (ref() for ref in getattr(value, "_ofl_replaced", ())) if old is not None]
