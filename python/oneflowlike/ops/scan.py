"""cumsum, the Python side of oneflowlike/ops/scan.h (Note [Running sums]: each line summed in
order in double, or int64, so CPU and CUDA give the same bits)."""

from oneflowlike import _C

__all__ = ["cumsum"]

_PROMOTED = (_C.dtype.bool, _C.dtype.int8, _C.dtype.int32)


def cumsum(input, dim, *, dtype=None):  # noqa: A002 (torch's names)
    """The running sums of ``input`` along ``dim``. As torch: ``dtype`` casts the input first;
    without it, bool and integer inputs give int64."""
    if dtype is not None:
        input = _C.cast(input, dtype)  # noqa: A001
    elif input.dtype in _PROMOTED:
        input = _C.cast(input, _C.dtype.int64)  # noqa: A001
    return _C.cumsum(input, dim)


TENSOR_METHODS = {"cumsum": cumsum}
