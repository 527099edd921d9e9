"""Shape ops with PyTorch names: transpose/permute, cat/concat, split, chunk, narrow, stack and
Tensor.__getitem__ (basic indexing: ints, slices, Ellipsis, None)."""

import builtins
import numbers
import operator

from oneflowlike import _C
from oneflowlike.ops.core import device_of

__all__ = ["transpose", "permute", "cat", "concat", "split", "chunk", "narrow", "stack",
           "unbind"]


def _dim(dim, ndim, op):
    """``dim`` normalised against ``ndim`` (negative counts from the end), as in torch."""
    try:
        dim = operator.index(dim)
    except TypeError:
        raise TypeError(f"[{op}] dim must be an int. However, got {dim!r}.") from None
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"[{op}] dimension out of range: expected in [{-ndim}, {ndim - 1}] for a {ndim}-d "
            f"tensor. However, got {dim}."
        )
    return dim + ndim if dim < 0 else dim


def _reshape(x, shape):
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return _C.reshape(x, shape)


def copy_not_view(out, source):
    """Note [Copies where torch gives views]: ``out`` as an op made it from ``source``; where it
    is a copy (transposes, slices, pieces and expansions copy here, where torch gives views
    sharing the source's memory), in-place writes into it are refused, since they would never
    reach ``source`` (they used to vanish silently). Returns ``out``."""
    if not out.is_lazy and not out._shares_storage_with(source):
        _C._mark_indexed_copy(out)
    return out


def transpose(input, dim0, dim1):
    """``input`` with axes dim0 and dim1 swapped."""
    ndim = input.ndim
    d0, d1 = _dim(dim0, max(ndim, 1), "transpose"), _dim(dim1, max(ndim, 1), "transpose")
    perm = list(range(ndim))
    if ndim > 0:
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return copy_not_view(_C.transpose(input, perm), input)


def permute(input, *dims):
    """``input`` with axes reordered: output axis j is input axis dims[j]."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    return copy_not_view(_C.transpose(input, [operator.index(d) for d in dims]), input)


def _t(self):
    """The 2-d transpose (1-d and 0-d tensors come back unchanged), as torch.Tensor.t()."""
    if self.ndim > 2:
        raise ValueError(f"[t] expects a tensor with at most 2 dims. However, got {self.ndim}.")
    return copy_not_view(_C.transpose(self, list(range(self.ndim))[::-1]), self)


def _T(self):
    """All axes reversed."""
    return copy_not_view(_C.transpose(self, list(range(self.ndim))[::-1]), self)


def _mT(self):
    """The last two axes swapped (torch's Tensor.mT: a batch of matrices transposed)."""
    if self.ndim < 2:
        raise ValueError(f"[mT] expects a tensor of at least 2 dims. However, got {self.ndim}.")
    return transpose(self, -2, -1)


def cat(tensors, dim=0):
    """Concatenates ``tensors`` along ``dim`` (mixed dtypes are promoted)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("[concat] expects a non-empty list of tensors. However, got none.")
    return _C.concat(tensors, operator.index(dim))


concat = cat


def split(tensor, split_size_or_sections, dim=0):
    """Pieces of ``tensor`` along ``dim``: of size split_size_or_sections each (the last may be
    smaller), or of the listed sizes. Returns a tuple, as torch.split."""
    d = _dim(dim, tensor.ndim, "split")
    extent = tensor.shape[d]
    if isinstance(split_size_or_sections, (numbers.Integral,)) and not isinstance(
        split_size_or_sections, builtins.bool
    ):
        size = int(split_size_or_sections)
        if size <= 0 and not (size == 0 and extent == 0):
            raise ValueError(f"[split] split_size must be positive. However, got {size}.")
        sizes = [size] * (extent // size) if size > 0 else [0]
        if size > 0 and extent % size:
            sizes.append(extent % size)
        if not sizes:
            sizes = [0]
    else:
        sizes = [operator.index(s) for s in split_size_or_sections]
    return tuple(copy_not_view(piece, tensor) for piece in _C.split(tensor, d, sizes))


def chunk(input, chunks, dim=0):
    """Up to ``chunks`` pieces of equal size (the last may be smaller), as torch.chunk."""
    chunks = operator.index(chunks)
    if chunks <= 0:
        raise ValueError(f"[chunk] chunks must be positive. However, got {chunks}.")
    d = _dim(dim, input.ndim, "chunk")
    extent = input.shape[d]
    size = max(1, -(-extent // chunks)) if extent else 0
    if size == 0:
        return tuple(copy_not_view(piece, input) for piece in _C.split(input, d, [0] * chunks))
    return split(input, size, d)


def _slice_along(input, d, start, stop, step=1):
    starts = [0] * input.ndim
    stops = list(input.shape)
    steps = [1] * input.ndim
    starts[d], stops[d], steps[d] = start, stop, step
    return _C.slice(input, starts, stops, steps)


def narrow(input, dim, start, length):
    """input[..., start:start+length, ...] on axis ``dim``."""
    d = _dim(dim, input.ndim, "narrow")
    extent = input.shape[d]
    start, length = operator.index(start), operator.index(length)
    if not -extent <= start <= extent:
        raise IndexError(
            f"[narrow] start must be in [{-extent}, {extent}] for dim {dim} of size {extent}. "
            f"However, got {start}."
        )
    if start < 0:
        start += extent
    if length < 0 or start + length > extent:
        raise ValueError(
            f"[narrow] start + length must lie within dim {dim} of size {extent}. However, got "
            f"start {start} and length {length}."
        )
    return copy_not_view(_slice_along(input, d, start, start + length), input)


def stack(tensors, dim=0):
    """Joins tensors of one shape along a new axis ``dim``."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("[stack] expects a non-empty list of tensors. However, got none.")
    shape = tuple(tensors[0].shape)
    for k, t in enumerate(tensors):
        if tuple(t.shape) != shape:
            raise ValueError(
                f"[stack] all tensors must have one shape. However, got tensors[{k}] "
                f"{tuple(t.shape)} and tensors[0] {shape}."
            )
    d = _dim(dim, len(shape) + 1, "stack")
    new_shape = shape[:d] + (1,) + shape[d:]
    return _C.concat([_reshape(t, new_shape) for t in tensors], d)


def _split_method(self, split_size, dim=0):
    return split(self, split_size, dim)


def _permute_method(self, *dims):
    return permute(self, *dims)


def _index_error_for_int(index, axis, extent):
    return IndexError(
        f"[getitem] index {index} is out of bounds for dimension {axis} with size {extent}."
    )


def _basic_index(self, index, op):
    """(starts, stops, steps, result shape) of basic indexing: ints (negative too), slices with
    positive steps, Ellipsis and None."""
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if isinstance(item, _C.Tensor) or isinstance(item, (list, builtins.bool)):
            raise TypeError(
                f"[{op}] advanced indexing with {type(item).__name__} indices is not "
                "supported: index with ints, slices, Ellipsis and None (or one bool mask)."
            )
        if not (
            item is None
            or item is Ellipsis
            or isinstance(item, slice)
            or hasattr(item, "__index__")
        ):
            raise TypeError(
                f"[{op}] indices must be ints, slices, Ellipsis or None (advanced indexing is "
                f"not supported). However, got {item!r}."
            )
    if builtins.sum(1 for item in index if item is Ellipsis) > 1:
        raise IndexError(f"[{op}] an index can only have a single ellipsis ('...').")
    consumed = builtins.sum(1 for item in index if item is not None and item is not Ellipsis)
    ndim = self.ndim
    if consumed > ndim:
        raise IndexError(
            f"[{op}] too many indices for a tensor of dimension {ndim}: got {consumed}."
        )
    if any(item is Ellipsis for item in index):
        at = next(i for i, item in enumerate(index) if item is Ellipsis)
        index = index[:at] + (slice(None),) * (ndim - consumed) + index[at + 1 :]
    else:
        index = index + (slice(None),) * (ndim - consumed)

    shape = list(self.shape)
    starts, stops, steps = [0] * ndim, list(shape), [1] * ndim
    out_shape = []  # the result's shape, with int axes dropped and None axes inserted
    axis = 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        extent = shape[axis]
        if isinstance(item, slice):
            step = 1 if item.step is None else operator.index(item.step)
            if step <= 0:
                raise ValueError(
                    f"[{op}] slice step must be positive (negative steps are not supported). "
                    f"However, got {step} for dimension {axis}."
                )
            start, stop, _ = item.indices(extent)
            stop = builtins.max(stop, start)
            starts[axis], stops[axis], steps[axis] = start, stop, step
            out_shape.append(-(-(stop - start) // step))
        else:
            i = operator.index(item)
            if not -extent <= i < extent:
                raise _index_error_for_int(i, axis, extent)
            if i < 0:
                i += extent
            starts[axis], stops[axis] = i, i + 1
        axis += 1
    return starts, stops, steps, out_shape


def _getitem(self, index):
    """Basic indexing: ints (negative too), slices with positive steps, Ellipsis and None."""
    starts, stops, steps, out_shape = _basic_index(self, index, "getitem")
    shape = list(self.shape)
    sliced = any(
        starts[a] != 0 or stops[a] != shape[a] or steps[a] != 1 for a in range(self.ndim)
    )
    if not sliced:  # still a new tensor (a view), as torch returns for x[:] or x[None]
        return _C.reshape(self, out_shape)
    piece = _reshape(_C.slice(self, starts, stops, steps), out_shape)
    _C._mark_indexed_copy(piece)  # a copy, where torch gives a view: refuse writes into it
    return piece


def _is_mask(index):
    return isinstance(index, _C.Tensor) and index.dtype == _C.dtype.bool


def index_put(input, index, value):  # noqa: A002 (torch's names)
    """``input`` with ``value`` written at ``index`` (what ``input[index] = value`` writes), out
    of place: basic indices take a value broadcast to what ``input[index]`` gives; a bool mask
    (the tensor's shape, or its leading dims) takes a number or a one-element tensor."""
    if isinstance(value, numbers.Number) and not isinstance(value, _C.Tensor):
        value = _C.fill((), input.dtype if not isinstance(value, float) or
                        input.dtype.is_floating_point else _C.dtype.float32, float(value),
                        device_of(input))
    if not isinstance(value, _C.Tensor):
        raise TypeError(f"[setitem] the value must be a number or a tensor. However, got "
                        f"{type(value).__name__}.")
    if value.dtype != input.dtype:
        value = _C.cast(value, input.dtype)
    if _is_mask(index):
        mask_shape, shape = tuple(index.shape), tuple(input.shape)
        if mask_shape != shape[:len(mask_shape)]:
            raise IndexError(f"[setitem] a bool mask must have the tensor's shape or its leading "
                             f"dims. However, got mask {mask_shape} for a tensor {shape}.")
        if value.numel() != 1:
            raise ValueError(
                "[setitem] t[mask] = v needs v to be a number or a one-element tensor: how many "
                "elements a mask selects depends on its values. However, got a value of shape "
                f"{tuple(value.shape)}; use flow.where(mask, v, t) for a value of t's shape.")
        mask = _reshape(index, mask_shape + (1,) * (len(shape) - len(mask_shape)))
        return _C.where(mask, _reshape(value, ()), input)
    starts, stops, steps, out_shape = _basic_index(input, index, "setitem")
    region = [-(-(stop - start) // step) for start, stop, step in zip(starts, stops, steps)]
    try:
        value = value.expand(*out_shape) if tuple(value.shape) != tuple(out_shape) else value
    except (ValueError, TypeError):
        raise ValueError(f"[setitem] the value of shape {tuple(value.shape)} must broadcast to "
                         f"the indexed shape {tuple(out_shape)}.") from None
    value = _reshape(value, region)
    like = tuple(input.shape)
    placed = _C.slice_grad(value, like, starts, stops, steps)
    inside = _C.slice_grad(_C.fill(tuple(region), _C.dtype.bool, 1.0, device_of(input)), like,
                           starts, stops, steps)
    return _C.where(inside, placed, input)


def unbind(input, dim=0):  # noqa: A002
    """The slices of ``input`` along ``dim``, each without that dim (a tuple, as torch)."""
    d = _dim(dim, input.ndim, "unbind")
    shape = tuple(input.shape)
    rest = shape[:d] + shape[d + 1:]
    return tuple(copy_not_view(_reshape(piece, rest), input)
                 for piece in _C.split(input, d, [1] * shape[d]))


TENSOR_METHODS = {
    "permute": _permute_method,
    "transpose": transpose,
    "t": _t,
    "T": property(_T),
    "mT": property(_mT),
    "split": _split_method,
    "chunk": chunk,
    "narrow": narrow,
    "__getitem__": _getitem,
    "unbind": unbind,
}
