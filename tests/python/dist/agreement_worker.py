"""Run by test_rank_agreement.py on 2 processes: what a collective call takes must be the same
on every rank (Note [Ranks agree] in framework/agreement.py). Each misuse below, made on one
rank only, used to give wrong values or a wait that never ended; now every rank raises the
same error naming each rank's value, and the job goes on. Prints "rank R: agreed N" at the
end."""

import sys
import time

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

rank = flow.env.get_rank()
P = flow.placement("cpu", ranks=[0, 1])
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
path = sys.argv[1]
checked = 0


def refused(kind, phrases, call):
    """``call`` raises ``kind`` on this rank, naming every phrase, within seconds."""
    global checked
    start = time.monotonic()
    try:
        call()
    except kind as e:
        for phrase in phrases:
            assert phrase in str(e), (phrase, str(e))
        assert time.monotonic() - start < 20, time.monotonic() - start
        checked += 1
        return
    raise AssertionError(f"rank {rank}: accepted {phrases}")


# Pieces of different sizes without shape=: each rank would assume its own logical shape.
refused(ValueError, ["[to_global]", "logical shape: rank 0 (4, 4), rank 1 (6, 4)", "shape="],
        lambda: flow.ones(2 + rank, 4).to_global(placement=P, sbp=S0))
# ... and with shape=, the uneven split works.
uneven = flow.ones(3 - rank, 4).to_global(placement=P, sbp=S0, shape=(5, 4))
assert uneven.sum().item() == 20.0
# Different layouts or dtypes of one tensor: a wait that never ended.
refused(ValueError, ["sbp: rank 0 ('S(0)',), rank 1 ('S(1)',)"],
        lambda: flow.ones(2, 2).to_global(placement=P, sbp=[S0, S1][rank]))
refused(ValueError, ["dtype: rank 0 oneflowlike.float32, rank 1 oneflowlike.int64"],
        lambda: flow.ones(2, 2, dtype=[flow.float32, flow.int64][rank]).to_global(
            placement=P, sbp=S0))
# flow.tensor takes the whole value, the same on every rank; each rank's own shard is refused.
refused(ValueError, ["[tensor]", "values: rank 0", "flow.tensor(piece).to_global"],
        lambda: flow.tensor(np.full((4, 2), rank, np.float32), placement=P, sbp=S0))
# One rank's own bad argument ends the call on both, naming it.
refused(ValueError, ["rank 1: [to_global] split axis 3 is out of range"],
        lambda: flow.ones(2, 2).to_global(placement=P, sbp=[S0, flow.sbp.split(3)][rank]))
# Collectives on local tensors.
t = flow.ones(3)
refused(ValueError, ["[broadcast]", "src: rank 0 0, rank 1 1"], lambda: flow.comm.broadcast(t, rank))
refused(ValueError, ["[all_reduce]", "shape: rank 0 (3,), rank 1 (4,)"],
        lambda: flow.comm.all_reduce(flow.ones(3 + rank)))
refused((ValueError, TypeError), ["[all_reduce]", "rank 1: [all_reduce] needs a local tensor"],
        lambda: flow.comm.all_reduce([t, "not a tensor"][rank]))
# Models of different sizes under DDP.
refused(ValueError, ["[broadcast]", "shape: rank 0"],
        lambda: nn.parallel.DistributedDataParallel(nn.Linear(4, 3 + 2 * rank)))
# A module built without one seed: each rank would keep its piece of its own values.
flow.manual_seed(rank)
refused(ValueError, ["[Module.to_global]", "weight: rank 0", "flow.manual_seed"],
        lambda: nn.Linear(4, 3).to_global(P, B))
# A checkpoint saved to a different path on each rank was incomplete in both.
refused(ValueError, ["[save]", "path: rank 0"],
        lambda: flow.save({"w": flow.ones(2, placement=P, sbp=B)}, f"{path}/ck{rank}"))
# requires_grad is kept by flow.tensor(placement=), and a local tensor requiring grad is refused
# by to_global (its gradient would never arrive).
made = flow.tensor(np.ones((2, 2), np.float32), placement=P, sbp=B, requires_grad=True)
assert made.requires_grad
made.sum().backward()
assert np.array_equal(made.grad.numpy(), np.ones((2, 2), np.float32))
refused(RuntimeError, ["gradients do not flow from a global tensor back to a local one"],
        lambda: flow.ones(2, 2, requires_grad=True).to_global(placement=P, sbp=B))
# The job is still whole: a collective after all the refusals sums right.
s = flow.ones(3) * (rank + 1)
flow.comm.all_reduce(s)
assert np.array_equal(s.numpy(), np.full(3, 3.0, np.float32)), s.numpy()
print(f"rank {rank}: agreed {checked}", flush=True)
