"""Global tensors: a logical tensor laid out over a placement by an nd-SBP; each process holds
its rank's piece.

Moving between layouts (``to_global``) and ops on global tensors compile a small logical graph
(the op, or a reshape whose output SBP is the target) and run it on the actor runtime, so the
communication is the boxing the compiler inserts for any graph: there is no second path.
Compiled graphs are cached by signature.
"""

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.framework import job as _job
from oneflowlike.placement import placement as _placement

__all__ = ["GlobalTensor", "local_to_global", "from_logical", "current_tracer", "tracing"]

# The GraphTracer of the nn.Graph being built (None outside build()).
_tracers = []


def current_tracer():
    return _tracers[-1] if _tracers else None


class tracing:  # noqa: N801 (a context manager)
    """Makes ``tracer`` the current one: ops on lazy tensors join its graph."""

    def __init__(self, tracer, owner=None):
        self.tracer = tracer
        self.owner = owner

    def __enter__(self):
        self.tracer.__enter__()
        _tracers.append(self.tracer)
        _tracer_objects.append(self.owner)
        return self.tracer

    def __exit__(self, *exc):
        self.tracer.__exit__(*exc)
        _tracers.pop()
        _tracer_objects.pop()
        return False


def _strings(nd_sbp):
    return [str(s) for s in nd_sbp]


def _region(shape, placement, nd_sbp, rank):
    pid = placement._c.parallel_id_of(rank)
    return tuple(
        slice(b, e) for b, e in _C.logical_region(tuple(shape), _strings(nd_sbp), placement._c, pid)
    )


def _check(shape, placement, nd_sbp, name):
    _C.check_nd_sbp(tuple(shape), _strings(nd_sbp), placement._c, name)


class GlobalTensor:
    """A logical tensor of ``shape`` on ``placement`` with ``sbp``; ``to_local()`` is this rank's
    piece (None when this rank is outside the placement)."""

    is_global = True
    is_local = False

    def __init__(self, local, shape, dtype, placement, sbp):
        self._local = local
        self._shape = tuple(int(d) for d in shape)
        self._dtype = dtype
        self._placement = placement
        self._sbp = tuple(sbp)

    # --- what it is -------------------------------------------------------------------------
    @property
    def shape(self):
        return self._shape

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    def numel(self):
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def dtype(self):
        return self._dtype

    @property
    def placement(self):
        return self._placement

    @property
    def sbp(self):
        return self._sbp

    @property
    def requires_grad(self):
        return False

    def __repr__(self):
        return (
            f"global tensor(shape={self._shape}, dtype={self._dtype!r}, "
            f"placement={self._placement!r}, sbp={self._sbp})"
        )

    # --- moving ----------------------------------------------------------------------------
    def to_local(self):
        """This rank's piece (for a partial-sum layout, this rank's addend)."""
        if self._local is None:
            raise RuntimeError(
                f"[to_local] rank {env.get_rank()} holds no piece of a tensor placed on "
                f"{self._placement!r}."
            )
        return self._local

    def to_global(self, placement=None, sbp=None):
        """The same logical value on ``placement`` with ``sbp`` (the current ones when omitted)."""
        placement = self._placement if placement is None else placement
        if not isinstance(placement, _placement):
            raise TypeError(f"[to_global] placement must be a flow.placement. However, got {placement!r}.")
        nd_sbp = self._sbp if sbp is None else _sbp.normalize(sbp, placement, "to_global")
        if placement == self._placement and nd_sbp == self._sbp:
            return self
        _check(self._shape, placement, nd_sbp, "to_global")
        return _reshard(self, placement, nd_sbp)

    def numpy(self):
        """The logical value (every rank of the placement must call it: it gathers)."""
        whole = self.to_global(sbp=(_sbp.broadcast,) * len(self._placement.hierarchy))
        if whole._local is None:
            raise RuntimeError(
                f"[numpy] rank {env.get_rank()} is outside the placement {self._placement!r}: "
                "only its ranks can read the value."
            )
        return whole._local.numpy()

    def item(self):
        return self.numpy().item()

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __float__(self):
        return float(self.item())

    def __len__(self):
        return self._shape[0]

    # --- ops: each compiled as a small graph ------------------------------------------------
    def __getattr__(self, name):
        method = getattr(_C.Tensor, name, None)
        if method is None or name.startswith("_"):
            raise AttributeError(f"global tensor has no attribute '{name}'")

        def call(*args, **kwargs):
            fn = lambda *xs: getattr(xs[0], name)(*xs[1:], **kwargs)  # noqa: E731
            return apply(fn, self, *args, key=("method", name, repr(sorted(kwargs.items()))))

        return call


def _binary(name):
    def op(self, other):
        fn = getattr(_C.Tensor, name)
        return apply(lambda a, b: fn(a, b), self, other, key=("operator", name))

    return op


def install_operators():
    """Arithmetic operators of global tensors, from the local Tensor's (attached at import)."""
    for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                 "__truediv__", "__rtruediv__", "__matmul__", "__pow__", "__gt__", "__lt__"):
        if hasattr(_C.Tensor, name):
            setattr(GlobalTensor, name, _binary(name))
    GlobalTensor.__neg__ = lambda self: apply(lambda a: -a, self, key=("neg",))


GlobalTensor.__hash__ = object.__hash__


# --- making global tensors ---------------------------------------------------------------------
def local_to_global(local, placement, sbp, shape=None):
    """A global tensor whose piece on this rank is ``local`` (every rank of ``placement`` gives
    its own). The logical shape is ``shape``, or the local shape times the split counts (an
    even split)."""
    if not isinstance(placement, _placement):
        raise TypeError(f"[to_global] placement must be a flow.placement. However, got {placement!r}.")
    nd_sbp = _sbp.normalize(sbp, placement, "to_global")
    rank = env.get_rank()
    if shape is None:
        dims = list(local.shape)
        for s, n in zip(nd_sbp, placement.hierarchy):
            if s.axis is not None:
                if s.axis >= len(dims):
                    raise ValueError(
                        f"[to_global] split axis {s.axis} is out of range for a tensor of shape "
                        f"{tuple(local.shape)} (sbp {nd_sbp})."
                    )
                dims[s.axis] *= n
        shape = tuple(dims)
    shape = tuple(int(d) for d in shape)
    _check(shape, placement, nd_sbp, "to_global")
    if rank not in placement:
        return GlobalTensor(None, shape, local.dtype, placement, nd_sbp)
    want = tuple(r.stop - r.start for r in _region(shape, placement, nd_sbp, rank))
    if tuple(local.shape) != want:
        raise ValueError(
            f"[to_global] rank {rank}'s local tensor must have shape {want}: its piece of a "
            f"{shape} tensor laid out as {nd_sbp} on {placement!r}. However, got "
            f"{tuple(local.shape)}."
        )
    return GlobalTensor(local, shape, local.dtype, placement, nd_sbp)


def from_logical(value, placement, sbp):
    """A global tensor of the logical ``value`` (a Tensor or array that every rank holds alike):
    each rank keeps its region; for a partial-sum dimension the first coordinate keeps the value
    and the others zeros. No communication."""
    nd_sbp = _sbp.normalize(sbp, placement, "to_global")
    array = value.numpy() if isinstance(value, _C.Tensor) else np.asarray(value)
    dtype = value.dtype if isinstance(value, _C.Tensor) else None
    shape = array.shape
    _check(shape, placement, nd_sbp, "to_global")
    rank = env.get_rank()
    local = None
    if rank in placement:
        piece = np.ascontiguousarray(array[_region(shape, placement, nd_sbp, rank)])
        coord = placement._c.coordinate(placement._c.parallel_id_of(rank))
        if any(str(s) == "P" and c != 0 for s, c in zip(nd_sbp, coord)):
            piece = np.zeros_like(piece)
        local = _C.from_numpy(piece)
        if dtype is not None and local.dtype != dtype:
            local = local.to(dtype)
        dtype = local.dtype
    elif dtype is None:
        dtype = _C.from_numpy(np.zeros((0,), array.dtype)).dtype
    return GlobalTensor(local, shape, dtype, placement, nd_sbp)


# --- compiled small graphs ---------------------------------------------------------------------
_cache = {}


class _Compiled:
    """A traced and compiled small graph with its runtime (None when this rank has no part)."""

    def __init__(self, tracer, fetches, outputs):
        rank = env.get_rank()
        self.fetches = fetches  # tensor names
        self.outputs = outputs  # (placement, shape, dtype) per fetch
        self.constants = tracer.constants()
        self.runtime = None
        self.output_sbp = {}
        if rank in tracer.c.ranks():
            plan = tracer.compile([rank])
            self.output_sbp = plan.fetch_sbp
            self.runtime = _job.current().runtime(plan)
            self.runtime.initialize_variables()
            for name, value in self.constants.items():
                self.runtime.write_variable(name, value)

    def run(self, pieces):
        rank = env.get_rank()
        fetched = self.runtime.run_local(pieces) if self.runtime is not None else {}
        results = []
        for name, (placement, shape, dtype) in zip(self.fetches, self.outputs):
            nd_sbp = tuple(_sbp.sbp(s) for s in self.output_sbp.get(name, ["B"] * len(placement.hierarchy)))
            local = fetched.get(name, {}).get(rank)
            results.append(GlobalTensor(local, shape, dtype, placement, nd_sbp))
        return results


_tracer_objects = []  # the _Tracer of each running trace


class _Tracer:
    """A GraphTracer that also remembers which ranks its graph touches and whether build()
    marked a loss."""

    def __init__(self, name, placement):
        self.c = _C.GraphTracer(name, placement._c)
        self.ranks = set(placement.flat_ranks)
        self.loss_marked = False

    def __getattr__(self, name):
        return getattr(self.c, name)


def _reshard(x, placement, nd_sbp):
    key = ("to_global", x.shape, x.dtype, x.placement, x.sbp, placement, nd_sbp)
    compiled = _cache.get(key)
    if compiled is None:
        tracer = _Tracer("to_global", x.placement)
        tracer.ranks |= set(placement.flat_ranks)
        with tracing(tracer.c, tracer):
            lx = tracer.input("x", x.shape, x.dtype, x.placement._c, _strings(x.sbp))
            ly = tracer.to_global(lx, placement._c, _strings(nd_sbp))
        name = tracer.fetch(ly)
        compiled = _cache[key] = _Compiled(tracer, [name], [(placement, x.shape, x.dtype)])
    rank = env.get_rank()
    pieces = {"x": {rank: x._local}} if x._local is not None else {}
    out = compiled.run(pieces)[0]
    # Over a placement dimension of size 1 every SBP is the same layout; the plan may name
    # another one.
    for got, want, n in zip(out.sbp, nd_sbp, placement.hierarchy):
        if got != want and n != 1 and out._local is not None:
            raise AssertionError(f"[to_global] the plan laid the result out as {out.sbp}, not {nd_sbp}")
    out._sbp = nd_sbp
    return out


def apply(fn, *args, key):
    """``fn`` on global tensors (and numbers), as a compiled graph: all global tensors must share
    one placement; the result's SBP is what the compiler's SBP inference picks."""
    globals_ = [a for a in args if isinstance(a, GlobalTensor)]
    placement = globals_[0].placement
    for g in globals_[1:]:
        if g.placement != placement:
            raise ValueError(
                f"[global op] all global tensors must be on one placement. However, got "
                f"{placement!r} and {g.placement!r}; move one with to_global(placement=...)."
            )
    # Local tensors are fed (as the broadcast value), not baked in; other arguments (numbers)
    # are part of the graph and so of its signature.
    signature = tuple(
        ("g", a.shape, a.dtype, a.sbp) if isinstance(a, GlobalTensor)
        else ("l", tuple(a.shape), a.dtype) if isinstance(a, _C.Tensor)
        else ("v", type(a).__name__, repr(a))
        for a in args
    )
    key = ("apply", key, placement, signature)
    compiled = _cache.get(key)
    if compiled is None:
        tracer = _Tracer("global_op", placement)
        names = []
        with tracing(tracer.c, tracer):
            lazy_args = []
            for i, a in enumerate(args):
                if isinstance(a, GlobalTensor):
                    names.append(f"in{i}")
                    lazy_args.append(
                        tracer.input(f"in{i}", a.shape, a.dtype, placement._c, _strings(a.sbp))
                    )
                elif isinstance(a, _C.Tensor):
                    names.append(f"in{i}")
                    lazy_args.append(tracer.input(f"in{i}", tuple(a.shape), a.dtype, placement._c,
                                                  ["B"] * len(placement.hierarchy)))
                else:
                    lazy_args.append(a)
            out = fn(*lazy_args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        fetches = [tracer.fetch(o) for o in outs]
        meta = [(placement, tuple(o.shape), o.dtype) for o in outs]
        compiled = _cache[key] = _Compiled(tracer, fetches, meta)
        compiled.input_names = names
        compiled.single = not isinstance(out, (tuple, list))
    rank = env.get_rank()
    pieces = {}
    tensors = [a for a in args if isinstance(a, (GlobalTensor, _C.Tensor))]
    for name, a in zip(compiled.input_names, tensors):
        local = a._local if isinstance(a, GlobalTensor) else a
        if local is not None:
            pieces[name] = {rank: local.detach() if local.requires_grad else local}
    results = compiled.run(pieces)
    return results[0] if compiled.single else tuple(results)
