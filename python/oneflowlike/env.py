"""flow.env: this process's rank and the job's world size, read from the launcher's (or
Slurm's) environment by the one parser of that contract, oneflowlike.distributed.launch_env.

A script started without the launcher (neither RANK nor SLURM_PROCID set) is rank 0 of a world
of one.
"""

from oneflowlike.distributed.env import process_is_launched, process_launch_env

__all__ = ["get_rank", "get_world_size", "get_local_rank", "get_node_size",
           "all_device_placement"]


def _env():
    if not process_is_launched():
        return None
    return process_launch_env()  # raises ValueError naming a missing or malformed variable


def get_rank():
    e = _env()
    return 0 if e is None else e["rank"]


def get_world_size():
    e = _env()
    return 1 if e is None else e["world_size"]


def get_local_rank():
    e = _env()
    return 0 if e is None else e["local_rank"]


def get_node_size():
    """How many nodes (hosts) the job spans."""
    e = _env()
    return 1 if e is None else max(1, e["world_size"] // e["local_world_size"])


def all_device_placement(device_type="cpu"):
    """A placement over every rank of the job (OneFlow's flow.env.all_device_placement)."""
    from oneflowlike.placement import placement

    return placement(device_type, ranks=list(range(get_world_size())))
