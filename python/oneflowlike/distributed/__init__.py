"""Multi-process jobs: the launcher (``python -m oneflowlike.distributed.launch``) and the
environment contract it sets for each rank (``launch_env``). Nothing here loads the C++ module."""

from oneflowlike.distributed.env import launch_env

__all__ = ["launch_env"]
