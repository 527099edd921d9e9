"""The examples' checkpoints: written so that a crash at any moment leaves a complete one to
resume from, and found again by ``--resume auto`` after the launcher restarts the job.

Note [Checkpoints that survive a crash]: flow.save makes one checkpoint directory complete only
once every rank's pieces are written (its manifest.json is the commit marker), but saving over
the last checkpoint first invalidates it, so a crash during the save would leave none. Here
each save goes to DIR.next (cleared first), rank 0 adds train_state.json (the step, the flags,
the data loader's position), and only then swaps it in: DIR to DIR.prev, DIR.next to DIR,
DIR.prev removed. Every moment of that leaves a complete checkpoint in DIR, DIR.next or
DIR.prev, and ``latest`` takes the newest complete one. A rank cannot start writing the next
save's pieces before rank 0 has swapped: flow.save begins with an agreement of every rank,
which rank 0 reaches only after the swap. The directory is shared by the ranks (as flow.save
needs), so on several nodes it must be on a shared file system.
"""

import json
import os
import shutil

import oneflowlike as flow

_STATE = "train_state.json"


def _complete(path):
    """The step of the complete checkpoint at ``path``, or None."""
    try:
        with open(os.path.join(path, _STATE)) as f:
            step = json.load(f)["step"]
    except (OSError, ValueError, KeyError):
        return None
    return step if os.path.exists(os.path.join(path, "manifest.json")) else None


def latest(path):
    """The newest complete checkpoint among ``path`` and its staging directories (a save cut
    short leaves one of them), or None."""
    found = [(step, candidate) for candidate in (path, path + ".next", path + ".prev")
             if (step := _complete(candidate)) is not None]
    return max(found)[1] if found else None


def save(path, graph, step, args, loader_state=None):
    """Writes the checkpoint of ``step`` to ``path``, replacing the one there only once the new
    one is complete (Note [Checkpoints that survive a crash]). Every rank calls it."""
    staging, previous = path + ".next", path + ".prev"
    rank = flow.env.get_rank()
    if rank == 0 and os.path.exists(staging):
        shutil.rmtree(staging)  # a save cut short; nobody writes there before the agreement
    flow.save(graph.state_dict(), staging)
    if rank != 0:
        return
    state = {"step": step, "args": vars(args)}
    if loader_state is not None:
        state["loader"] = loader_state  # the same on every rank
    tmp = os.path.join(staging, _STATE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(staging, _STATE))
    if os.path.exists(previous):
        shutil.rmtree(previous)
    if os.path.exists(path):
        os.rename(path, previous)
    os.rename(staging, path)
    shutil.rmtree(previous, ignore_errors=True)
