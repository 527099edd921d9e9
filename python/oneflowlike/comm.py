"""flow.comm: collectives on local tensors, as OneFlow's flow.comm and torch.distributed name
them (flow.distributed re-exports them with torch's names).

Note [Local collectives]: a local tensor of each rank is made a piece of a global tensor over
every rank of the job (a partial sum for all_reduce, a split for all_gather, one rank's value
for broadcast) and laid out again as broadcast: the eager global op's compiled one-op graph, so
the bytes move through the same boxing and collective tasks as every other communication (no
second path, DESIGN.md "Eager global tensors"), and the compiled graph is cached by shape. Every
rank of the job must call each collective, in the same order, with tensors of the same shape
and dtype. The pieces go through host memory: a CUDA tensor is copied to the host and back.
"""

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.autograd import no_grad
from oneflowlike.ops.core import on_host

__all__ = ["all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
           "reduce_scatter_tensor", "barrier"]


def _host_piece(op, tensor):
    if not isinstance(tensor, _C.Tensor) or tensor.is_lazy:
        raise TypeError(f"[{op}] needs a local tensor (each rank's own). However, got "
                        f"{type(tensor).__name__}{' (a traced value)' if getattr(tensor, 'is_lazy', False) else ''}.")
    return on_host(tensor)


def _everyone():
    return env.all_device_placement("cpu")


def _write(tensor, value):
    """The result into the caller's tensor, in place, on its device."""
    with no_grad():
        tensor.copy_(value if tensor.dtype == value.dtype else value.to(tensor.dtype))
    return tensor


def _prepare(op, tensor, check=True, validate=None, **extra):
    """``tensor``'s piece on the host, once every rank has checked that all pass a tensor of one
    shape and dtype (and the same ``extra``: a root) and that every rank's arguments are valid
    (``validate(piece)`` raises ValueError where not): Note [Ranks agree] in
    framework/agreement.py. A rank's bad argument ends the call on every rank, naming it,
    instead of leaving the others waiting in the collective. None in a one-rank job (nothing
    to move). ``check`` False skips the all-reduce where the caller knows the ranks agree (DDP's
    buckets, made from a model checked when it was wrapped)."""
    single = env.get_world_size() == 1
    piece, error = None, None
    try:
        piece = _host_piece(op, tensor)
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
        agreement.agree(op, fields, "every rank must call it with a tensor of one shape and dtype"
                        + (" and the same " + ", ".join(extra) if extra else ""), error)
    return piece


def all_reduce(tensor):
    """Every rank's ``tensor`` becomes the sum over the ranks, in place (torch's default op)."""
    return _all_reduce(tensor, check=True)


def _all_reduce(tensor, check):
    from oneflowlike.framework import global_tensor as gt

    piece = _prepare("all_reduce", tensor, check)
    if piece is None:
        return tensor
    summed = gt.local_to_global(piece, _everyone(), _sbp.partial_sum)
    return _write(tensor, summed.to_global(sbp=_sbp.broadcast).to_local())


def broadcast(tensor, src):
    """Every rank's ``tensor`` becomes rank ``src``'s, in place."""
    from oneflowlike.framework import global_tensor as gt
    from oneflowlike.placement import placement

    world = env.get_world_size()

    def validate(piece):
        if not isinstance(src, int) or not 0 <= src < world:
            raise ValueError(f"[broadcast] src must be a rank in [0, {world}). However, got "
                             f"{src!r}.")

    piece = _prepare("broadcast", tensor, validate=validate, src=src)
    if piece is None:
        return tensor
    source = gt.local_to_global(piece, placement("cpu", ranks=[src]), _sbp.broadcast)
    return _write(tensor, source.to_global(placement=_everyone(), sbp=_sbp.broadcast).to_local())


def all_gather(tensor_list, tensor):
    """``tensor_list[r]`` becomes rank r's ``tensor``, on every rank (one tensor per rank, each
    of ``tensor``'s shape and dtype)."""
    from oneflowlike.framework import global_tensor as gt

    world = env.get_world_size()

    def validate(piece):
        if not isinstance(tensor_list, list) or len(tensor_list) != world:
            raise ValueError(f"[all_gather] tensor_list must be a list of {world} tensors (one "
                             f"per rank). However, got {type(tensor_list).__name__} of "
                             f"{len(tensor_list) if hasattr(tensor_list, '__len__') else '?'}.")
        for r, t in enumerate(tensor_list):
            if not isinstance(t, _C.Tensor) or tuple(t.shape) != tuple(piece.shape):
                raise ValueError(f"[all_gather] tensor_list[{r}] must have the tensor's shape "
                                 f"{tuple(piece.shape)}. However, got "
                                 f"{tuple(getattr(t, 'shape', ())) if isinstance(t, _C.Tensor) else type(t).__name__}.")

    piece = _prepare("all_gather", tensor, validate=validate)
    if piece is None:
        _write(tensor_list[0], tensor)
        return tensor_list
    rows = piece.reshape((1,) + tuple(piece.shape))
    whole = gt.local_to_global(rows, _everyone(), _sbp.split(0))
    gathered = whole.to_global(sbp=_sbp.broadcast).to_local()
    for r, t in enumerate(tensor_list):
        _write(t, gathered[r])
    return tensor_list


def all_gather_into_tensor(output, tensor):
    """``output`` (the ranks' ``tensor`` joined along axis 0, in rank order) on every rank, in
    place: torch's all_gather_into_tensor."""
    from oneflowlike.framework import global_tensor as gt

    piece = _prepare("all_gather_into_tensor", tensor, validate=lambda piece: _check_joined(
        "all_gather_into_tensor", output, piece, "output"))
    if piece is None:
        return _write(output, tensor)
    whole = gt.local_to_global(piece, _everyone(), _sbp.split(0))
    return _write(output, whole.to_global(sbp=_sbp.broadcast).to_local())


def reduce_scatter_tensor(output, tensor):
    """Rank r's ``output`` becomes part r (along axis 0) of the sum of the ranks' ``tensor``, in
    place: torch's reduce_scatter_tensor (what ZeRO's gradient sharding does)."""
    from oneflowlike.framework import global_tensor as gt

    piece = _prepare("reduce_scatter_tensor", tensor, validate=lambda piece: _check_joined(
        "reduce_scatter_tensor", piece, output, "input"))
    if piece is None:
        return _write(output, tensor)
    summed = gt.local_to_global(piece, _everyone(), _sbp.partial_sum)
    return _write(output, summed.to_global(sbp=_sbp.split(0)).to_local())


def _check_joined(op, whole, part, name):
    """``whole`` must be the world's ``part`` joined along axis 0."""
    world = env.get_world_size()
    want = (part.shape[0] * world,) + tuple(part.shape[1:]) if part.ndim else None
    if want is None or tuple(whole.shape) != want:
        raise ValueError(f"[{op}] the {name} must be the {world} ranks' parts joined along axis "
                         f"0, shape {want}. However, got {tuple(whole.shape)} for parts of "
                         f"{tuple(part.shape)}.")


def barrier():
    """Returns once every rank of the job has called it."""
    from oneflowlike.framework import job

    job.current().barrier()
