"""Global tensors: a logical tensor laid out over a placement by an nd-SBP; each process holds
its rank's piece.

Moving between layouts (``to_global``) and ops on global tensors compile a small logical graph
(the op, or a reshape whose output SBP is the target) and run it on the actor runtime, so the
communication is the boxing the compiler inserts for any graph: there is no second path.
Compiled graphs are cached by signature.
"""

import functools
import re
import threading

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.framework import async_runs
from oneflowlike.framework import job as _job
from oneflowlike.placement import placement as _placement

__all__ = ["GlobalTensor", "local_to_global", "from_logical", "current_tracer", "tracing"]

# The GraphTracer of the nn.Graph being built (None outside build()).
# The running traces of this thread, innermost last: the C++ tracer of each and its _Tracer (or
# None). Per thread, as the C++ side's current tracer is: the runs thread traces the eager ops of
# the collectives it runs (Note [Asynchronous collectives] in async_runs.py).
_traces = threading.local()


def _trace_stack():
    stack = getattr(_traces, "stack", None)
    if stack is None:
        stack = _traces.stack = []
    return stack


def current_tracer():
    stack = _trace_stack()
    return stack[-1][0] if stack else None


def current_tracer_object():
    """The _Tracer of this thread's innermost running trace (None for a graph's own)."""
    stack = _trace_stack()
    return stack[-1][1] if stack else None


class tracing:  # noqa: N801 (a context manager)
    """Makes ``tracer`` the current one: ops on lazy tensors join its graph."""

    def __init__(self, tracer, owner=None):
        self.tracer = tracer
        self.owner = owner

    def __enter__(self):
        # Note [Asynchronous collectives]: a trace starts after the runs submitted before it.
        async_runs.drain()
        self.tracer.__enter__()
        _trace_stack().append((self.tracer, self.owner))
        return self.tracer

    def __exit__(self, *exc):
        self.tracer.__exit__(*exc)
        _trace_stack().pop()
        return False


def _strings(nd_sbp):
    return [str(s) for s in nd_sbp]


def _ranks_text(placement):
    """A placement's ranks in a graph's name: "ranks 0-3", "ranks 0,2"."""
    ranks = list(placement.flat_ranks)
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(str(r) for r in ranks)


def _region(shape, placement, nd_sbp, rank):
    pid = placement._c.parallel_id_of(rank)
    return tuple(
        slice(b, e) for b, e in _C.logical_region(tuple(shape), _strings(nd_sbp), placement._c, pid)
    )


def holds_zero_addend(placement, nd_sbp, rank):
    """Whether ``rank``'s piece of a tensor laid out as ``nd_sbp`` is a zero addend: along a
    partial-sum dimension, the first coordinate holds the value and the others zeros (how a
    known value is laid out as a partial sum without communication)."""
    coord = placement._c.coordinate(placement._c.parallel_id_of(rank))
    return any(str(s) == "P" and c != 0 for s, c in zip(nd_sbp, coord))


def local_region(shape, placement, nd_sbp):
    """This rank's region of a tensor of ``shape`` laid out as ``nd_sbp`` on ``placement``, as
    [(begin, end)] per axis, or None where the rank holds no piece: what the pieces made
    directly (Note [Sharded creation], Note [Meta tensors], nn.init on global tensors) cover."""
    rank = env.get_rank()
    if rank not in placement:
        return None
    return [(s.start, s.stop) for s in _region(shape, placement, nd_sbp, rank)]


def as_addend(piece, placement, nd_sbp):
    """``piece`` of a whole value as this rank holds it under ``nd_sbp``: zeros where it is a
    zero addend (holds_zero_addend), else ``piece`` itself; None stays None."""
    if piece is not None and holds_zero_addend(placement, nd_sbp, env.get_rank()):
        return _C.fill(tuple(piece.shape), piece.dtype, 0.0, piece.device)
    return piece


def _check(shape, placement, nd_sbp, name):
    _C.check_nd_sbp(tuple(shape), _strings(nd_sbp), placement._c, name)


class GlobalTensor:
    """A logical tensor of ``shape`` on ``placement`` with ``sbp``; ``to_local()`` is this rank's
    piece (None when this rank is outside the placement)."""

    is_global = True
    is_local = False
    # Note [Eager global autograd] (global_autograd.py): the node that made this tensor (None
    # for a leaf), which of its outputs this is, and a leaf's accumulated gradient.
    _grad_fn = None
    _output_index = 0
    _grad = None
    _generation = 0  # pieces assigned to it (Note [Graphs sharing modules]: stamp)

    @property
    def _local(self):
        """This rank's piece (None outside the placement)."""
        return self._piece

    @_local.setter
    def _local(self, piece):
        self._piece = piece
        self._generation += 1

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

    # Note [Trainable global tensors]: a global parameter's requires_grad says whether nn.Graph
    # trains it (graph_optimizer._trains reads it) and whether eager ops record autograd for it.
    @property
    def requires_grad(self):
        return getattr(self, "_ofl_trainable", False)

    @requires_grad.setter
    def requires_grad(self, value):
        self._ofl_trainable = bool(value)

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

    def to_local_or_none(self):
        """This rank's piece, or None where this rank is outside the placement."""
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
        out = _reshard(self, placement, nd_sbp)
        from oneflowlike.framework import global_autograd

        if global_autograd.grad_enabled() and global_autograd.needs_grad(self):
            global_autograd.ReshardNode(self, out)
        return out

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

    def __format__(self, spec):
        from oneflowlike.ops.core import format_tensor

        return format_tensor(self, spec)

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"[bool] a tensor of {self.numel()} elements has no single truth "
                               "value")
        return bool(self.item())

    def __len__(self):
        return self._shape[0]

    # --- autograd (Note [Eager global autograd] in global_autograd.py) ----------------------
    @property
    def grad(self):
        """The accumulated gradient laid out as this tensor (a partial sum is reduced here,
        once: the data-parallel all-reduce), with every other leaf gradient waiting to be laid
        out (Note [Gradients laid out together] in global_autograd.py)."""
        if self._grad is not None and not self._grad_laid_out():
            from oneflowlike.framework import global_autograd

            global_autograd.lay_out_pending_grads(self)
        return self._grad

    def _grad_laid_out(self):
        g = self._grad
        return g is None or (g.placement == self._placement and g.sbp == self._sbp)

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, GlobalTensor):
            raise TypeError(f"[grad] a global tensor's gradient must be a global tensor. "
                            f"However, got {type(value).__name__}.")
        if value is not None and tuple(value.shape) != self._shape:
            raise ValueError(f"[grad] must have the tensor's shape {self._shape}. However, got "
                             f"{tuple(value.shape)}.")
        self._grad = value

    def _accumulate(self, g):
        self._grad = g if self._grad is None else self._grad + g
        if not self._grad_laid_out():
            from oneflowlike.framework import global_autograd

            global_autograd.pending_grad(self)

    @property
    def grad_fn(self):
        return self._grad_fn

    # Note [Gradient hooks] covers local tensors only.
    retains_grad = False

    def register_hook(self, hook):
        raise NotImplementedError("[register_hook] gradient hooks on global tensors are not "
                                  "supported; register them on local tensors.")

    def retain_grad(self):
        raise NotImplementedError("[retain_grad] is not supported on global tensors; a global "
                                  "leaf keeps its gradient in .grad.")

    @property
    def is_leaf(self):
        return self._grad_fn is None

    @property
    def is_lazy(self):
        return False

    @property
    def is_cuda(self):
        return self.placement.type == "cuda"

    def get_device(self):
        """-1 on a CPU placement; on a CUDA one, the GPU its plans run this rank's part on (Note
        [The GPU of a rank]: OFL_CUDA_DEVICE, else LOCAL_RANK)."""
        if not self.is_cuda:
            return -1
        import os  # noqa: PLC0415

        return int(os.environ.get("OFL_CUDA_DEVICE", os.environ.get("LOCAL_RANK", "0")))

    def is_pinned(self):
        """False: the pieces of global tensors live in the runtime's memory, not page-locked."""
        return False

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        """A new tensor of ``data`` on this one's placement, replicated (B on every dimension)."""
        if device is not None:
            raise ValueError("[new_tensor] a global tensor's new tensor goes on its placement: "
                             f"device= does not apply. However, got device={device!r}.")
        import oneflowlike as flow  # noqa: PLC0415

        return flow.tensor(data, dtype=dtype or self.dtype, placement=self.placement,
                           sbp=(_sbp.broadcast,) * len(self.placement.hierarchy),
                           requires_grad=requires_grad)

    def detach(self):
        """The same global tensor without autograd history (it has none): a new tensor sharing
        the pieces."""
        local = None if self._local is None else self._local.detach()
        return GlobalTensor(local, self._shape, self._dtype, self._placement, self._sbp)

    @property
    def data(self):
        """The same values without autograd history (torch's .data)."""
        return self.detach()

    @data.setter
    def data(self, value):
        raise NotImplementedError(
            "[Tensor.data] a global tensor's data cannot be replaced in place: its placement and "
            "SBP say where its pieces live. Make a new one with to_global(placement, sbp).")

    def clone(self):
        """A copy in the same layout: each rank copies its piece (no communication)."""
        local = None if self._local is None else self._local.clone()
        return GlobalTensor(local, self._shape, self._dtype, self._placement, self._sbp)

    def requires_grad_(self, requires_grad=True):
        """Whether nn.Graph trains this tensor (Note [Trainable global tensors])."""
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        """Accumulates gradients into the global leaves that require grad (Note [Eager global
        autograd])."""
        if create_graph:
            raise NotImplementedError("[backward] create_graph=True is not supported on global "
                                      "tensors.")
        from oneflowlike.framework import global_autograd

        global_autograd.backward(self, gradient)

    @property
    def device(self):
        raise RuntimeError(
            f"[device] a global tensor has a placement, not a device: {self._placement!r}. Use "
            ".placement, or to_local() for this rank's piece.")

    def cpu(self):
        """The same value on the cpu placement of the same ranks and hierarchy (itself when it
        is there), as OneFlow's."""
        return self._on_type("cpu")

    def cuda(self, device=None):
        """The same value on the cuda placement of the same ranks (each rank's GPU is the one
        the launcher gave it)."""
        if device is not None:
            raise ValueError(f"[cuda] a global tensor moves to a placement, whose ranks' GPUs "
                             f"the launcher chose: call cuda() without a device. However, got "
                             f"{device!r}.")
        return self._on_type("cuda")

    def to(self, *args, **kwargs):
        """tensor.to(dtype), .to("cpu") / .to("cuda") (the placement of the same ranks and
        hierarchy on that device type, SBP kept), or both, or .to(other) (its placement and
        dtype); copy=True always copies."""
        from oneflowlike.ops.creation import to_arguments

        other = next((a for a in args if isinstance(a, GlobalTensor)), None)
        if other is not None:  # to(other): its placement and dtype
            args = tuple(other.dtype if a is other else a for a in args)
            sbp = self._sbp if len(self._sbp) == len(other.placement.hierarchy) else (
                (_sbp.broadcast,) * len(other.placement.hierarchy))
            return self.to_global(placement=other.placement, sbp=sbp).to(*args, **kwargs)
        device, dtype, copy = to_arguments("Tensor.to", args, kwargs)
        out = self
        if dtype is not None and dtype != self._dtype:
            out = _C.Tensor.to(self, dtype)  # one compiled cast over the pieces
        if device is not None:
            out = out._on_type(_device_type(device))
        if copy and out is self:  # a copy that autograd follows, as the local clone
            grads = self.requires_grad and global_autograd_enabled()
            return out * 1 if grads else out.clone()
        return out

    def _on_type(self, kind):
        if self._placement.type == kind:
            return self
        return self.to_global(placement=_placement(kind, self._placement.ranks), sbp=self._sbp)

    def contiguous(self):
        return self

    # --- ops: each compiled as a small graph ------------------------------------------------
    def element_size(self):
        return self._dtype.itemsize

    def __getattr__(self, name):
        member = getattr(_C.Tensor, name, None)
        if member is None or name.startswith("_"):
            raise AttributeError(
                f"[global tensor] has no attribute '{name}': neither a global tensor nor a local "
                "Tensor has it.")
        if isinstance(member, property):  # a tensor-valued property such as T
            return apply(lambda x: getattr(x, name), (self,), {}, name=name)
        # The local Tensor's method, which runs as one compiled op when given a global tensor.
        return functools.partial(member, self)

    def __getitem__(self, index):
        """Basic indexing (ints, slices, Ellipsis, None), compiled as a one-op graph: a copy,
        which in-place writes refuse (write through t[index] = value)."""
        piece = apply(lambda x, i: x[i], (self, index), {}, name="__getitem__")
        if piece._local is not None:
            _C._mark_indexed_copy(piece._local)
        return piece


def global_autograd_enabled():
    from oneflowlike.framework import global_autograd

    return global_autograd.grad_enabled()


def _device_type(device):
    """"cpu" or "cuda" of a device a global tensor moves to (a flow.device, a string or a CUDA
    index), whose index, if any, must be this rank's (the launcher chose each rank's GPU; a
    placement names no other)."""
    if isinstance(device, _C.device):
        kind, index = device.type, device.index
    else:
        text = str(device)
        kind, _, digits = text.partition(":")
        if kind not in ("cpu", "cuda") or (digits and not digits.isdigit()):
            raise ValueError(f"[to] a global tensor moves to 'cpu' or 'cuda'. However, got "
                             f"{text!r}.")
        index = int(digits) if digits else None
    if kind == "cuda" and index is not None:
        from oneflowlike import cuda

        if index != cuda.current_device():
            raise ValueError(f"[to] a global tensor moves to a placement type ('cpu' or "
                             f"'cuda'), each rank on the GPU the launcher gave it (here "
                             f"cuda:{cuda.current_device()}). However, got cuda:{index}.")
    return kind


def _operator(name):
    def op(self, *args, **kwargs):  # the local Tensor's, which runs as one op on global tensors
        return getattr(_C.Tensor, name)(self, *args, **kwargs)

    op.__name__ = name
    return op


_OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__gt__",
              "__lt__", "__ge__", "__le__", "__eq__", "__ne__", "__neg__", "__abs__", "__and__",
              "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__invert__")


def install_operators():
    """Arithmetic operators of global tensors: the local Tensor's (attached at import)."""
    for name in _OPERATORS:
        if hasattr(_C.Tensor, name):
            setattr(GlobalTensor, name, _operator(name))


GlobalTensor.__hash__ = object.__hash__


# --- making global tensors ---------------------------------------------------------------------
_TO_GLOBAL_RULE = ("every rank must pass to_global the same placement and sbp, and pieces of one "
                   "logical shape and dtype (pieces of different sizes, an uneven split, need "
                   "shape=, the logical shape)")


def local_to_global(local, placement, sbp, shape=None, check_meta=False, refuse_grad=False):
    """A global tensor whose piece on this rank is ``local`` (every rank of ``placement`` gives
    its own). The logical shape is ``shape``, or the local shape times the split counts (an
    even split). With ``check_meta`` (Tensor.to_global's default, OneFlow's name), every rank
    of ``placement`` checks that all agree on the logical shape, dtype, placement and sbp, and
    that every piece fits (Note [Ranks agree] in agreement.py), or every one of them raises: one
    collective call of the placement's ranks.
    ``refuse_grad`` (Tensor.to_global) refuses a local tensor that requires grad."""
    if not check_meta or env.get_world_size() == 1 or not isinstance(placement, _placement):
        return _local_to_global(local, placement, sbp, shape, {}, refuse_grad)
    from oneflowlike.framework import agreement

    fields = {"logical shape": "?", "dtype": str(local.dtype), "placement": repr(placement),
              "sbp": "?"}
    result, error = None, None
    try:
        result = _local_to_global(local, placement, sbp, shape, fields, refuse_grad)
    except (TypeError, ValueError, RuntimeError) as e:
        error = e
    agreement.agree("to_global", fields, _TO_GLOBAL_RULE, error, ranks=placement.flat_ranks)
    return result


def _local_to_global(local, placement, sbp, shape, fields, refuse_grad):
    """local_to_global; what the ranks must agree on goes into ``fields`` as it is known."""
    if refuse_grad and local.requires_grad and _C.is_grad_enabled():
        # A gradient would stop at the global tensor and never reach this one: refused rather
        # than training without it.
        raise RuntimeError(
            "[to_global] the local tensor requires grad, but gradients do not flow from a "
            "global tensor back to a local one: make the global tensor the leaf instead "
            "(t.detach().to_global(placement, sbp).requires_grad_()), or lay a module out with "
            "Module.to_global")
    if not isinstance(placement, _placement):
        raise TypeError(f"[to_global] placement must be a flow.placement. However, got {placement!r}.")
    nd_sbp = _sbp.normalize(sbp, placement, "to_global")
    fields["sbp"] = str(tuple(str(s) for s in nd_sbp))
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
    fields["logical shape"] = str(shape)
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
        piece = np.require(array[_region(shape, placement, nd_sbp, rank)], requirements="C")
        if holds_zero_addend(placement, nd_sbp, rank):
            piece = np.zeros_like(piece)
        local = _C.from_numpy(piece)
        if dtype is not None and local.dtype != dtype:
            local = local.to(dtype)
        dtype = local.dtype
    elif dtype is None:
        dtype = _C.from_numpy(np.zeros((0,), array.dtype)).dtype
    return GlobalTensor(local, shape, dtype, placement, nd_sbp)


def sliced_locally(value, sbp):
    """``value`` laid out as ``sbp`` on its placement by slicing each rank's own piece, when
    every rank's new piece lies inside its old one and nothing is a partial sum (B -> S, the
    layouts ZeRO asks of a graph's initial values): no communication and no compiled graph.
    None when a move needs data from other ranks."""
    nd = _sbp.normalize(sbp, value.placement, "to_global")
    if any(str(s) == "P" for s in tuple(value.sbp) + tuple(nd)):
        return None
    # Decided over every rank of the placement, so all of them take the same path (Note
    # [Program positions] in actor/program_positions.h): under (B, S(0)) -> (S(0), S(0)) on 2x2,
    # ranks 0 and 3 keep part of their own piece where ranks 1 and 2 need another's.
    regions = {r: (_region(value.shape, value.placement, value.sbp, r),
                   _region(value.shape, value.placement, nd, r))
               for r in value.placement.flat_ranks}
    for old, new in regions.values():
        if any(n.start < o.start or n.stop > o.stop for n, o in zip(new, old)):
            return None  # a rank needs another rank's data
    rank = env.get_rank()
    if rank not in value.placement:
        return GlobalTensor(None, value.shape, value.dtype, value.placement, nd)
    old, new = regions[rank]
    local = value._local[tuple(slice(n.start - o.start, n.stop - o.start)
                               for n, o in zip(new, old))] if new != old else value._local
    return GlobalTensor(local, value.shape, value.dtype, value.placement, nd)


# --- compiled small graphs ---------------------------------------------------------------------
_cache = {}


def cached(key):
    """The compiled graph cached under ``key`` (None), once the runs submitted before have
    ended: a graph compiled or retired here makes or ends a runtime, which every rank must do
    at the same point of its program (Note [Asynchronous collectives] in async_runs.py)."""
    async_runs.drain()
    return _cache.get(key)


def retire(compiled):
    """Ends the runtime of a cached graph that is compiled again because it broke (Note [Failed
    runs across processes] in actor/runtime.cpp: every rank of it broke alike)."""
    if compiled is not None and compiled.runtime is not None:
        compiled.runtime.shutdown()
        compiled.runtime = None


class _Compiled:
    """A traced and compiled small graph with its runtime (None when this rank has no part)."""

    def __init__(self, tracer, fetches, outputs, grads_of=None, session_name=None):
        """``grads_of``: instead of ``fetches``, the fetched gradients of these differentiable
        inputs (Note [Input gradients]); None where no gradient reaches one. ``session_name``:
        what names its transport session instead of the plan's bytes (Job.runtime)."""
        # This process's rank, read once: an eager op runs its graph on every call, and reading
        # the launcher's environment took longer than handing the pieces to the runtime.
        self.rank = rank = env.get_rank()
        self.fetches = fetches if grads_of is None else [None] * len(grads_of)  # tensor names
        self.outputs = outputs  # (placement, shape, dtype) per fetch
        self.constants = tracer.constants()
        self.runtime = None
        self.broken = False  # its runtime failed: the cache compiles the op again
        self.output_sbp = {}
        self.missing = set()  # positions of grads_of without a gradient
        ranks = tracer.c.ranks()
        # A rank outside the graph compiles a rank inside's part too, without running it: the
        # results' SBP (and which gradients exist) come from the whole logical graph and must be
        # the same on every rank, or later moves of them would not match up.
        plan = tracer.compile([rank] if rank in ranks else [min(ranks)])
        if grads_of is not None:
            self.fetches = [plan.input_grads.get(name) for name in grads_of]
            self.missing = {k for k, name in enumerate(self.fetches) if name is None}
        self.output_sbp = plan.fetch_sbp
        self.backward_reads = list(plan.backward_reads)  # Note [Saved forward values]
        if rank in ranks:
            # Note [Caller-run runtimes]: one op's work, run on the calling thread.
            self.runtime = _job.current().runtime(plan, caller_runs=True,
                                                  session_name=session_name)
            self.runtime.initialize_variables()
            for name, value in self.constants.items():
                self.runtime.write_variable(name, value)
            write_captured(tracer, self.runtime, set(self.runtime.variable_names()))

    def run(self, pieces):
        rank = self.rank
        try:
            fetched = self.runtime.run_local(pieces) if self.runtime is not None else {}
        except Exception:
            # A failed run leaves its runtime unusable on every rank of the op (Note [Failed
            # runs across processes] in actor/runtime.cpp), and aborts the GPU communicators it
            # shares with other ops (Note [Communicators kept per process]); the next call of
            # the op compiles and loads it again, on every rank alike.
            if not self.runtime.usable:
                self.broken = True
            raise
        results = []
        for k, (name, (placement, shape, dtype)) in enumerate(zip(self.fetches, self.outputs)):
            if k in self.missing:
                results.append(None)
                continue
            nd_sbp = tuple(_sbp.sbp(s) for s in self.output_sbp.get(name, ["B"] * len(placement.hierarchy)))
            local = fetched.get(name, {}).get(rank)
            results.append(GlobalTensor(local, shape, dtype, placement, nd_sbp))
        return results




class _Tracer:
    """A GraphTracer that also remembers which ranks its graph touches and whether build()
    marked a loss."""

    def __init__(self, name, placement):
        self.c = _C.GraphTracer(name, placement._c)
        self.ranks = set(placement.flat_ranks)
        self.loss_marked = False
        self.captured = {}  # id(global tensor) -> (variable name, lazy tensor, global tensor)

    def __getattr__(self, name):
        return getattr(self.c, name)


def _reshard(x, placement, nd_sbp):
    return reshard_many([(x, placement, nd_sbp)])[0]


def reshard_many(items, donate=False):
    """[x.to_global(placement=p, sbp=s) for x, p, s in items] as one compiled graph: its boxing
    (collectives) run together, in one run instead of one each. Every x on one placement (the
    first's ranks trace it; the targets' ranks join). ``donate``: the caller gives up the x's
    local pieces, which the run may write and return as results (Note [Donated pieces] in
    compiler/physical/in_place_boxing.h): an all-reduce then sums in them, copying nothing.
    Donated pieces must not share memory with each other."""
    if donate:
        storages = [x._local._storage_id for x, _, _ in items if x._local is not None]
        if len(set(storages)) != len(storages):
            raise ValueError("[to_global] donated pieces must each have memory of their own: two "
                             "in-place writes into one buffer would mix. However, two of the "
                             f"{len(storages)} pieces share a storage.")
    source = items[0][0].placement
    key = ("to_global_many", donate) + tuple((x.shape, x.dtype, x.placement, x.sbp, p, s)
                                             for x, p, s in items)
    compiled = cached(key)
    if compiled is None or compiled.broken:
        retire(compiled)
        # Named by its layouts, which tell one move from another in errors (Note [Program
        # positions] in actor/program_positions.h).
        moves = [f"{','.join(_strings(x.sbp))}->{','.join(_strings(s))} {tuple(x.shape)}"
                 for x, _, s in items[:2]]
        tracer = _Tracer(f"to_global {' '.join(moves)}{' ...' if len(items) > 2 else ''}"
                         f" on {_ranks_text(source)}", source)
        names, metas = [], []
        with tracing(tracer.c, tracer):
            for k, (x, placement, nd_sbp) in enumerate(items):
                tracer.ranks |= set(placement.flat_ranks)
                lx = tracer.input(f"x{k}", x.shape, x.dtype, x.placement._c, _strings(x.sbp),
                                  donates=donate)
                names.append(tracer.fetch(tracer.to_global(lx, placement._c, _strings(nd_sbp))))
                metas.append((placement, x.shape, x.dtype))
        compiled = _cache[key] = _Compiled(tracer, names, metas)
    rank = compiled.rank
    pieces = {f"x{k}": {rank: x._local} for k, (x, _, _) in enumerate(items)
              if x._local is not None}
    outs = compiled.run(pieces)
    for out, (_, placement, nd_sbp) in zip(outs, items):
        for got, want, n in zip(out.sbp, nd_sbp, placement.hierarchy):
            if got != want and n != 1 and out._local is not None:
                raise AssertionError(f"[to_global] the plan laid the result out as {out.sbp}, "
                                     f"not {nd_sbp}")
        out._sbp = nd_sbp  # over a dimension of size 1 every SBP is the same layout
    return outs


def _flatten(value, leaves):
    """``value`` with every tensor (global or local, in lists, tuples and dicts too) replaced by
    its index in ``leaves``, where it is appended."""
    if isinstance(value, (GlobalTensor, _C.Tensor)):
        leaves.append(value)
        return _Leaf(len(leaves) - 1)
    if isinstance(value, (list, tuple)):
        return type(value)(_flatten(v, leaves) for v in value)
    if isinstance(value, dict):
        return {k: _flatten(v, leaves) for k, v in value.items()}
    return value


class _Leaf:
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return f"<tensor {self.index}>"


def _unflatten(value, leaves):
    if isinstance(value, _Leaf):
        return leaves[value.index]
    if isinstance(value, (list, tuple)):
        return type(value)(_unflatten(v, leaves) for v in value)
    if isinstance(value, dict):
        return {k: _unflatten(v, leaves) for k, v in value.items()}
    return value


def _capture(tracer_object, g):
    """Note [Global tensors captured by build()]: a global tensor used inside a trace without
    being its input becomes a non-trainable variable in its own layout, whose pieces the
    graph writes when it loads (the value at trace time, as a constant)."""
    captured = tracer_object.captured
    entry = captured.get(id(g))
    if entry is None:
        name = f"captured_{len(captured)}"
        lazy = tracer_object.variable(name, g.shape, g.dtype, g.placement._c, _strings(g.sbp),
                                      False)
        tracer_object.ranks |= set(g.placement.flat_ranks)
        entry = captured[id(g)] = (name, lazy, g)
    return entry[1]


def write_captured(tracer_object, runtime, local_variables):
    """Writes the pieces of the global tensors a trace captured (_capture)."""
    rank = env.get_rank()
    for name, _, g in tracer_object.captured.values():
        if name in local_variables and g._local is not None:
            runtime.write_variable_pieces(name, {rank: g._local})


_LAZY = re.compile(r"lazy tensor\(shape=(\([^)]*\)), dtype=(\w+), device=[^)]*\)")


def _in_global_words(error, op):
    """An error from tracing an eager op on global tensors, told about the user's global
    tensors: the lazy tensors standing in for them are this module's business."""
    message = str(error)
    if "it has no data until the graph runs" in message:
        return RuntimeError(
            f"[{op}] reads tensor values while it computes, which an op on global tensors "
            "cannot (it runs as one compiled graph over the placement): call it on the "
            "gathered value (t.numpy()) or on this rank's piece (t.to_local()).")
    if "lazy tensor(" in message:
        try:
            return type(error)(_LAZY.sub(r"global tensor(shape=\1, dtype=\2)", message))
        except TypeError:  # an exception type that takes other arguments
            return error
    return error


def multi_tensor_groups(tensors):
    """Note [Multi-tensor updates] in oneflowlike/ops/optimizer.h: ``tensors`` in lists one
    multi-tensor op takes, by (placement, layout, dtype) for global tensors and (device, dtype)
    for local ones, in the order of their first member (the same on every rank)."""
    groups = {}
    for t in tensors:
        key = (t.placement, t.sbp, t.dtype) if isinstance(t, GlobalTensor) else \
            (str(t.device), t.dtype)
        groups.setdefault(key, []).append(t)
    return list(groups.values())


def multi_tensor_call(fn, group, *, name):
    """``fn(group)`` for one of multi_tensor_groups' lists: the op itself on local tensors, a
    compiled one-op graph on global ones."""
    if isinstance(group[0], GlobalTensor):
        return apply(fn, (group,), {}, name=name)
    return fn(group)


def apply(fn, args, kwargs, *, name):
    """``fn(*args, **kwargs)`` with global tensors among the arguments (also inside lists,
    tuples and dicts), as a compiled one-op graph over their placement; the result's SBP is
    what the compiler's SBP inference picks. Local tensors are refused (Note [Local and global
    do not mix in a graph]); numbers and other values are part of the graph and its signature.
    Inside a trace (nn.Graph.build), the global tensors are captured instead (_capture)."""
    leaves = []
    structure = _flatten((tuple(args), dict(kwargs)), leaves)
    tracer_object = current_tracer_object()
    if current_tracer() is not None and tracer_object is not None:
        lazies = [_capture(tracer_object, t) if isinstance(t, GlobalTensor) else t for t in leaves]
        call_args, call_kwargs = _unflatten(structure, lazies)
        return fn(*call_args, **call_kwargs)
    globals_ = [t for t in leaves if isinstance(t, GlobalTensor)]
    placement = globals_[0].placement
    op = name.strip("_") if name.startswith("__") else name
    for t in leaves:
        if isinstance(t, _C.Tensor):
            raise TypeError(
                f"[{op}] got a global tensor and a local tensor {tuple(t.shape)}: a local "
                "tensor would be taken as the same value on every rank. Make it global first: "
                f"t.to_global(placement={placement!r}, sbp=flow.sbp.broadcast) (or "
                "flow.tensor(data, placement=..., sbp=...)).")
        if t.placement != placement:
            raise ValueError(
                f"[{op}] all global tensors must be on one placement. However, got "
                f"{placement!r} and {t.placement!r}; move one with to_global(placement=...).")
    signature = tuple((t.shape, t.dtype, t.sbp) for t in leaves)
    # Note [Eager autocast] in autocast.h: the trace applies this thread's autocast dtype, so a
    # graph traced under flow.autocast is another graph than one traced outside it.
    key = ("apply", name, placement, signature, repr(structure), _C.autocast_dtype())
    from oneflowlike.framework import global_autograd

    recording = global_autograd.grad_enabled() and any(
        global_autograd.needs_grad(t) for t in leaves)
    # Note [Saved forward values]: what this op's backward reads, fetched for it.
    saves = global_autograd.saves_of(key) if recording else ()
    cache_key = key + (("saving",) + saves,) if saves else key
    compiled = cached(cache_key)
    if compiled is None or compiled.broken:
        retire(compiled)
        # Named by the op and its first tensor's shape in errors (Note [Program positions]).
        tracer = _Tracer(f"{op} {tuple(globals_[0].shape)} on {_ranks_text(placement)}", placement)
        tracer.set_constants_allowed(False)
        with tracing(tracer.c, tracer):
            lazies = [tracer.input(f"in{i}", t.shape, t.dtype, placement._c, _strings(t.sbp))
                      for i, t in enumerate(leaves)]
            call_args, call_kwargs = _unflatten(structure, lazies)
            try:
                out = fn(*call_args, **call_kwargs)
            except Exception as e:
                raise _in_global_words(e, op) from e
        single = not isinstance(out, (tuple, list))
        outs = [out] if single else list(out)
        for o in outs:
            if not (isinstance(o, _C.Tensor) and o.is_lazy):
                raise TypeError(f"[{op}] on global tensors must give tensors. However, it gave "
                                f"{type(o).__name__}.")
        fetches = [tracer.fetch(o) for o in outs]
        meta = [(placement, tuple(o.shape), o.dtype) for o in outs]
        saved = []  # (name, position in the results)
        for saved_name in saves:
            if saved_name in fetches:  # an output the caller gets too
                saved.append((saved_name, fetches.index(saved_name)))
                continue
            fetched = tracer.fetch_named(saved_name)
            if fetched is None:  # not in this trace: computed again in the backward instead
                continue
            shape, dtype = fetched
            fetches.append(saved_name)
            meta.append((placement, tuple(shape), dtype))
            saved.append((saved_name, len(fetches) - 1))
        # Note [Eager global draws]: an op drawing random numbers is traced at every call, each
        # trace's plan with other counters: its sessions are named by the op and its operands
        # (the same on every rank), numbered by the Job, not by a new plan's bytes each time.
        op_types = set(tracer.op_types())
        draws = bool(op_types & global_autograd.RANDOM_OPS)
        compiled = _cache[cache_key] = _Compiled(
            tracer, fetches, meta,
            session_name=f"draws {op} {placement!r} {signature!r}" if draws else None)
        compiled.num_outputs = len(outs)
        compiled.saved = saved
        compiled.single = single
        compiled.op_types = op_types
        # A named tuple (flow.max(x, dim), topk, sort) comes back as the same named tuple.
        compiled.named = type(out) if hasattr(type(out), "_fields") else None
    rank = compiled.rank
    pieces = {f"in{i}": {rank: t._local} for i, t in enumerate(leaves) if t._local is not None}
    try:
        everything = compiled.run(pieces)
    finally:
        # Note [Eager global draws]: a random op's counters are fixed when it is traced (the
        # trace reserves them from the generator, as a local draw of that shape would); a
        # cached graph run again would draw from its own stream, not after manual_seed and
        # the draws since. So such an op is traced again at every call (also after a failed
        # run), as the local op draws. The library's own draws avoid this: flow.rand with a
        # placement makes each rank's piece, and dropout and multinomial draw through it
        # (_EAGER_GLOBAL_FORMS in tensor_methods.py); this is for the rest.
        if compiled.op_types & global_autograd.RANDOM_OPS and _cache.get(cache_key) is compiled:
            retire(_cache.pop(cache_key))
    results = everything[:compiled.num_outputs]
    if recording:
        global_autograd.OpNode(fn, structure, leaves, key, op, results, compiled.op_types,
                               {name: everything[i] for name, i in compiled.saved})
    if compiled.single:
        return results[0]
    return compiled.named._make(results) if compiled.named else tuple(results)
