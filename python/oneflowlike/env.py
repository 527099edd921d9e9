"""flow.env: this process's rank and the job's world size (from the launcher's environment).

A script started without the launcher is rank 0 of a world of one.
"""

import os

__all__ = ["get_rank", "get_world_size", "get_local_rank", "get_node_size"]


def _int(name, default):
    value = os.environ.get(name)
    return default if value is None else int(value)


def get_rank():
    return _int("RANK", None) if "RANK" in os.environ else _int("SLURM_PROCID", 0)


def get_world_size():
    if "RANK" in os.environ:
        if "WORLD_SIZE" not in os.environ:
            raise ValueError("[env] RANK is set but WORLD_SIZE is not: start the script with "
                             "`python -m oneflowlike.distributed.launch`.")
        return _int("WORLD_SIZE", 1)
    return _int("SLURM_NTASKS", 1)


def get_local_rank():
    return _int("LOCAL_RANK", None) if "RANK" in os.environ else _int("SLURM_LOCALID", 0)


def get_node_size():
    """How many nodes (hosts) the job spans."""
    world = get_world_size()
    per_node = _int("LOCAL_WORLD_SIZE", world)
    return max(1, world // max(1, per_node))
