"""flow.placement: a device type and an N-d array of ranks, as in OneFlow.

    flow.placement("cpu", ranks=[0, 1, 2, 3])        # 1-d: 4 ranks
    flow.placement("cpu", ranks=[[0, 1], [2, 3]])    # 2-d: hierarchy (2, 2)
    flow.placement.all("cpu")                        # every rank of the job
"""

import numbers
import os

import numpy as np

from oneflowlike import _C
from oneflowlike import env as _env

__all__ = ["placement"]


class placement:  # noqa: N801 (OneFlow's name)
    """Where a global tensor lives. ``ranks`` is a list (1-d) or nested lists (N-d) of distinct
    ranks in [0, world_size); its shape is the hierarchy that an nd-SBP describes."""

    def __init__(self, type="cpu", ranks=None, *, device_type=None):  # noqa: A002 (OneFlow's name)
        if device_type is not None:
            type = device_type  # noqa: A001
        if type not in ("cpu", "cuda"):
            raise ValueError(f"[placement] type must be 'cpu' or 'cuda'. However, got {type!r}.")
        if type == "cuda" and os.environ.get("OFL_SIMULATE_CUDA") != "1":
            # OFL_SIMULATE_CUDA=1: the runtime runs GPU tasks on the host (RuntimeOptions::
            # simulate_cuda), so a CUDA plan can be checked without a GPU (with
            # OFL_SIMULATE_CUDA_DEVICES the check below passes: Note [Simulated CUDA devices]).
            from oneflowlike import cuda

            cuda.check_device_supported("placement", "cuda")
        if ranks is None:
            raise TypeError("[placement] needs ranks, e.g. flow.placement('cpu', ranks=[0, 1]).")
        if isinstance(ranks, numbers.Integral):
            ranks = [ranks]
        try:
            array = np.asarray(ranks)
        except ValueError:  # rows of different lengths
            raise ValueError(f"[placement] ranks must be a list of ints or a grid of them (rows "
                             f"of one length). However, got {ranks!r}.") from None
        if array.size == 0 or array.dtype.kind not in "iu":
            raise ValueError(
                f"[placement] ranks must be a non-empty (nested) list of ints. However, got {ranks!r}."
            )
        flat = [int(r) for r in array.reshape(-1)]
        if len(set(flat)) != len(flat):
            raise ValueError(f"[placement] ranks must be distinct. However, got {ranks!r}.")
        world = _env.get_world_size()
        outside = [r for r in flat if r < 0 or r >= world]
        if outside:
            raise ValueError(
                f"[placement] ranks must be in [0, {world}) (the job's world size). However, "
                f"ranks {outside} are outside the world."
            )
        self._type = type
        self._ranks = array.tolist()
        self._c = _C.Placement(type, flat, tuple(array.shape))
        from oneflowlike.framework import job

        job.current().connect()

    @classmethod
    def all(cls, type="cpu"):  # noqa: A002
        """Every rank of the job, 1-d."""
        return cls(type, list(range(_env.get_world_size())))

    @property
    def type(self):
        return self._type

    device_type = type

    @property
    def ranks(self):
        """The ranks as given (nested lists for an N-d placement)."""
        return self._ranks

    @property
    def hierarchy(self):
        return tuple(self._c.hierarchy)

    @property
    def flat_ranks(self):
        return list(self._c.ranks)

    def __contains__(self, rank):
        return rank in self.flat_ranks

    def __eq__(self, other):
        return isinstance(other, placement) and self._c == other._c

    def __hash__(self):
        return hash((self._type, tuple(self.flat_ranks), self.hierarchy))

    def __repr__(self):
        return f'oneflowlike.placement(type="{self._type}", ranks={self._ranks})'
