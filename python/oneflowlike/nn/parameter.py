"""Parameter: a tensor that a Module registers as one of its trainable weights."""

from oneflowlike import _C


class Parameter(_C.Tensor):
    """A leaf tensor marked as a module parameter, as torch.nn.Parameter.

    ``Parameter(data)`` shares ``data``'s storage without its autograd history and requires
    grad unless ``requires_grad=False``. Assigning one to a Module attribute registers it.
    Ops on a parameter return plain tensors.
    """

    def __init__(self, data, requires_grad=True):
        if not isinstance(data, _C.Tensor):
            raise TypeError(
                f"[Parameter] data must be a Tensor. However, got {type(data).__name__}."
            )
        super().__init__(data)
        if requires_grad:
            self.requires_grad = True

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()
