"""nn.Flatten and nn.Unflatten (torch's): reshapes as layers, for Sequential models."""

from oneflowlike.nn.modules.module import Module


class Flatten(Module):
    """Axes start_dim..end_dim merged into one (by default all but the batch axis)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):  # noqa: A002 (torch's name)
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Axis ``dim`` split into ``unflattened_size`` (one entry may be -1)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):  # noqa: A002
        ndim = input.ndim
        if not -ndim <= self.dim < ndim:
            raise IndexError(f"[Unflatten] dim {self.dim} is out of range for a {ndim}-d input "
                             f"of shape {tuple(input.shape)}.")
        d = self.dim % ndim
        shape = tuple(input.shape)
        return input.reshape(shape[:d] + self.unflattened_size + shape[d + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
