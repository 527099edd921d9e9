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


def _sum_over_ranks(values, ranks=None):
    """The elementwise sum over ``ranks`` (all by default; this rank among them) of a float64
    array (exact for integers < 2**53)."""
    ranks = list(range(env.get_world_size())) if ranks is None else ranks
    local = np.asarray(values, np.float64)
    if len(ranks) == 1:
        return local
    from oneflowlike.framework import global_tensor as gt
    from oneflowlike.placement import placement

    t = _C.from_numpy(np.require(local, requirements="C"))
    # Not Tensor.to_global: its check of what the ranks pass (agree() below) is made of this.
    return gt.local_to_global(t, placement("cpu", ranks), _sbp.partial_sum).numpy()


def _gather_rows(row, ranks):
    """The float64 ``row`` of each of ``ranks`` (one length on each), as a (len(ranks), len)
    array in the order of ``ranks``."""
    row = np.asarray(row, np.float64)
    rows = np.zeros((len(ranks), row.size), np.float64)
    rows[ranks.index(env.get_rank())] = row
    return _sum_over_ranks(rows, ranks)


_TEXT_BYTES = 240  # of each value shown in an agree() message


def _gather_texts(texts, ranks):
    """The list of strings of each of ``ranks`` (as many on each), as one list per rank; each
    string cut to _TEXT_BYTES bytes of UTF-8."""
    row = np.zeros((len(texts), _TEXT_BYTES + 1), np.float64)
    for k, text in enumerate(texts):
        raw = text.encode()[:_TEXT_BYTES]
        row[k, 0] = len(raw)
        row[k, 1:1 + len(raw)] = np.frombuffer(raw, np.uint8)
    rows = _gather_rows(row.reshape(-1), ranks).reshape(-1, len(texts), _TEXT_BYTES + 1)
    return [[bytes(int(b) for b in r[1:1 + int(r[0])]).decode(errors="replace") for r in per_rank]
            for per_rank in rows]


def _sha256(array):
    """The SHA-256 of an array's (or bytes') bytes."""
    data = array if isinstance(array, bytes) else np.ascontiguousarray(array).tobytes()
    return hashlib.sha256(data)


def digest(array):
    """A short hex digest of an array's bytes, for agree() to compare values across ranks."""
    return _sha256(array).hexdigest()[:16]


def agree(op, fields, rule, error=None, ranks=None):
    """Note [Ranks agree]: what a call of a collective front-end function takes must be the same
    on every rank (a logical shape, a dtype, a placement, an SBP, a root, values every rank
    holds alike), or its ranks would move mismatched pieces: wrong values, or a wait that never
    ends. ``fields`` (name -> this rank's value as text) are compared through one all-reduce of
    a fixed size over every rank of the job (digests of the names and of the values), whatever
    each rank passes; ``error`` is this rank's own complaint about its input, if any (an
    exception: a piece of the wrong shape), which must end the call on every rank too. Where the
    names or a value differ or a rank complains, every rank raises naming each rank's value (or
    complaint) and ``rule`` (ValueError, or the type of its own complaint), so no rank goes on
    to a collective the others never reach; where every rank made the one mistake, each raises
    its own error, as a one-rank job would. Only a failing call exchanges more (which fields differ, and their
    texts). Every rank of ``ranks`` (a placement's, or by default every rank of the job) must
    call it at the same point of its program (it is collective); a rank outside checks nothing
    but its own ``error``."""
    ranks = list(range(env.get_world_size())) if ranks is None else list(ranks)
    if len(ranks) == 1 or env.get_rank() not in ranks:
        if error is not None:
            raise error
        return
    names = list(fields)
    texts = [str(fields[name]) for name in names]
    rows = _gather_rows(_digest("\0".join(names).encode()) + _digest("\0".join(texts).encode())
                        + [0.0 if error is None else 1.0], ranks)
    names_differ = not (rows[:, 0:4] == rows[0, 0:4]).all()
    values_differ = not (rows[:, 4:8] == rows[0, 4:8]).all()
    complaints = rows[:, 8] > 0
    if not (names_differ or values_differ or complaints.any()):
        return
    # Every rank saw the same rows, so every rank takes each step below alike.
    if names_differ:
        shown, mine = ["fields"], [" ".join(names)]
    else:
        per = _gather_rows([d for text in texts for d in _digest(text.encode())], ranks)
        differ = [k for k in range(len(names))
                  if not (per[:, 4 * k:4 * k + 4] == per[0, 4 * k:4 * k + 4]).all()]
        shown, mine = [names[k] for k in differ], [texts[k] for k in differ]
    gathered = _gather_texts(mine + [str(error or "")], ranks)
    if not shown and complaints.all() and len({t[-1] for t in gathered}) == 1:
        raise error  # every rank made the one mistake: its own error, as on one rank
    parts = [f"{name}: " + ", ".join(f"rank {r} {t[k]}" for r, t in zip(ranks, gathered))
             for k, name in enumerate(shown)]
    if len(parts) > 4:
        parts = parts[:4] + [f"and {len(parts) - 4} more"]
    parts += [f"rank {r}: {t[-1]}" for r, t, c in zip(ranks, gathered, complaints) if c]
    kind = type(error) if isinstance(error, (TypeError, ValueError, RuntimeError)) else ValueError
    raise kind(f"[{op}] {rule}. However, " + "; ".join(parts) + ".")


def count_ok(ok):
    """How many ranks passed ``ok`` true: a barrier that also says whether all succeeded."""
    return int(round(float(_sum_over_ranks([float(bool(ok))])[0])))


def _digest(array):
    """Four 16-bit pieces of the SHA-256 of the array's (or bytes') bytes (exact in float64
    sums)."""
    raw = _sha256(array).digest()[:8]
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
