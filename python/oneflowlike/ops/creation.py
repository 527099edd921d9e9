"""Creation: zeros, ones, full, empty, arange, *_like, and dtype conversion."""

import builtins
import numbers
import operator

from oneflowlike import _C

__all__ = ["zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like", "empty_like",
           "arange", "linspace", "cast"]


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def resolve_device(op, device, like=None):
    """The _C.device a creation function makes its tensor on: ``device`` ("cpu", "cuda",
    "cuda:1" or a flow.device), else the device of ``like`` (for *_like), else the CPU. A CUDA
    device this process cannot use raises RuntimeError saying why, as every CUDA path does."""
    from oneflowlike import cuda

    if device is None:
        return like.device if like is not None else _C.device("cpu")
    cuda.check_device_supported(op, device)
    return _C.device(str(device))


def _make(op, shape, value, dtype, requires_grad, device, like=None):
    from oneflowlike.framework import meta, sharded_creation

    if meta.active() and like is None:  # Note [Meta tensors]
        t = meta.fill(value, shape, dtype if dtype is not None else _C.dtype.float32)
        return t.requires_grad_(requires_grad)

    request = sharded_creation.current()
    if request is not None:  # Note [Sharded creation]: this rank's piece only
        dtype = dtype if dtype is not None else _C.dtype.float32
        region = request.region_of(shape, dtype)
        if region is None:
            return None
        return _C.fill(tuple(e - b for b, e in region), dtype, float(value))
    t = _C.fill(shape, dtype if dtype is not None else _C.dtype.float32, float(value),
                resolve_device(op, device, like))
    if requires_grad:
        t.requires_grad = True
    return t


def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros: flow.zeros(2, 3) or flow.zeros((2, 3)), on the CPU unless ``device``
    ("cuda", "cuda:1", a flow.device) says otherwise; so do the other creation functions."""
    return _make("zeros", _size(size), 0.0, dtype, requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _make("ones", _size(size), 1.0, dtype, requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """torch.empty: a tensor whose values the caller will overwrite. Here it holds zeros, as
    Tensor.new_empty does: no uninitialised memory reaches users."""
    return _make("empty", _size(size), 0.0, dtype, requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = _C.dtype.int64 if isinstance(fill_value, builtins.int) and not isinstance(
            fill_value, builtins.bool) else _C.dtype.float32
    return _make("full", tuple(size), fill_value, dtype, requires_grad, device)


def zeros_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002 (torch's)
    """Zeros of input's shape, dtype and device unless ``dtype`` or ``device`` say otherwise."""
    return _make("zeros_like", input.shape, 0.0, dtype or input.dtype, requires_grad, device,
                 like=input)


def ones_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return _make("ones_like", input.shape, 1.0, dtype or input.dtype, requires_grad, device,
                 like=input)


def empty_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """torch.empty_like, holding zeros (empty)."""
    return _make("empty_like", input.shape, 0.0, dtype or input.dtype, requires_grad, device,
                 like=input)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return _make("full_like", input.shape, fill_value, dtype or input.dtype, requires_grad,
                 device, like=input)


def arange(start, end=None, step=1, dtype=None, device=None):
    """flow.arange(5), flow.arange(1, 5), flow.arange(0, 1, 0.25): int64 for integer arguments,
    float32 otherwise, as in torch."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        all_int = all(isinstance(v, builtins.int) for v in (start, end, step))
        dtype = _C.dtype.int64 if all_int else _C.dtype.float32
    return _C.arange(float(start), float(end), float(step), dtype,
                     resolve_device("arange", device))


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """``steps`` values from ``start`` to ``end``, evenly spaced (both ends included), as
    torch.linspace: computed in float64, then cast to ``dtype`` (float32 by default)."""
    if isinstance(steps, builtins.bool) or not isinstance(steps, builtins.int) or steps < 0:
        raise ValueError(f"[linspace] steps must be an int >= 0. However, got {steps!r}.")
    dtype = _C.dtype.float32 if dtype is None else dtype
    where = resolve_device("linspace", device)
    if steps <= 1:
        t = _C.fill((steps,), dtype, float(start), where)
    else:
        step = (float(end) - float(start)) / (steps - 1)
        positions = _C.arange(0.0, float(steps), 1.0, _C.dtype.float64, where)
        t = _C.cast(_C.scalar_add(_C.scalar_mul(positions, step), float(start)), dtype)
    if requires_grad:
        t.requires_grad = True
    return t


def cast(input, dtype):  # noqa: A002
    return _C.cast(input, dtype)


def to_arguments(where, args, kwargs):
    """(device, dtype, copy) of torch's ``to`` forms, shared by Tensor.to and Module.to:
    to(device), to(dtype), to(device, dtype), to(tensor) (its device and dtype), each followed
    by the booleans non_blocking and copy, which may also be keywords with device= and dtype=.
    A device may be an index (a CUDA device, as torch takes it). non_blocking is accepted and
    has no effect (the copies return once done); memory_format only as None (tensors here are
    contiguous). Anything else, or one argument given twice, raises TypeError naming it: a
    misspelt keyword must not be dropped silently."""
    kwargs = dict(kwargs)
    memory_format = kwargs.pop("memory_format", None)
    if memory_format is not None:
        raise TypeError(f"[{where}] memory_format={memory_format!r} is not supported: tensors "
                        "here are contiguous (leave it out).")
    allowed = ("device", "dtype", "non_blocking", "copy")
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"[{where}] unexpected keyword arguments {unknown}; it takes "
                        f"{', '.join(allowed)}.")
    given = {}

    def give(name, value):
        if name in given or name in kwargs:
            raise TypeError(f"[{where}] got multiple values for argument '{name}'.")
        given[name] = value

    flags = iter(["non_blocking", "copy"])
    for a in args:
        if isinstance(a, bool):
            name = next(flags, None)
            if not given or name is None:
                raise TypeError(f"[{where}] the booleans non_blocking and copy come after a "
                                f"device, a dtype or a tensor. However, got {args!r}.")
            give(name, a)
        elif given.keys() & {"non_blocking", "copy"}:
            raise TypeError(f"[{where}] expected non_blocking and copy last. However, got "
                            f"{args!r}.")
        elif isinstance(a, _C.dtype):
            give("dtype", a)
        elif isinstance(a, (str, _C.device)):
            give("device", a)
        elif _is_index(a):
            give("device", a)  # an index: made "cuda:N" below, with device=N's
        elif isinstance(a, _C.Tensor):
            give("device", a.device)
            give("dtype", a.dtype)
        else:
            raise TypeError(f"[{where}] expected a device, a dtype or a tensor. However, got "
                            f"{a!r}.")
    given.update(kwargs)
    if _is_index(given.get("device")):  # device=1, as torch takes it
        given["device"] = f"cuda:{operator.index(given['device'])}"
    return given.get("device"), given.get("dtype"), bool(given.get("copy", False))


def _is_index(x):
    """An integer that is not a bool (numpy's integers too): a CUDA device index."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _to(self, *args, **kwargs):
    """tensor.to(dtype), tensor.to("cuda:0"), tensor.to("cpu"), tensor.to(other), or both, with
    torch's non_blocking and copy (to_arguments). Inside nn.Graph.build() a dtype is always a
    cast: under mixed precision the traced dtype may not be the one the graph runs in."""
    from oneflowlike import cuda

    device, dtype, copy = to_arguments("Tensor.to", args, kwargs)
    same_dtype = dtype is None or (dtype == self.dtype and not self.is_lazy)
    out = self if same_dtype else _C.cast(self, dtype)
    if device is not None:
        cuda.check_device_supported("to", device)
        target = str(_C.device(str(device)))  # "cuda" -> "cuda:<current device>"
        if str(out.device) != target:
            if out.is_lazy:
                raise ValueError(
                    f"[to] inside nn.Graph.build() the placement decides where values live: a "
                    f"traced value cannot move to {target}. Run the graph on "
                    "flow.placement('cuda', ...) instead.")
            return _C.to_device(out, target)  # autograd follows it (Note [Device copies])
    return out.clone() if copy and out is self else out


def _new_factory(op, value):
    """Tensor.new_zeros / new_ones / new_empty (torch's): a new tensor of ``size`` with this
    tensor's dtype and device unless ``dtype`` or ``device`` say otherwise."""
    def method(self, *size, dtype=None, device=None, requires_grad=False):
        return _make(op, _size(size), value, dtype or self.dtype, requires_grad,
                     self.device if device is None else device)

    method.__name__ = op
    return method


def _new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return _make("new_full", tuple(size), fill_value, dtype or self.dtype, requires_grad,
                 self.device if device is None else device)


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    from oneflowlike.ops.core import tensor

    return tensor(data, dtype=dtype or self.dtype,
                  device=self.device if device is None else device, requires_grad=requires_grad)


_raw_clone = _C.Tensor.clone


def _clone(self):
    """A copy of the values in new memory; where autograd records (self requires grad), a node
    of it, so the gradient flows back to self, as torch's clone (a plain copy had none: the
    gradient through it was silently lost)."""
    if self.requires_grad and _C.is_grad_enabled() and not self.is_lazy:
        return self * 1.0  # scalar_mul: the same values bit for bit, and its gradient is dy
    return _raw_clone(self)


TENSOR_METHODS = {
    "clone": _clone,
    "new_zeros": _new_factory("new_zeros", 0.0),
    "new_ones": _new_factory("new_ones", 1.0),
    "new_empty": _new_factory("new_empty", 0.0),  # zeros: no uninitialised memory reaches users
    "new_full": _new_full,
    "new_tensor": _new_tensor,
    "to": _to,
    "cpu": lambda self: _to(self, "cpu"),
    "cuda": lambda self, device=None: _to(self, "cuda" if device is None else f"cuda:{device}"),
    # A copy that indexing or a view-like op made (writes into it refused) becomes a tensor of
    # its own, as torch's contiguous() copies a non-contiguous view.
    "contiguous": lambda self: _raw_clone(self) if _C._is_indexed_copy(self) else self,
    "float": lambda self: _C.cast(self, _C.dtype.float32),
    "double": lambda self: _C.cast(self, _C.dtype.float64),
    "half": lambda self: _C.cast(self, _C.dtype.float16),
    "long": lambda self: _C.cast(self, _C.dtype.int64),
    "int": lambda self: _C.cast(self, _C.dtype.int32),
    "bool": lambda self: _C.cast(self, _C.dtype.bool),
    "type_as": lambda self, other: _C.cast(self, other.dtype),
}
