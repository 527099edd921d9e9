"""Tensor creation from data, and Tensor basics: repr, operators' scalar handling."""

import numbers

import numpy as np

from oneflowlike import _C

__all__ = ["tensor", "from_numpy", "is_tensor", "as_tensor_like"]


def _numpy_dtype(dtype):
    return {
        _C.dtype.float32: np.float32,
        _C.dtype.float64: np.float64,
        _C.dtype.float16: np.float16,
        _C.dtype.int8: np.int8,
        _C.dtype.int32: np.int32,
        _C.dtype.int64: np.int64,
        _C.dtype.bool: np.bool_,
    }.get(dtype)


def device_of(t):
    """The device of the tensors an op makes for ``t`` (a weight, a mask, a fill): a local
    tensor's, the CPU for a traced value (its graph's placement decides) and for anything else
    (a global tensor's ops place their own)."""
    return t.device if isinstance(t, _C.Tensor) else _C.device("cpu")


def own_copy(t):
    """``t``'s values in memory of their own, for an op whose result equals its input (a flip
    of length 1): torch returns a copy, which writes must not reach ``t`` through. A traced
    value (nn.Graph.build, an op on global tensors) is an op's own output already."""
    return t if _C._is_lazy(t) else t.clone()


def on_host(t):
    """A local tensor as a runtime or a collective takes it: in host memory (a GPU tensor
    copied), without autograd history."""
    t = t.detach() if t.requires_grad else t
    return t if t.device.type == "cpu" else t._to_device("cpu")


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors).

    Python floats become float32 and ints int64 unless ``dtype`` says otherwise, as in torch.
    """
    from oneflowlike import cuda

    cuda.check_device_supported("tensor", device)
    if isinstance(data, _C.Tensor):
        array = data.numpy()
    else:
        array = np.asarray(data)
        if array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)
        if array.dtype.kind == "O":
            raise TypeError(f"[tensor] expected numbers or nested lists of numbers, got {data!r}")
    if dtype is not None:
        if dtype == _C.dtype.bfloat16:
            t = _C.from_numpy(np.require(array, dtype=np.float32, requirements="C"))
            from oneflowlike.ops.creation import cast

            result = cast(t, dtype)
            if device is not None and str(device).startswith("cuda"):
                result = result._to_device(str(device))
            if requires_grad:
                result.requires_grad = True
            return result
        array = array.astype(_numpy_dtype(dtype))
    elif array.dtype == np.uint8 or array.dtype.kind == "u":
        array = array.astype(np.int64)
    result = _C.from_numpy(np.require(array, requirements="C"))
    if device is not None and str(device).startswith("cuda"):
        result = result._to_device(str(device))
    if requires_grad:
        result.requires_grad = True
    return result


def from_numpy(array):
    """A tensor holding a copy of a numpy array (same dtype)."""
    return _C.from_numpy(np.require(array, requirements="C"))


def is_tensor(obj):
    return isinstance(obj, _C.Tensor)


def as_tensor_like(value, like):
    """``value`` as a tensor with the dtype of ``like`` (for number operands)."""
    if isinstance(value, _C.Tensor):
        return value
    if isinstance(value, (numbers.Number, np.number)):
        dtype = like.dtype if _numpy_dtype(like.dtype) is not None else _C.dtype.float32
        if float(value) == value:  # exact as a double: a fill op, which traces (no constant)
            return _C.fill((), dtype, float(value))
        return tensor(np.asarray(value, dtype=_numpy_dtype(dtype)))
    return tensor(value)


def _repr(self):
    if _C._is_lazy(self):
        return self._describe()
    body = np.array2string(self.numpy(), separator=", ", precision=4, prefix="tensor(")
    extras = [f"dtype={self.dtype!r}"]
    if self.device.type != "cpu":  # as torch, which names only devices other than the CPU
        extras.append(f"device='{self.device}'")
    if self.requires_grad:
        extras.append("requires_grad=True")
    return f"tensor({body}, {', '.join(extras)})"


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _array(self, dtype=None):
    a = self.numpy()
    return a.astype(dtype) if dtype is not None else a


def _float(self):
    return float(self.item())


def _int(self):
    return int(self.item())


def _bool(self):
    if self.numel() != 1:
        raise RuntimeError(
            f"[bool] a tensor of {self.numel()} elements has no single truth value"
        )
    return bool(self.item())


def _tolist(self):
    return self.numpy().tolist()


def format_tensor(self, spec):
    """format(t, spec) / f"{t:.4f}": a 0-d tensor formats as its value, as in torch (the usual
    way to print a loss); any other takes no format spec."""
    if self.ndim == 0:
        return format(self.tolist(), spec)  # an int stays one: f"{correct:d}"
    if spec:
        raise TypeError(f"[format] a tensor of shape {tuple(self.shape)} takes no format spec "
                        f"({spec!r}); only a 0-d tensor (a loss, t.sum()) formats as a number.")
    return str(self)


def _stride(self, dim=None):
    """The strides in elements: a local tensor is contiguous (row-major)."""
    strides, step = [], 1
    for extent in reversed(self.shape):
        strides.append(step)
        step *= max(extent, 1)
    strides = tuple(reversed(strides))
    if dim is None:
        return strides
    if isinstance(dim, bool) or not isinstance(dim, int) or not -len(strides) <= dim < len(
            strides):
        raise IndexError(f"[stride] dim must be an int in [{-len(strides)}, "
                         f"{len(strides) - 1}]. However, got {dim!r}." if strides else
                         f"[stride] a 0-d tensor has no dim {dim!r}.")
    return strides[dim]


def _rebuild(array, dtype_name, requires_grad):
    """The tensor _reduce pickled."""
    t = tensor(array)
    dtype = getattr(_C.dtype, dtype_name)
    if t.dtype != dtype:  # bfloat16 travels as float32 (numpy has no bfloat16), exactly
        t = _C.cast(t, dtype)
    return t.requires_grad_() if requires_grad else t


def _reduce(self):
    """Pickling (torch's tensors pickle; a DataLoader worker process sends its batches so): a
    CPU tensor as its values, dtype and requires_grad. Lazy tensors (a graph's values) and
    tensors on other devices are refused naming what to do."""
    if _C._is_lazy(self):
        raise TypeError("[pickle] a value of nn.Graph's build() has no data to pickle: return it "
                        "from build() first.")
    if self.requires_grad and not self.is_leaf:
        raise RuntimeError("[pickle] a tensor computed from others that requires grad would "
                           "lose its graph: pickle its .detach() (or the leaf it comes from).")
    if self.device.type != "cpu":
        raise TypeError(f"[pickle] only CPU tensors pickle. However, got a tensor on "
                        f"{self.device}: move it with .cpu() first.")
    from oneflowlike import _DTYPE_NAMES  # noqa: PLC0415  the package's own table

    name = _DTYPE_NAMES[self.dtype.value]
    return _rebuild, (self.detach().numpy(), name, bool(self.requires_grad))


TENSOR_METHODS = {
    "__reduce__": _reduce,
    "is_lazy": property(_C._is_lazy),
    "__repr__": _repr,
    "__str__": _repr,
    "__len__": _len,
    "__array__": _array,
    "__float__": _float,
    "__int__": _int,
    "__bool__": _bool,
    "tolist": _tolist,
    "__format__": format_tensor,
    "stride": _stride,
    "is_contiguous": lambda self, memory_format=None: True,
}
