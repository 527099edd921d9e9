"""What every process of a job must agree on, checked with the job's own collectives (an eager
all-reduce over all ranks): a count of successes, and whether values that should be the same
on every rank are.

Every process must call these at the same point of its program (they are collective).
"""

import hashlib

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp


def _sum_over_ranks(values):
    """The elementwise sum over all ranks of a float64 vector (exact for integers < 2**53)."""
    world = env.get_world_size()
    local = np.asarray(values, np.float64)
    if world == 1:
        return local
    from oneflowlike.placement import placement

    everyone = placement("cpu", list(range(world)))
    t = _C.from_numpy(np.require(local, requirements="C"))
    return t.to_global(placement=everyone, sbp=_sbp.partial_sum).numpy()


def count_ok(ok):
    """How many ranks passed ``ok`` true: a barrier that also says whether all succeeded."""
    return int(round(float(_sum_over_ranks([float(bool(ok))])[0])))


def _digest(array):
    """Four 16-bit pieces of the SHA-256 of the array's bytes (exact in float64 sums)."""
    raw = hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest()[:8]
    return [float(int.from_bytes(raw[i:i + 2], "little")) for i in range(0, 8, 2)]


def differing(named_arrays):
    """The names (in order) whose arrays are not the same on every rank. Every rank passes the
    same names."""
    names = list(named_arrays)
    if env.get_world_size() == 1 or not names:
        return []
    mine = [d for name in names for d in _digest(named_arrays[name])]
    total = _sum_over_ranks(mine)
    world = env.get_world_size()
    # A rank that differs from the others sees a sum that is not world times its own digest;
    # a second sum tells every rank which names some rank saw differ.
    flags = [float(any(total[4 * k + i] != world * mine[4 * k + i] for i in range(4)))
             for k in range(len(names))]
    seen = _sum_over_ranks(flags)
    return [name for name, count in zip(names, seen) if count > 0]
