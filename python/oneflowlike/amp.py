"""Mixed precision in eager mode: flow.autocast, as torch.autocast (Note [Eager autocast] in
oneflowlike/autocast.h). For nn.Graph use graph.config.enable_amp (Note [Mixed precision] in
compiler/passes/amp.cpp)."""

import functools

from oneflowlike import _C

__all__ = ["autocast"]


class autocast:  # noqa: N801 (torch's name)
    """Within the block, matmul-class ops (matmul, linear, bmm and their gradients) run in
    ``dtype`` on this thread: their float32 inputs are cast down and their outputs cast back to
    float32. Everything else, and parameters and their gradients, stays float32.

    ``device_type``: "cpu" or "cuda" (the same policy for both). ``dtype``: flow.bfloat16 (the
    default). Unlike torch.autocast the outputs are float32, not bfloat16: this build's other
    kernels compute in float32. float16 is refused until dynamic loss scaling (GradScaler)
    exists. Usable as a decorator too.
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        del cache_enabled  # torch's weight-cast cache: casts here are ops, freed with the graph
        if device_type not in ("cpu", "cuda"):
            raise ValueError("[autocast] device_type must be 'cpu' or 'cuda'. However, got "
                             f"{device_type!r}.")
        if dtype is None:
            dtype = _C.dtype.bfloat16
        if not isinstance(dtype, _C.dtype) or dtype not in (_C.dtype.bfloat16,
                                                           _C.dtype.float16):
            raise TypeError("[autocast] dtype must be flow.bfloat16 (or flow.float16). However, "
                            f"got {dtype!r}.")
        if dtype == _C.dtype.float16:
            raise NotImplementedError(
                "[autocast] float16 needs dynamic loss scaling (GradScaler), which is not done "
                "yet: small gradients would silently flush to 0. Use flow.bfloat16.")
        self.dtype = dtype if enabled else _C.dtype.float32
        self._previous = []

    def __enter__(self):
        self._previous.append(_C.autocast_dtype())
        _C.set_autocast_dtype(self.dtype)
        return self

    def __exit__(self, *exc):
        _C.set_autocast_dtype(self._previous.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped
