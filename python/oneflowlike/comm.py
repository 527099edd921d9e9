"""flow.comm: collectives on local tensors, as OneFlow's flow.comm and torch.distributed name
them (flow.distributed re-exports them with torch's names).

Note [Local collectives]: a local tensor of each rank is made a piece of a global tensor over
every rank of the job (a partial sum for all_reduce, a split for all_gather, one rank's value
for broadcast) and laid out again as broadcast: the eager global op's compiled one-op graph, so
the bytes move through the same boxing and collective tasks as every other communication (no
second path, DESIGN.md "Eager global tensors"), and the compiled graph is cached by shape. Every
rank of the job must call each collective, in the same order, with tensors of the same shape
and dtype. The pieces go through host memory: a CUDA tensor is copied to the host and back.
all_reduce's sum and avg donate the caller's tensor to the run (Note [Donated pieces] in
compiler/physical/in_place_boxing.h): the all-reduce sums in its memory, and the result is the
tensor itself, where it had been copied in, out and back (2.1-3.9x faster from 1 MiB on two
processes, docs/benchmarks.md "flow.distributed all-reduces against gloo's").

Note [Reductions and groups]: a sum (and torch's avg, the sum over the group's size) is a
partial sum laid out again, which the compiler reduces in place. Max, min and product have no
SBP of their own (a partial value is a sum), so each rank's piece becomes a row of a tensor
split over the ranks. A small one is gathered whole and reduced on each rank: one collective,
(n - 1) times its bytes, holding n times its memory on every rank. From kColumnsBytes up the
rows are laid out again split by columns (an all-to-all), each rank reduces its columns, and
the reduced columns are gathered: a reduce-scatter then an all-gather, 2 (n - 1) / n of the
bytes as a sum's all-reduce moves (n / 2 times fewer than gathering), holding about three
times the tensor at most (every rank's columns, then the gathered result, beside the caller's
tensor). reduce_scatter_tensor is the first half alone ((n - 1) / n). Every rank reduces the
rows in rank order, so all end with the same bits. A group (torch's new_group) is a subset of
the job's ranks: its collectives run on the placement of those ranks, and only its members call
them (a rank outside it is refused at once, on that rank only: the members do not wait for
it). reduce, gather and scatter lay the pieces out on one rank's placement, or from it, so only
the bytes that rank needs move.
"""

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.autograd import no_grad
from oneflowlike.ops.core import on_host

__all__ = ["all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
           "reduce_scatter_tensor", "reduce", "gather", "scatter", "barrier", "ProcessGroup",
           "REDUCE_OPS"]

# torch.distributed.ReduceOp's that these collectives take (Note [Reductions and groups]).
REDUCE_OPS = ("sum", "avg", "product", "min", "max")


class ProcessGroup:
    """Some of the job's ranks, which collectives given ``group=`` run over (torch's
    new_group); every rank of the job may make it, only its members use it."""

    def __init__(self, ranks):
        world = env.get_world_size()
        ranks = list(ranks)
        if (not ranks or len(set(ranks)) != len(ranks)
                or not all(isinstance(r, int) and 0 <= r < world for r in ranks)):
            raise ValueError(f"[new_group] ranks must be distinct ranks of the job, in [0, "
                             f"{world}). However, got {ranks!r}.")
        self.ranks = sorted(ranks)
        # Every process joins the job here (as torch has every rank call new_group): a rank
        # that then runs nothing with the others must not leave the group's members waiting
        # for it in the bootstrap.
        from oneflowlike.framework import job

        job.current().connect()

    def rank(self):
        """This process's rank within the group (-1 outside it), as torch's get_rank(group)."""
        me = env.get_rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def size(self):
        return len(self.ranks)

    def __repr__(self):
        return f"ProcessGroup(ranks={self.ranks})"


def check_group(op, group):
    """``group`` when it is one of new_group's (None: the job), else TypeError naming ``op``."""
    if group is not None and not isinstance(group, ProcessGroup):
        raise TypeError(f"[{op}] group must be a group from new_group (or None: every rank). "
                        f"However, got {type(group).__name__}.")
    return group


def _members(op, group):
    """The ranks ``group`` (None: the job) holds; refuses a rank outside it."""
    if check_group(op, group) is None:
        return list(range(env.get_world_size()))
    if env.get_rank() not in group.ranks:
        raise ValueError(f"[{op}] rank {env.get_rank()} is not in the group of ranks "
                         f"{group.ranks}: only the group's members call its collectives.")
    return group.ranks


def _check_reduce(op, reduce_op, dtype):
    if reduce_op not in REDUCE_OPS:
        raise ValueError(f"[{op}] op must be one of {', '.join(REDUCE_OPS)} (torch's ReduceOp). "
                         f"However, got {reduce_op!r}.")
    if reduce_op == "avg" and not dtype.is_floating_point:
        raise TypeError(f"[{op}] op avg needs a floating tensor (the sum divided by the "
                        f"group's size). However, got {dtype}.")


def _check_writable(op, tensor):
    """The collective writes ``tensor`` in place: refused for a copy that indexing made, whose
    write would not reach the tensor it came from (as Tensor.copy_ refuses it), before any byte
    moves and, through _prepare, on every rank."""
    if _C._is_indexed_copy(tensor):
        raise ValueError(
            f"[{op}] cannot write the tensor in place: it is a copy that indexing or a view-like "
            "op made (t[...], transpose, t(), narrow, split, chunk, unbind and expand copy here, "
            "where torch gives views), so the result would not reach the tensor it came from. "
            "Pass that tensor, or a clone() to receive the result.")


def _host_piece(op, tensor):
    if not isinstance(tensor, _C.Tensor) or tensor.is_lazy:
        raise TypeError(f"[{op}] needs a local tensor (each rank's own). However, got "
                        f"{type(tensor).__name__}{' (a traced value)' if getattr(tensor, 'is_lazy', False) else ''}.")
    return on_host(tensor)


def _on(ranks):
    from oneflowlike.placement import placement

    return placement("cpu", ranks=list(ranks))


def _rows(piece, ranks, to=None):
    """Every rank's piece as row r of a (len(ranks), ...) tensor laid out whole on ``to``'s
    ranks (all of them by default); the local rows there, None elsewhere."""
    from oneflowlike.framework import global_tensor as gt

    rows = piece.reshape((1,) + tuple(piece.shape))
    whole = gt.local_to_global(rows, _on(ranks), _sbp.split(0))
    whole = whole.to_global(placement=_on(to or ranks), sbp=_sbp.broadcast)
    return whole.to_local() if env.get_rank() in (to or ranks) else None


# Note [Reductions and groups]: from this many bytes per rank, max, min and product reduce by
# columns. Below it the one all-gather was mostly as fast or faster; from it the columns were
# faster in 22 of 27 cases on 2-4 processes over three runs (docs/benchmarks.md
# "flow.distributed all-reduces against gloo's").
kColumnsBytes = 4 << 20


def _by_columns(piece, ranks):
    """Whether max, min and product of ``piece`` reduce by columns (Note [Reductions and
    groups]); the same answer on every rank, as the ranks agreed on the shape and dtype."""
    return (piece.numel() >= len(ranks)
            and piece.numel() * piece.element_size() >= kColumnsBytes)


def _columns(piece, ranks):
    """Every rank's ``piece`` as row r of a (n, ...) tensor split over the ranks, laid out again
    by columns (an all-to-all): this rank's balanced range of axis 1 of every row, (n, k, ...)
    (Note [Reductions and groups])."""
    from oneflowlike.framework import global_tensor as gt

    rows = gt.local_to_global(piece.reshape((1,) + tuple(piece.shape)), _on(ranks),
                              _sbp.split(0))
    return rows.to_global(placement=_on(ranks), sbp=_sbp.split(1)).to_local()


def _reduced_columns(piece, ranks, reduce_op, to=None):
    """The reduction by ``reduce_op`` (max, min, product) of the ranks' ``piece``, whole on the
    ranks ``to`` (default: every rank of ``ranks``): this rank's result in ``piece``'s shape, or
    None on a rank outside ``to``. Each rank reduces its balanced range of the flat elements
    (an all-to-all brings every rank's), and the reduced ranges are gathered (Note [Reductions
    and groups])."""
    from oneflowlike.framework import global_tensor as gt

    numel = piece.numel()
    # Every rank's columns, reduced at once: not held through the gather.
    reduced = _reduced(_columns(piece.reshape((numel,)), ranks), reduce_op)
    part = gt.local_to_global(reduced, _on(ranks), _sbp.split(0), shape=(numel,))
    result = part.to_global(placement=_on(ranks if to is None else to), sbp=_sbp.broadcast)
    if env.get_rank() not in result.placement.flat_ranks:
        return None
    return result.to_local().reshape(tuple(piece.shape))


def _reduced(rows, reduce_op):
    """The rows (n, ...) reduced along axis 0 by max, min or product."""
    import oneflowlike as flow

    if reduce_op == "max":
        return flow.amax(rows, 0)
    if reduce_op == "min":
        return flow.amin(rows, 0)
    out = rows[0]
    for r in range(1, rows.shape[0]):
        out = out * rows[r]
    return out


def _write(tensor, value):
    """The result into the caller's tensor, in place, on its device. Where the result already
    is the tensor's memory (a donated piece, Note [Donated pieces] in
    compiler/physical/in_place_boxing.h) nothing is copied: the run's write is only counted in
    the tensor's version."""
    if (value._storage_id == tensor._storage_id and value._data_ptr == tensor._data_ptr
            and value.dtype == tensor.dtype and tuple(value.shape) == tuple(tensor.shape)):
        tensor._bump_version()
        return tensor
    with no_grad():
        tensor.copy_(value if tensor.dtype == value.dtype else value.to(tensor.dtype))
    return tensor


def _prepare(caller, tensor, check=True, validate=None, ranks=None, **extra):
    """``tensor``'s piece on the host, once every rank has checked that all pass a tensor of one
    shape and dtype (and the same ``extra``: a root) and that every rank's arguments are valid
    (``validate(piece)`` raises ValueError where not): Note [Ranks agree] in
    framework/agreement.py. A rank's bad argument ends the call on every rank, naming it,
    instead of leaving the others waiting in the collective. None in a one-rank job (nothing
    to do). ``check`` False skips the all-reduce where the caller knows the ranks agree (DDP's
    buckets, made from a model checked when it was wrapped). ``ranks``: the group's (all)."""
    single = (env.get_world_size() if ranks is None else len(ranks)) == 1
    piece, error = None, None
    try:
        piece = _host_piece(caller, tensor)
        if validate is not None:
            validate(piece)
    except (TypeError, ValueError) as e:
        if single or not check:
            raise
        error = e
    if single:
        return None
    if check:
        from oneflowlike.framework import agreement

        fields = {"shape": str(tuple(piece.shape)) if piece is not None else "?",
                  "dtype": str(piece.dtype) if piece is not None else "?"}
        fields.update({k: str(v) for k, v in extra.items()})
        agreement.agree(caller, fields, "every rank must call it with a tensor of one shape and dtype"
                        + (" and the same " + ", ".join(extra) if extra else ""), error,
                        ranks=ranks)
    return piece


def _summed(piece, ranks, op, sbp, to=None, donate=False):
    """The ranks' pieces summed as a partial sum laid out as ``sbp`` on the ranks ``to`` (all
    of them by default), divided by their number for avg: this rank's local piece of it, or
    None on a rank outside ``to``. ``donate``: ``piece`` may be written, and the sum comes back
    in it where the plan can sum in place (Note [Donated pieces] in
    compiler/physical/in_place_boxing.h)."""
    from oneflowlike.framework import global_tensor as gt

    summed = gt.local_to_global(piece, _on(ranks), _sbp.partial_sum)
    placement = _on(ranks if to is None else to)

    def local_of(result):
        if env.get_rank() not in result.placement.flat_ranks:
            return None
        local = result.to_local()
        if op == "avg":  # the result is the run's or the donated piece: divided in place
            with no_grad():
                local.div_(len(ranks))
        return local

    if not donate:
        return local_of(summed.to_global(placement=placement, sbp=sbp))
    # Tensor.to_global, but the run may sum in the piece.
    layout = [(summed, placement, _sbp.normalize(sbp, placement))]
    return local_of(gt.reshard_many(layout, donate=True)[0])


def all_reduce(tensor, op="sum", group=None, async_op=False):
    """Every rank's ``tensor`` becomes the reduction over the ranks (of ``group``) by ``op``
    (sum, torch's default; avg, product, min, max: Note [Reductions and groups]), in place.
    ``async_op``: returns at once a Pending (framework/async_runs.py) whose wait() returns
    ``tensor`` once it holds the result, or raises what the call raised (Note [Asynchronous
    collectives]); ``tensor`` must not be read or written until then."""
    return _all_reduce(tensor, check=True, reduce_op=op, group=group, async_op=async_op)


def _all_reduce(tensor, check, reduce_op="sum", group=None, async_op=False):
    if async_op:  # the whole call, its ranks' agreement check included, on the runs thread
        from oneflowlike.framework import async_runs

        return async_runs.submit(lambda: _all_reduce(tensor, check, reduce_op, group))
    ranks = _members("all_reduce", group)
    def validate(piece):
        _check_reduce("all_reduce", reduce_op, piece.dtype)
        _check_writable("all_reduce", tensor)

    piece = _prepare("all_reduce", tensor, check, ranks=ranks, op=reduce_op, validate=validate)
    if piece is None:
        return tensor
    if reduce_op in ("sum", "avg"):
        # The caller's tensor (its host copy for a GPU one) is donated: the sum is made in it.
        return _write(tensor, _summed(piece, ranks, reduce_op, _sbp.broadcast, donate=True))
    if _by_columns(piece, ranks):
        return _write(tensor, _reduced_columns(piece, ranks, reduce_op))
    return _write(tensor, _reduced(_rows(piece, ranks), reduce_op))


def reduce(tensor, dst, op="sum", group=None):
    """Rank ``dst``'s ``tensor`` becomes the reduction over the ranks by ``op``, in place; the
    others' are left as they are (torch's reduce)."""
    ranks = _members("reduce", group)

    def validate(piece):
        _check_reduce("reduce", op, piece.dtype)
        _check_root("reduce", "dst", dst, ranks)
        if env.get_rank() == dst:
            _check_writable("reduce", tensor)

    piece = _prepare("reduce", tensor, ranks=ranks, validate=validate, dst=dst, op=op)
    if piece is None:
        return tensor
    if op in ("sum", "avg"):
        result = _summed(piece, ranks, op, _sbp.broadcast, to=[dst])
        return _write(tensor, result) if result is not None else tensor
    if _by_columns(piece, ranks):
        result = _reduced_columns(piece, ranks, op, to=[dst])
        return _write(tensor, result) if result is not None else tensor
    rows = _rows(piece, ranks, to=[dst])
    return _write(tensor, _reduced(rows, op)) if rows is not None else tensor


def _check_root(op, name, root, ranks):
    if isinstance(root, bool) or not isinstance(root, int) or root not in ranks:
        raise ValueError(f"[{op}] {name} must be a rank of the group {ranks}. However, got "
                         f"{root!r}.")


def broadcast(tensor, src, group=None):
    """Every rank's ``tensor`` becomes rank ``src``'s, in place."""
    from oneflowlike.framework import global_tensor as gt

    ranks = _members("broadcast", group)
    def validate(piece):
        _check_root("broadcast", "src", src, ranks)
        _check_writable("broadcast", tensor)

    piece = _prepare("broadcast", tensor, ranks=ranks, src=src, validate=validate)
    if piece is None:
        return tensor
    source = gt.local_to_global(piece, _on([src]), _sbp.broadcast)
    return _write(tensor, source.to_global(placement=_on(ranks), sbp=_sbp.broadcast).to_local())


def _check_list(op, name, tensors, piece, count):
    """``tensors`` must be a list of ``count`` tensors of ``piece``'s shape."""
    if not isinstance(tensors, list) or len(tensors) != count:
        raise ValueError(f"[{op}] {name} must be a list of {count} tensors (one per rank). "
                         f"However, got {type(tensors).__name__} of "
                         f"{len(tensors) if hasattr(tensors, '__len__') else '?'}.")
    for r, t in enumerate(tensors):
        if (not isinstance(t, _C.Tensor) or tuple(t.shape) != tuple(piece.shape)
                or t.dtype != piece.dtype):
            got = (f"{tuple(t.shape)} {t.dtype}" if isinstance(t, _C.Tensor)
                   else type(t).__name__)
            raise ValueError(f"[{op}] {name}[{r}] must have the tensor's shape and dtype "
                             f"{tuple(piece.shape)} {piece.dtype}. However, got {got}.")


def all_gather(tensor_list, tensor, group=None):
    """``tensor_list[r]`` becomes rank r's ``tensor`` (the r-th of the group), on every rank (one
    tensor per rank, each of ``tensor``'s shape and dtype)."""
    ranks = _members("all_gather", group)
    piece = _prepare("all_gather", tensor, ranks=ranks, validate=lambda piece: _check_list(
        "all_gather", "tensor_list", tensor_list, piece, len(ranks)))
    if piece is None:
        _write(tensor_list[0], tensor)
        return tensor_list
    gathered = _rows(piece, ranks)
    for r, t in enumerate(tensor_list):
        _write(t, gathered[r])
    return tensor_list


def _rooted_list(op, root_name, root, list_name, tensors, ranks):
    """A _prepare validation: ``root`` is a rank of the group, and there its list of tensors
    is one per rank of the piece's shape (the other ranks pass none)."""
    def validate(piece):
        _check_root(op, root_name, root, ranks)
        if env.get_rank() == root:
            _check_list(op, list_name, tensors, piece, len(ranks))
    return validate


def gather(tensor, gather_list=None, dst=0, group=None):
    """On rank ``dst``, ``gather_list[r]`` becomes rank r's ``tensor``; the other ranks pass no
    list (torch's gather)."""
    ranks = _members("gather", group)
    validate = _rooted_list("gather", "dst", dst, "gather_list", gather_list, ranks)
    piece = _prepare("gather", tensor, ranks=ranks, validate=validate, dst=dst)
    if piece is None:
        _write(gather_list[0], tensor)
        return gather_list
    rows = _rows(piece, ranks, to=[dst])
    if rows is not None:
        for r, t in enumerate(gather_list):
            _write(t, rows[r])
    return gather_list


def scatter(tensor, scatter_list=None, src=0, group=None):
    """Each rank's ``tensor`` becomes ``scatter_list[r]`` of rank ``src`` (r its place in the
    group); the other ranks pass no list (torch's scatter)."""
    import oneflowlike as flow
    from oneflowlike.framework import global_tensor as gt

    ranks = _members("scatter", group)
    validate = _rooted_list("scatter", "src", src, "scatter_list", scatter_list, ranks)
    piece = _prepare("scatter", tensor, ranks=ranks, validate=validate, src=src)
    if piece is None:
        return _write(tensor, scatter_list[0])
    if env.get_rank() == src:
        rows = flow.stack([_host_piece("scatter", t) for t in scatter_list])
    else:  # only src's rows are read
        rows = _C.fill((len(ranks),) + tuple(piece.shape), piece.dtype, 0.0, piece.device)
    whole = gt.local_to_global(rows, _on([src]), _sbp.broadcast)
    mine = whole.to_global(placement=_on(ranks), sbp=_sbp.split(0)).to_local()
    return _write(tensor, mine[0])


def all_gather_into_tensor(output, tensor, group=None):
    """``output`` (the ranks' ``tensor`` joined along axis 0, in rank order) on every rank, in
    place: torch's all_gather_into_tensor."""
    from oneflowlike.framework import global_tensor as gt

    ranks = _members("all_gather_into_tensor", group)
    piece = _prepare("all_gather_into_tensor", tensor, ranks=ranks,
                     validate=lambda piece: _check_joined("all_gather_into_tensor", output,
                                                          piece, "output", len(ranks)))
    if piece is None:
        return _write(output, tensor)
    whole = gt.local_to_global(piece, _on(ranks), _sbp.split(0))
    return _write(output, whole.to_global(sbp=_sbp.broadcast).to_local())


def reduce_scatter_tensor(output, tensor, op="sum", group=None):
    """Rank r's ``output`` becomes part r (along axis 0) of the reduction by ``op`` of the
    ranks' ``tensor``, in place: torch's reduce_scatter_tensor (what ZeRO's gradient sharding
    does)."""
    ranks = _members("reduce_scatter_tensor", group)

    def validate(piece):
        _check_reduce("reduce_scatter_tensor", op, piece.dtype)
        _check_joined("reduce_scatter_tensor", piece, output, "input", len(ranks))

    piece = _prepare("reduce_scatter_tensor", tensor, ranks=ranks, validate=validate, op=op)
    if piece is None:
        return _write(output, tensor)
    if op in ("sum", "avg"):
        return _write(output, _summed(piece, ranks, op, _sbp.split(0)))
    # Rank r's columns of the rows (n, n k, ...) are its part (k, ...): one all-to-all.
    return _write(output, _reduced(_columns(piece, ranks), op))


def _check_joined(op, whole, part, name, world):
    """``whole`` must be the ``world`` ranks' ``part`` joined along axis 0."""
    want = (part.shape[0] * world,) + tuple(part.shape[1:]) if part.ndim else None
    if want is None or tuple(whole.shape) != want:
        raise ValueError(f"[{op}] the {name} must be the {world} ranks' parts joined along axis "
                         f"0, shape {want}. However, got {tuple(whole.shape)} for parts of "
                         f"{tuple(part.shape)}.")


def barrier(group=None):
    """Returns once every rank of the job (of ``group``) has called it."""
    if group is None:
        from oneflowlike.framework import job

        job.current().barrier()
        return
    import oneflowlike as flow

    _members("barrier", group)
    _all_reduce(flow.zeros(1), check=False, group=group)
