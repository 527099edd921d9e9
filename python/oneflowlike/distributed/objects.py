"""torch.distributed's collectives of picklable Python objects (metrics, configs, strings): each
object pickled to bytes, moved as an int8 tensor by flow.comm's collectives (Note [Local
collectives]) and unpickled. As torch's, they unpickle what other ranks of the job send: use
them only within a job you trust."""

import pickle

import numpy as np

from oneflowlike import comm
from oneflowlike.framework import agreement

# Every one of a group's ranks learns whether one has a bad argument, and each raises it (Note
# [Ranks agree] in framework/agreement.py): none is left waiting in the collectives.
_SAME_ARGUMENTS = "every rank must call it with the same arguments"


def _pickled(op, obj):
    """(obj's bytes, None), or (None, the error) for the ranks to agree on: an object one rank
    cannot pickle must end the call on every rank."""
    try:
        return np.frombuffer(pickle.dumps(obj), np.uint8), None
    except Exception as e:  # pickle raises many kinds
        return None, TypeError(f"[{op}] cannot pickle {type(obj).__name__}: {e}")


def _tensor(raw):
    """Bytes (a uint8 array) as an int8 tensor, the dtype collectives move."""
    import oneflowlike as flow

    return flow.tensor(np.ascontiguousarray(raw, np.uint8).view(np.int8))


def _raw(tensor):
    return tensor.numpy().view(np.uint8)


def all_gather_object(object_list, obj, group=None):
    """``object_list[r]`` becomes rank r's ``obj`` (the r-th of the group), on every rank."""
    import oneflowlike as flow

    error = None
    ranks = comm._members("all_gather_object", group)
    data = None
    if not isinstance(object_list, list) or len(object_list) != len(ranks):
        error = ValueError(f"[all_gather_object] object_list must be a list of {len(ranks)} "
                           f"entries (one per rank). However, got {type(object_list).__name__} "
                           f"of {len(object_list) if hasattr(object_list, '__len__') else '?'}.")
    else:
        data, error = _pickled("all_gather_object", obj)
    agreement.agree("all_gather_object", {}, _SAME_ARGUMENTS, error, ranks=ranks)
    lengths = [flow.zeros(1, dtype=flow.int64) for _ in ranks]
    comm.all_gather(lengths, flow.tensor([data.size], dtype=flow.int64), group)
    lengths = [int(t.numpy()[0]) for t in lengths]
    longest = max(lengths)
    row = np.zeros(longest, np.uint8)
    row[:data.size] = data
    joined = flow.zeros(longest * len(ranks), dtype=flow.int8)
    comm.all_gather_into_tensor(joined, _tensor(row), group)
    raw = _raw(joined)
    for r, n in enumerate(lengths):
        object_list[r] = pickle.loads(raw[r * longest:r * longest + n].tobytes())
    return object_list


def broadcast_object_list(object_list, src=0, group=None):
    """Every rank's ``object_list`` (as long on each) becomes rank ``src``'s, in place."""
    import oneflowlike as flow

    error = None
    ranks = comm._members("broadcast_object_list", group)
    if not isinstance(object_list, list):
        error = TypeError(f"[broadcast_object_list] object_list must be a list. However, got "
                          f"{type(object_list).__name__}.")
    mine, data = flow.env.get_rank() == src, None
    if error is None and mine:
        data, error = _pickled("broadcast_object_list", list(object_list))
    agreement.agree("broadcast_object_list",
                    {"src": src, "length": len(object_list) if isinstance(object_list, list)
                     else "?"}, _SAME_ARGUMENTS, error, ranks=ranks)
    length = flow.tensor([data.size if mine else 0], dtype=flow.int64)
    comm.broadcast(length, src, group)
    raw = data if mine else np.zeros(int(length.numpy()[0]), np.uint8)
    moved = _tensor(raw)
    comm.broadcast(moved, src, group)
    if not mine:  # src keeps its own objects, as torch's
        object_list[:] = pickle.loads(_raw(moved).tobytes())
    return object_list
