"""Random numbers: manual_seed, randn, rand, normal, *_like, and dropout.

Values come from a counter-based generator (Philox), so a draw is a pure function of the seed,
the generator's counter and each element's position: reproducible after ``manual_seed`` and the
same however a tensor is split across ranks.
"""

import numbers

from oneflowlike import _C
from oneflowlike.ops.creation import resolve_device

__all__ = ["manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "randn", "rand", "randint", "normal",
           "randn_like", "rand_like", "dropout"]

_UINT64_MASK = (1 << 64) - 1


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _dtype(dtype):
    return _C.dtype.float32 if dtype is None else dtype


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad = True
    return t


def manual_seed(seed):
    """Seeds the global generator (any int in [-2**63, 2**64), as torch) and restarts it."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"[manual_seed] seed must be an int. However, got {seed!r}.")
    seed = int(seed)
    if not -(1 << 63) <= seed <= _UINT64_MASK:
        raise ValueError(f"[manual_seed] seed must be in [-2**63, 2**64). However, got {seed}.")
    _C.manual_seed(seed & _UINT64_MASK)


def get_rng_state():
    """The global generator's state: an int64 tensor of its seed (as int64 bits) and next
    counter (torch gives a ByteTensor; both are opaque). set_rng_state puts it back, and the
    draws after it repeat."""
    import numpy as np

    return _C.from_numpy(np.array(_C.random_state(), dtype=np.int64))


def set_rng_state(new_state):
    """Puts the global generator back at a state get_rng_state returned."""
    import numpy as np

    data = np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state)
    if data.dtype != np.int64 or data.shape != (2,):
        raise ValueError(f"[set_rng_state] takes the state get_rng_state returns (2 int64 "
                         f"values). However, got {data.dtype} of shape {data.shape}.")
    _C.set_random_state(int(data[0]), int(data[1]))


def initial_seed():
    """The seed of the global generator."""
    return _C.initial_seed()


def seed():
    """Seeds the global generator from the operating system and returns that seed."""
    import os

    s = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    _C.manual_seed(s)
    return s


def _piece(draw, a, b, shape, dtype):
    """Under Note [Sharded creation]: this rank's piece of a draw (None where it holds none),
    reserving the whole draw; on the meta device (Note [Meta tensors]) a meta tensor; else
    False (make the whole tensor)."""
    from oneflowlike.framework import meta, sharded_creation

    if meta.active():
        return (meta.normal if draw is _C.normal_region else meta.uniform)(a, b, shape, dtype)

    request = sharded_creation.current()
    if request is None:
        return False
    return draw(float(a), float(b), shape, dtype, request.region_of(shape, dtype))


def randn(*size, dtype=None, device=None, requires_grad=False):
    """Standard normal values: flow.randn(2, 3) or flow.randn((2, 3)). On ``device`` ("cuda",
    a flow.device; the CPU by default) with the values the CPU would give."""
    piece = _piece(_C.normal_region, 0.0, 1.0, _size(size), _dtype(dtype))
    if piece is not False:
        if getattr(piece, "is_meta", False):
            piece.requires_grad = requires_grad
        return piece
    t = _C.randn(_size(size), _dtype(dtype), resolve_device("randn", device))
    return _finish(t, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    """Uniform values in [0, 1): flow.rand(2, 3) or flow.rand((2, 3))."""
    piece = _piece(_C.uniform_region, 0.0, 1.0, _size(size), _dtype(dtype))
    if piece is not False:
        if getattr(piece, "is_meta", False):
            piece.requires_grad = requires_grad
        return piece
    t = _C.rand(_size(size), _dtype(dtype), resolve_device("rand", device))
    return _finish(t, requires_grad)


def randint(low, high=None, size=None, dtype=None, device=None):
    """Integers uniform in [low, high): flow.randint(10, (3,)) or flow.randint(2, 10, (3, 4)),
    int64 unless ``dtype`` says otherwise. Drawn from a float64 uniform (exact for ranges
    below 2**53), so a value is the same whatever the placement splits."""
    if high is None or (size is None and not isinstance(high, numbers.Integral)):
        low, high, size = 0, low, high if size is None else size  # randint(high, size)
    if isinstance(size, numbers.Integral):
        size = (size,)
    if size is None or high is None:
        raise TypeError("[randint] needs high and size: randint(high, size) or "
                        "randint(low, high, size).")
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"[randint] {name} must be an int. However, got {v!r}.")
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"[randint] needs low < high. However, got low={low}, high={high}.")
    if not -(2 ** 53) <= low < high <= 2 ** 53:
        raise ValueError(f"[randint] low and high must lie within [-2**53, 2**53] (they are "
                         f"drawn in float64). However, got low={low}, high={high}.")
    dtype = _C.dtype.int64 if dtype is None else dtype
    if dtype.is_floating_point and dtype not in (_C.dtype.float32, _C.dtype.float64):
        raise TypeError(f"[randint] dtype must be an integer type, float32 or float64. However, "
                        f"got {dtype!r}.")
    if not dtype.is_floating_point:
        bits = 8 * dtype.itemsize - 1
        if dtype == _C.dtype.bool or low < -(2 ** bits) or high - 1 > 2 ** bits - 1:
            raise ValueError(f"[randint] values in [{low}, {high}) do not fit {dtype!r}.")
    from oneflowlike.framework import meta, sharded_creation

    if meta.active():
        raise NotImplementedError("[randint] cannot make a meta tensor (integers are not "
                                  "initialisers): make it after laying the model out.")
    uniform = _piece(_C.uniform_region, 0.0, 1.0, _size((size,)), _C.dtype.float64)
    if uniform is not False:
        sharded_creation.current().dtype = dtype  # drawn in float64, on every rank
    if uniform is None:  # Note [Sharded creation]: this rank holds no piece
        return None
    if uniform is False:
        uniform = _C.rand(_size((size,)), _C.dtype.float64, resolve_device("randint", device))
    where = uniform.device
    scaled = _C.scalar_mul(uniform, float(high - low))  # in [0, high - low]
    offsets = _C.cast(scaled, _C.dtype.int64)  # truncation of non-negatives: floor
    top = _C.fill((), _C.dtype.int64, float(high - low - 1), where)  # rounding may reach it
    offsets = _C.where(_C.gt(offsets, top), top, offsets)
    return _C.cast(_C.scalar_add(offsets, low), dtype)


def normal(mean, std, size, dtype=None, device=None, requires_grad=False):
    """Normal values with float ``mean`` and ``std`` in a tensor of ``size``."""
    for name, v in (("mean", mean), ("std", std)):
        if isinstance(v, _C.Tensor):
            raise TypeError(f"[normal] {name} must be a float (tensor {name} is not supported). "
                            f"However, got a tensor of shape {tuple(v.shape)}.")
    if isinstance(size, numbers.Integral):
        size = (size,)
    piece = _piece(_C.normal_region, mean, std, tuple(size), _dtype(dtype))
    if piece is not False:
        if getattr(piece, "is_meta", False):
            piece.requires_grad = requires_grad
        return piece
    t = _C.normal(float(mean), float(std), tuple(size), _dtype(dtype),
                  resolve_device("normal", device))
    return _finish(t, requires_grad)


def randn_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002 (torch's)
    """randn of input's shape, dtype and device unless ``dtype`` or ``device`` say otherwise."""
    t = _C.randn(tuple(input.shape), dtype or input.dtype,
                 resolve_device("randn_like", device, like=input))
    return _finish(t, requires_grad)


def rand_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    t = _C.rand(tuple(input.shape), dtype or input.dtype,
                resolve_device("rand_like", device, like=input))
    return _finish(t, requires_grad)


def _eager_global_like(name, draw):
    """randn_like / rand_like of a global tensor, outside a trace: flow.``draw`` (randn,
    rand) with the input's placement, each rank its piece of the one-device draw (Note
    [Sharded creation]), laid out as the input (a partial sum's ranks each hold it whole). Traced
    as an op of the input, it would be a random op in a compiled graph, drawn anew at each call
    and taken for a function of the input by autograd, which refuses to differentiate it (Note
    [Eager global draws] in framework/global_tensor.py)."""
    def like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
        import oneflowlike as flow  # the global-aware creation functions, once installed
        from oneflowlike import sbp as _sbp

        if device is not None:
            raise ValueError(f"[{name}] a global tensor has a placement, not a device: its "
                             f"values go where it is. However, got device={device!r}.")
        t = getattr(flow, draw)(*input.shape, dtype=dtype or input.dtype,
                                placement=input.placement, sbp=_sbp.summed(input.sbp))
        return _finish(t, requires_grad)

    return like


def refuse_inplace_dropout(inplace):
    """Ops here never write their inputs: dropout's (and its global form's) inplace=True."""
    if inplace:
        raise NotImplementedError("[dropout] inplace=True is not supported; use inplace=False.")


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Zeroes each element with probability ``p`` and scales the others by 1 / (1 - p); the
    input itself when not training or p == 0."""
    refuse_inplace_dropout(inplace)
    return _C.dropout(input, float(p), bool(training))


NN_FUNCTIONAL = {"dropout": dropout}
TENSOR_METHODS = {}
