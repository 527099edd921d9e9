"""The meta device: shapes without storage, for models that fit no single process.

Note [Meta tensors]: under ``with flow.device("meta"):`` the creation functions (randn, rand,
normal, zeros, ones, full, empty) and the layers' parameter initialisation make MetaTensors: a
shape, a dtype and how the values would be made (an Init), nothing allocated. A random Init
reserves its counters of the global generator when it is made, exactly as the eager call would
have, so the same code after the same ``manual_seed`` records the same draws. ``nn.init``
functions replace a meta tensor's Init (reserving as they would eagerly). ``Module.to_global`` (or
``t.to_global``) then makes each rank's piece directly from the Init (Note [Sharded creation]):
the values equal an eager one-device initialisation, and no rank ever holds a whole tensor.
Nothing reads or computes on a meta tensor: ops, numpy() and graphs refuse it, naming it.
"""

import numbers

from oneflowlike import _C
from oneflowlike import sbp as _sbp

_depth = [0]


def active():
    """Whether creation functions make meta tensors now."""
    return _depth[0] > 0


class MetaDevice:
    """``flow.device("meta")``: a context manager under which tensors are made on the meta
    device (torch's ``with torch.device("meta"):``)."""

    type = "meta"
    index = 0

    def __enter__(self):
        _depth[0] += 1
        return self

    def __exit__(self, *exc):
        _depth[0] -= 1
        return False

    def __eq__(self, other):
        return isinstance(other, MetaDevice) or str(other) == "meta"

    def __hash__(self):
        return hash("meta")

    def __repr__(self):
        return "device(type='meta')"

    __str__ = lambda self: "meta"  # noqa: E731


class _DeviceType(type):
    """The type of ``flow.device``: calling it makes a device (a C++ device, or the meta device),
    and ``isinstance(x, flow.device)`` holds for both, as ``isinstance(x, torch.device)``."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, (_C.device, MetaDevice))

    def __call__(cls, spec, index=None):
        if isinstance(spec, MetaDevice):
            return spec
        if isinstance(spec, _C.device) and index is None:
            return spec
        if not isinstance(spec, str) or (index is not None and (
                isinstance(index, bool) or not isinstance(index, numbers.Integral))):
            from oneflowlike.framework.tensor_methods import describe_argument

            raise TypeError(f"[device] takes a device string ('cpu', 'cuda', 'cuda:1', 'meta') "
                            f"and an optional int index. However, got {describe_argument(spec)}"
                            f"{'' if index is None else ', ' + describe_argument(index)}.")
        if spec.split(":")[0] == "meta":
            return MetaDevice()
        return _C.device(spec if index is None else f"{spec}:{int(index)}")


class device(metaclass=_DeviceType):
    """flow.device("cpu"), ("cuda", 1), ("cuda:1"), or ("meta"): the meta device (a context
    manager, Note [Meta tensors]); the others are the C++ devices. ``isinstance(x,
    flow.device)`` holds for every device, as torch's."""


class Init:
    """How a tensor's values are made: ("normal", mean, std) or ("uniform", low, high) with the
    counters (seed, offset) reserved for the whole draw, or ("fill", value); rows of the first
    axis listed in zero_rows are zero afterwards (an embedding's padding row)."""

    def __init__(self, kind, a, b=0.0, seed=0, offset=0):
        self.kind, self.a, self.b, self.seed, self.offset = kind, float(a), float(b), seed, offset
        self.zero_rows = []

    @staticmethod
    def draw(kind, a, b, shape):
        numel = 1
        for d in shape:
            numel *= d
        seed, offset = _C.reserve_random(numel)
        return Init(kind, a, b, seed, offset)

    def piece(self, shape, dtype, region):
        """The values at ``region`` ([(begin, end)] per axis) of the whole tensor."""
        dims = tuple(e - b for b, e in region)
        if self.kind == "fill":
            local = _C.fill(dims, dtype, self.a)
        else:
            local = _C.random_region(self.kind == "normal", self.a, self.b, tuple(shape), dtype,
                                     self.seed, self.offset, region)
        for row in self.zero_rows:
            begin, end = region[0]
            if begin <= row < end:
                local[row - begin] = 0.0
        return local


class MetaTensor:
    """A tensor on the meta device: shape, dtype and an Init, no storage (Note [Meta
    tensors])."""

    is_meta = True
    is_global = False
    is_local = True
    is_lazy = False
    grad = None
    grad_fn = None
    is_leaf = True

    def __init__(self, shape, dtype, init, requires_grad=False, param=False):
        self._shape = tuple(int(d) for d in shape)
        self._dtype = dtype
        self.init = init
        self.requires_grad = requires_grad
        self._param = param  # made by nn.Parameter: a module registers it as a parameter

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def device(self):
        return MetaDevice()

    def dim(self):
        return len(self._shape)

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    def numel(self):
        n = 1
        for d in self._shape:
            n *= d
        return n

    def __len__(self):
        return self._shape[0]

    def detach(self):
        return MetaTensor(self._shape, self._dtype, self.init)

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    def __setitem__(self, index, value):
        """Only what layers do while initialising: a row of the first axis set to zero."""
        if (isinstance(index, numbers.Integral) and not isinstance(index, bool)
                and value == 0 and self._shape and -self._shape[0] <= index < self._shape[0]):
            self.init.zero_rows.append(index % self._shape[0])
            return
        raise _no_data(f"setting [{index!r}] to {value!r}")

    def to_global(self, placement=None, sbp=None):
        """The global tensor this meta tensor describes, on ``placement`` with ``sbp``: each rank
        makes its piece from the Init (Note [Sharded creation])."""
        from oneflowlike.framework import global_tensor as gt

        if placement is None or sbp is None:
            raise ValueError("[to_global] a meta tensor needs both placement and sbp.")
        nd = _sbp.normalize(sbp, placement, "to_global")
        gt._check(self._shape, placement, nd, "to_global")
        region = gt.local_region(self._shape, placement, nd)
        local = None if region is None else self.init.piece(self._shape, self._dtype, region)
        g = gt.GlobalTensor(gt.as_addend(local, placement, nd), self._shape, self._dtype, placement, nd)
        g.requires_grad = self.requires_grad
        return g

    def __repr__(self):
        return f"tensor(..., device='meta', size={self._shape}, dtype={self._dtype!r})"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _no_data(f"'{name}'")

    def __array__(self, dtype=None):
        raise _no_data("numpy()")

    def numpy(self):
        raise _no_data("numpy()")


class MetaDataError(RuntimeError, AttributeError):
    """An operation that needs data got a meta tensor (also an AttributeError, so that
    getattr(t, name, default) keeps working on one)."""


def _no_data(what):
    return MetaDataError(f"[meta] a meta tensor has no data, so {what} cannot run: lay the "
                        "module out first (module.to_global(placement, sbp) makes each rank's "
                        "piece from its initialiser).")


def _refuse_operator(name):
    def op(self, *args, **kwargs):
        raise _no_data(f"'{name}'")

    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__neg__",
              "__getitem__", "__lt__", "__gt__", "__le__", "__ge__"):
    setattr(MetaTensor, _name, _refuse_operator(_name))


def materialize(module):
    """Replaces the module's meta parameters and buffers by local tensors made whole from their
    Inits (one process holding the model, as after an eager initialisation). Returns it."""
    from oneflowlike.nn.parameter import Parameter

    for sub in module.modules():
        for registry in (sub._parameters, sub._buffers):
            for key, value in list(registry.items()):
                if not getattr(value, "is_meta", False):
                    continue
                local = value.init.piece(value.shape, value.dtype,
                                         [(0, d) for d in value.shape])
                if registry is sub._parameters:
                    local = Parameter(local, requires_grad=value.requires_grad)
                registry[key] = local
    return module


def normal_or_tensor(mean, std, shape, dtype):
    """What a layer draws its weights from: a meta tensor on the meta device, else a tensor."""
    return normal(mean, std, shape, dtype) if active() else _C.normal(mean, std, shape, dtype)


def uniform_or_tensor(low, high, shape, dtype):
    return uniform(low, high, shape, dtype) if active() else _C.uniform(low, high, shape, dtype)


def normal(mean, std, shape, dtype):
    """A meta tensor of a normal draw, its counters reserved (Note [Meta tensors])."""
    return MetaTensor(shape, dtype, Init.draw("normal", mean, std, shape))


def uniform(low, high, shape, dtype):
    return MetaTensor(shape, dtype, Init.draw("uniform", low, high, shape))


def fill(value, shape, dtype):
    return MetaTensor(shape, dtype, Init("fill", value))
