"""Run by test_checkpoint_resume.py on 2 processes: flow.async_save (Note [Asynchronous
saves]) of global tensors split over the ranks, broadcast and partial sums, while the program
changes them before wait(): the checkpoint holds the values at the call, as flow.save writes
them. Then a rank that cannot make its directory ends the save on both ranks, naming it, none
waiting. Prints "async save OK" per rank."""

import json
import os

import numpy as np

import oneflowlike as flow

root = os.environ["OFL_TEST_CHECKPOINT"]
rank = flow.env.get_rank()
P = flow.placement("cpu", ranks=[0, 1])
B, S0, PS = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.partial_sum
rng = np.random.default_rng(0)
whole = {name: rng.standard_normal((4, 3)).astype(np.float32) for name in ("split", "copy")}
state = {"split": flow.tensor(whole["split"], placement=P, sbp=S0),
         "copy": flow.tensor(whole["copy"], placement=P, sbp=B),
         # Each rank's piece is rank + 1: the sum is 3.
         "summed": flow.ones(2, 2).mul(rank + 1).to_global(P, PS),
         "step": 7}
handle = flow.async_save(state, os.path.join(root, "async"))
for name in ("split", "copy"):  # the program goes on while the files are written
    state[name].to_local().add_(100.0)
assert handle.wait() == os.path.join(root, "async")
loaded = flow.load(os.path.join(root, "async"))
for name in ("split", "copy"):
    np.testing.assert_array_equal(loaded[name].numpy(), whole[name])
np.testing.assert_array_equal(loaded["summed"].numpy(), np.full((2, 2), 3.0, np.float32))
assert loaded["step"] == 7
# The same bytes as flow.save's (every rank writes the same pieces either way).
flow.save({"split": flow.tensor(whole["split"], placement=P, sbp=S0)}, os.path.join(root, "sync"))
pieces = [json.load(open(os.path.join(root, kind, f"rank{rank}.json")))["pieces"]["split"]
          for kind in ("sync", "async")]
assert pieces[0]["sha256"] == pieces[1]["sha256"] and pieces[0]["region"] == pieces[1]["region"]

# Rank 1's directory cannot be made (a file is in its way): both ranks raise, the checkpoint
# is not committed.
blocked = os.path.join(root, "blocked")
if rank == 0:
    os.makedirs(blocked)
    open(os.path.join(blocked, "rank1"), "w").close()
flow.comm.barrier()
try:
    flow.async_save({"copy": state["copy"]}, blocked).wait()
    raise AssertionError("a save with a rank that cannot write was committed")
except (OSError, RuntimeError) as e:
    assert ("rank1" in str(e)) if rank == 1 else ("another rank could not make its directory"
                                                    in str(e)), e
assert not os.path.exists(os.path.join(blocked, "manifest.json"))

# A rank failing while it copies its pieces (before a partial sum, which every rank still lays
# out again), and rank 0 failing to write the manifest: both ranks raise, none waits, and the
# ranks go on running together.
from oneflowlike.framework import checkpoint  # noqa: E402

real_writes_piece, real_atomic_write = checkpoint._writes_piece, checkpoint._atomic_write


def failing_piece(t, r):
    raise MemoryError("no host memory for the copy")


def failing_manifest(target, write):
    if target.endswith("manifest.json"):
        raise OSError(28, "No space left on device")
    return real_atomic_write(target, write)


for name, patch in (("piece", ("_writes_piece", failing_piece, 1)),
                    ("manifest", ("_atomic_write", failing_manifest, 0))):
    attribute, replacement, failing_rank = patch
    if rank == failing_rank:
        setattr(checkpoint, attribute, replacement)
    try:
        flow.async_save({"a": state["copy"], "b": flow.ones(2).to_global(P, PS)},
                        os.path.join(root, name)).wait()
        raise AssertionError(f"a save whose {name} failed was committed")
    except (MemoryError, OSError, RuntimeError) as e:
        if rank == failing_rank:
            assert "no host memory" in str(e) or "No space left" in str(e), e
        else:
            assert "another rank failed" in str(e) or "could not write the manifest" in str(e), e
    finally:
        checkpoint._writes_piece, checkpoint._atomic_write = real_writes_piece, real_atomic_write
    flow.comm.barrier()
print("async save OK", flush=True)
