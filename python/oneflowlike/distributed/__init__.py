"""Multi-process jobs: the launcher (``python -m oneflowlike.distributed.launch``), the
environment contract it sets for each rank (``launch_env``), and torch.distributed's names for
this process's rank and the world size (the same as flow.env's)."""

from oneflowlike.distributed.env import launch_env

__all__ = ["launch_env", "get_rank", "get_world_size"]


def get_rank():
    """This process's rank (flow.env.get_rank)."""
    from oneflowlike import env  # not at import: flow.env itself reads launch_env from here

    return env.get_rank()


def get_world_size():
    """How many ranks the job has (flow.env.get_world_size)."""
    from oneflowlike import env

    return env.get_world_size()
