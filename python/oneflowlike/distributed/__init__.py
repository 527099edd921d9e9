"""Multi-process jobs: the launcher (``python -m oneflowlike.distributed.launch``), the
environment contract it sets for each rank (``launch_env``), and torch.distributed's names for
this process's rank and the world size (the same as flow.env's), its process group calls and
its collectives on local tensors (flow.comm's: Note [Local collectives])."""

from oneflowlike.distributed.env import launch_env

__all__ = ["launch_env", "get_rank", "get_world_size", "init_process_group", "is_initialized",
           "destroy_process_group", "all_reduce", "broadcast", "all_gather",
           "all_gather_into_tensor", "reduce_scatter_tensor", "barrier", "ReduceOp"]


class ReduceOp:
    """torch.distributed.ReduceOp: SUM, the only one the collectives take."""

    SUM = "sum"


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


def is_initialized():
    """True: a process of a launched job (or a lone process, a job of one) is always in it."""
    return True


def destroy_process_group():
    """Nothing to undo: the job's transport ends with the process."""


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _torch_arguments("all_reduce", op, group, async_op)
    from oneflowlike import comm

    return comm.all_reduce(tensor)


def broadcast(tensor, src, group=None, async_op=False):
    _torch_arguments("broadcast", ReduceOp.SUM, group, async_op)
    from oneflowlike import comm

    return comm.broadcast(tensor, src)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    _torch_arguments("all_gather", ReduceOp.SUM, group, async_op)
    from oneflowlike import comm

    return comm.all_gather(tensor_list, tensor)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    _torch_arguments("all_gather_into_tensor", ReduceOp.SUM, group, async_op)
    from oneflowlike import comm

    return comm.all_gather_into_tensor(output_tensor, input_tensor)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None,  # noqa: A002 (torch's)
                          async_op=False):
    _torch_arguments("reduce_scatter_tensor", op, group, async_op)
    from oneflowlike import comm

    return comm.reduce_scatter_tensor(output, input)


def barrier(group=None, async_op=False):
    _torch_arguments("barrier", ReduceOp.SUM, group, async_op)
    from oneflowlike import comm

    comm.barrier()


def _torch_arguments(op, reduce_op, group, async_op):
    """Refuses what these collectives do not do, rather than doing something else."""
    if reduce_op != ReduceOp.SUM:
        raise NotImplementedError(f"[{op}] reduces by sum only. However, got op={reduce_op!r}.")
    if group is not None:
        raise NotImplementedError(f"[{op}] runs over every rank of the job: process groups are "
                                  "placements here (flow.placement). However, got a group.")
    if async_op:
        raise NotImplementedError(f"[{op}] returns once done: async_op=True is not supported.")


def get_rank():
    """This process's rank (flow.env.get_rank)."""
    from oneflowlike import env  # not at import: flow.env itself reads launch_env from here

    return env.get_rank()


def get_world_size():
    """How many ranks the job has (flow.env.get_world_size)."""
    from oneflowlike import env

    return env.get_world_size()
