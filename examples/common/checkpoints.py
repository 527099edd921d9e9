"""The examples' checkpoints: written so that a crash at any moment leaves a complete one to
resume from, and found again by ``--resume auto`` after the launcher restarts the job.

Note [Checkpoints that survive a crash]: flow.save makes one checkpoint directory complete only
once every rank's pieces are written (its manifest.json is the commit marker), but saving over
the last checkpoint first invalidates it, so a crash during the save would leave none. Here
each save goes to DIR.next (cleared first), rank 0 adds train_state.json (the step, the flags,
the data loader's position), and only then swaps it in: DIR to DIR.prev, DIR.next to DIR,
DIR.prev removed. Every moment of that leaves a complete checkpoint in DIR, DIR.next or
DIR.prev, and ``latest`` takes the newest complete one. A rank cannot start writing the next
save's pieces before rank 0 has swapped: a save begins with an agreement of every rank, which
rank 0 reaches only after the swap. The directory is shared by the ranks (as flow.save
needs), so on several nodes it must be on a shared file system. DIR is taken through any symlink
(the staging directories go beside the real one), and holds a checkpoint's files only: the swap
replaces the whole directory, so anything else in it is refused before training (``check``). A
directory is discarded markers first, so one cut short while being removed is not complete.
"""

import json
import os
import re
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


# What a checkpoint directory holds: flow.save's files (and their temporaries) and ours.
_OWN = re.compile(r"(manifest\.json|train_state\.json|rank\d+(\.json)?)(\.tmp\d*)?$")


def _real(path):
    return os.path.realpath(path)


def check(path):
    """Refuses a --save directory holding files that are not a checkpoint's (ValueError): each
    save replaces the directory whole."""
    path = _real(path)
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise ValueError(f"--save {path} is a file: it must be a directory (or not exist).")
        return
    others = sorted(name for name in os.listdir(path) if not _OWN.match(name))
    if others:
        shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
        raise ValueError(f"--save {path} holds files that are not a checkpoint's ({shown}): each "
                         "save replaces the directory whole. Use an empty or new directory.")


def _discard(path):
    """Removes a checkpoint directory, its markers first."""
    for marker in (_STATE, "manifest.json"):
        try:
            os.remove(os.path.join(path, marker))
        except FileNotFoundError:
            pass
    shutil.rmtree(path)


def _newest(path):
    """(path, step) of the newest complete checkpoint among ``path`` and its staging
    directories (a save cut short leaves one of them), or None."""
    path = _real(path)
    found = [(step, candidate) for candidate in (path, path + ".next", path + ".prev")
             if (step := _complete(candidate)) is not None]
    return max(found)[::-1] if found else None


def latest(path):
    """The newest complete checkpoint among ``path`` and its staging directories, or None."""
    found = _newest(path)
    return found[0] if found else None


def agreed_latest(path):
    """latest(path) and its step, the same on every rank: each rank looks for itself, and they
    compare (a stale file system could show ranks different checkpoints); a difference ends the
    job on every rank, naming what each saw."""
    choice = _newest(path)
    if flow.env.get_world_size() > 1:
        seen = [None] * flow.env.get_world_size()
        flow.distributed.all_gather_object(seen, choice)
        if any(other != seen[0] for other in seen):
            raise SystemExit(f"[train] --resume auto: the ranks see different checkpoints in "
                             f"{path}: " + ", ".join(f"rank {r}: {c}" for r, c in enumerate(seen))
                             + ". Is the directory on a file system every rank shares?")
    return choice


class Saver:
    """The checkpoints of one --save directory (Note [Checkpoints that survive a crash]). A save
    returns once every rank's pieces are copied to the host, the files are written while
    training goes on (flow.async_save, Note [Asynchronous saves]), and the save is committed
    and swapped in by ``finish()`` (the examples call it after the next step) or the next save.
    Every rank calls both, at the same steps."""

    def __init__(self, path):
        self.path = _real(path)
        self._pending = None  # (handle, the train_state.json it gets)

    def save(self, graph, step, args, loader_state=None, wait=False):
        """Starts the checkpoint of ``step`` (with ``wait``, also finishes it)."""
        self.finish()  # the last one is swapped in before its staging directory is reused
        staging = self.path + ".next"
        if flow.env.get_rank() == 0 and os.path.exists(staging):
            _discard(staging)  # a save cut short; nobody writes there before the agreement
        state = {"step": step, "args": vars(args)}
        if loader_state is not None:
            state["loader"] = loader_state  # the same on every rank
        self._pending = (flow.async_save(graph.state_dict(), staging), state)
        if wait:
            self.finish()

    def finish(self):
        """Commits the save in flight (every rank) and swaps it in (rank 0)."""
        if self._pending is None:
            return
        handle, state = self._pending
        self._pending = None
        staging = handle.wait()
        if flow.env.get_rank() != 0:
            return
        tmp = os.path.join(staging, _STATE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(staging, _STATE))
        previous = self.path + ".prev"
        if os.path.exists(previous):
            _discard(previous)
        if os.path.exists(self.path):
            os.rename(self.path, previous)
        os.rename(staging, self.path)
        if os.path.exists(previous):
            _discard(previous)
