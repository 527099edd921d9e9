"""Run by test_program_positions.py on 2 processes (Note [Program positions] in
actor/session_transport.h): the ranks run their ops on global tensors in different orders, as
argv[1] says, and every rank must raise at once naming both ranks and both ops, then refuse
every later op over the two ranks. Prints "rank R: refused N" at the end."""

import sys
import time

import oneflowlike as flow

rank = flow.env.get_rank()
P = flow.placement("cpu", ranks=[0, 1])
x = flow.ones(4, 2).to_global(placement=P, sbp=flow.sbp.broadcast)
y = (x * 3).to_global(sbp=flow.sbp.split(0))  # runs that agree come first
assert y.sum().item() == 24.0
case = sys.argv[1]


def program():
    if case == "different ops":
        # A branch on the rank: rank 0 sums where rank 1 takes the mean; each waited for the
        # other until the watchdog (minutes). The sum of rank 0's piece needs nothing of rank 1's
        # and may finish; then item() is refused, naming the sum and the mean all the same.
        return (y.sum() if rank == 0 else y.mean()).item()
    # "extra op": rank 0 runs one more sum than rank 1, the same op as rank 1's next. It pairs
    # with rank 1's (the limit of Note [Program positions]); the next op, where the programs
    # differ, is refused on both.
    if rank == 0:
        y.sum()
    y.sum()
    return y.to_global(sbp=flow.sbp.broadcast)  # where rank 0 runs its second sum


start = time.monotonic()
refusals = 0
try:
    program()
    raise AssertionError(f"rank {rank}: the ops ran")
except RuntimeError as e:
    assert "run different things as run" in str(e), str(e)
    assert f"ranks {rank} and {1 - rank}" in str(e), str(e)
    if case == "different ops":
        # Rank 1 has loaded the sum (a run that agreed), rank 0 never the mean.
        said = ("rank 0 runs 'Tensor.sum', rank 1 runs a graph or op that rank 0 has not loaded"
                if rank == 0 else "rank 1 runs 'Tensor.mean', rank 0 runs 'Tensor.sum'")
        assert said in str(e), str(e)
    print(f"rank {rank}: {e}", flush=True)
    refusals += 1
assert time.monotonic() - start < 20, time.monotonic() - start
try:
    (x + 1).sum().item()  # the same on both ranks, but too late
    raise AssertionError(f"rank {rank}: an op ran after the difference")
except RuntimeError as e:
    assert "run nothing more together" in str(e), str(e)
    refusals += 1
print(f"rank {rank}: refused {refusals}", flush=True)
