"""Multi-process jobs: the launcher (``python -m oneflowlike.distributed.launch``), the
environment contract it sets for each rank (``launch_env``), and torch.distributed's names for
this process's rank and the world size (the same as flow.env's), its process group calls and
its collectives on local tensors (flow.comm's: Note [Local collectives])."""

from oneflowlike.distributed.env import launch_env

__all__ = ["launch_env", "get_rank", "get_world_size", "init_process_group", "is_initialized",
           "destroy_process_group", "new_group", "all_reduce", "broadcast", "all_gather",
           "all_gather_into_tensor", "reduce_scatter_tensor", "reduce", "gather", "scatter",
           "barrier", "all_gather_object", "broadcast_object_list", "ReduceOp", "Work",
           "Future", "get_process_group_ranks", "get_global_rank", "get_group_rank"]


class ReduceOp:
    """torch.distributed.ReduceOp: how all_reduce, reduce and reduce_scatter_tensor combine the
    ranks' tensors (Note [Reductions and groups] in comm.py)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


class Future:
    """torch.futures.Future: what Work.get_future() gives, of the collective's output tensors
    (its wait() waits for the collective), or of a value there already."""

    def __init__(self, value, work=None):
        self._value = value
        self._work = work

    def done(self):
        return self._work is None or self._work.is_completed()

    def wait(self):
        if self._work is not None:
            return self._work.result()
        return self._value

    def value(self):
        return self.wait()

    def then(self, callback):
        """callback(this future), run once the collective is done; a Future of what it
        returns."""
        self.wait()
        return Future(callback(self))


class Work:
    """What a collective called with async_op=True returns, as torch's: the call runs after it
    returns (Note [Asynchronous collectives] in framework/async_runs.py). wait() waits for its
    results to be in the caller's tensors, and raises what the call raised."""

    def __init__(self, pending, outputs):
        self._pending = pending
        self._outputs = outputs  # the call's return value -> torch's list of output tensors

    def get_future(self):
        """A Future of the collective's output tensors (torch's)."""
        return Future(None, self)

    def wait(self, timeout=None):
        del timeout
        self._pending.wait()
        return True

    def is_completed(self):
        return self._pending.is_completed()

    def is_success(self):
        if not self.is_completed():
            return False
        try:
            self.wait()
        except BaseException:
            return False
        return True

    def result(self):
        """The collective's output tensors (torch's list), once it is done."""
        return self._outputs(self._pending.wait())


def _launch(async_op, call, outputs=lambda tensor: [tensor]):
    """call() now, or on the runs thread with a Work for it (async_op); ``outputs`` makes the
    Work's result, torch's list of output tensors, from what call() returns."""
    if not async_op:
        return call()
    from oneflowlike.framework import async_runs

    return Work(async_runs.submit(call), outputs)


def init_process_group(backend=None, init_method=None, world_size=-1, rank=-1, **kwargs):
    """torch's entry point: the launcher (``python -m oneflowlike.distributed.launch``, torchrun's
    environment) has already made the group, and the transport joins on first use; ``world_size``
    and ``rank``, when given, must be the launcher's. ``backend`` ("nccl", "gloo") is not a
    choice here: collectives go where their tensors are (Note [Local collectives])."""
    del backend, init_method, kwargs
    for name, given, actual in (("world_size", world_size, get_world_size()),
                                ("rank", rank, get_rank())):
        if given not in (-1, None) and given != actual:
            raise ValueError(f"[init_process_group] {name}={given} differs from the launcher's "
                             f"{actual}: start the job with python -m "
                             "oneflowlike.distributed.launch --nproc_per_node N.")
    from oneflowlike.framework import job

    job.current().connect()  # every process joins here, as in torch


def is_initialized():
    """True: a process of a launched job (or a lone process, a job of one) is always in it."""
    return True


def destroy_process_group(group=None):
    """Nothing to undo: the job's transport ends with the process."""
    del group


def new_group(ranks=None, timeout=None, backend=None, **kwargs):
    """A group of ``ranks`` (all by default) for the collectives' ``group=``: a placement of
    those ranks (Note [Reductions and groups] in comm.py). As torch's, every rank may call it;
    only the members use the group."""
    del timeout, backend, kwargs
    from oneflowlike import comm

    return comm.ProcessGroup(range(get_world_size()) if ranks is None else ranks)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.all_reduce(tensor, op, group))


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.reduce(tensor, dst, op, group))


def broadcast(tensor, src, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.broadcast(tensor, src, group))


def all_gather(tensor_list, tensor, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.all_gather(tensor_list, tensor, group), list)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.gather(tensor, gather_list, dst, group),
                   lambda gathered: list(gathered) if gathered is not None else [])


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.scatter(tensor, scatter_list, src, group))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    from oneflowlike import comm

    return _launch(async_op,
                   lambda: comm.all_gather_into_tensor(output_tensor, input_tensor, group))


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None,  # noqa: A002 (torch's)
                          async_op=False):
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.reduce_scatter_tensor(output, input, op, group))


def barrier(group=None, async_op=False, device_ids=None):
    del device_ids
    from oneflowlike import comm

    return _launch(async_op, lambda: comm.barrier(group), lambda _: [])


def all_gather_object(object_list, obj, group=None):
    from oneflowlike.distributed import objects

    return objects.all_gather_object(object_list, obj, group)


def broadcast_object_list(object_list, src=0, group=None, device=None):
    del device
    from oneflowlike.distributed import objects

    return objects.broadcast_object_list(object_list, src, group)


def get_rank(group=None):
    """This process's rank (flow.env.get_rank), or its place in ``group`` (-1 outside it)."""
    from oneflowlike import comm, env  # not at import: flow.env reads launch_env from here

    return env.get_rank() if comm.check_group("get_rank", group) is None else group.rank()


def get_world_size(group=None):
    """How many ranks the job (``group``) has (flow.env.get_world_size)."""
    from oneflowlike import comm, env

    if comm.check_group("get_world_size", group) is None:
        return env.get_world_size()
    return group.size() if group.rank() >= 0 else -1  # torch's, outside the group


def get_process_group_ranks(group):
    """The job's ranks ``group`` holds, in its order (torch's)."""
    from oneflowlike import comm

    if comm.check_group("get_process_group_ranks", group) is None:
        return list(range(get_world_size()))
    return list(group.ranks)


def get_global_rank(group, group_rank):
    """The job's rank of ``group``'s rank ``group_rank`` (torch's)."""
    ranks = get_process_group_ranks(group)
    if (isinstance(group_rank, bool) or not isinstance(group_rank, int)
            or not 0 <= group_rank < len(ranks)):
        raise ValueError(f"[get_global_rank] group_rank must be in [0, {len(ranks)}) for "
                         f"{group!r}. However, got {group_rank!r}.")
    return ranks[group_rank]


def get_group_rank(group, global_rank):
    """``global_rank``'s rank within ``group`` (torch's); ValueError outside it."""
    ranks = get_process_group_ranks(group)
    if global_rank not in ranks:
        raise ValueError(f"[get_group_rank] rank {global_rank!r} is not in {group!r} (ranks "
                         f"{ranks}).")
    return ranks.index(global_rank)
