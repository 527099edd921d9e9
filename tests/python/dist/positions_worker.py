"""Run by test_program_positions.py on 2 processes (Note [Program positions] in
actor/program_positions.h). argv[1] names what the ranks do differently:

- "different ops", "extra op": runs that exchange data, in different orders on the two ranks.
  Every rank must raise at once naming both ranks (and what each runs, or where each is when
  one rank's differing run needed nothing of the other and finished), then refuse every later
  op with the other rank. Prints "rank R: refused 2".
- "local log": rank 0 alone runs ops that exchange no data (logging a replicated value), which
  is no difference: the ops after it give the right values. Prints "rank R: ok".
"""

import sys
import time

import oneflowlike as flow

rank = flow.env.get_rank()
P = flow.placement("cpu", ranks=[0, 1])
x = flow.ones(4, 2).to_global(placement=P, sbp=flow.sbp.broadcast)
y = (x * 3).to_global(sbp=flow.sbp.split(0))  # runs that agree come first
assert y.sum().item() == 24.0
case = sys.argv[1]

if case == "local log":
    for step in range(3):
        if rank == 0:
            print(f"rank 0 logs {x.mean().item()}", flush=True)  # a replicated value: no exchange
        assert (y * (step + 1)).sum().item() == 24.0 * (step + 1)
    print(f"rank {rank}: ok", flush=True)
    sys.exit(0)


def program():
    if case == "different ops":
        # A branch on the rank: rank 0 sums where rank 1 takes the mean, then both lay the result
        # out whole (item()). The mean exchanges data, the sum does not: rank 1's mean and rank
        # 0's all-reduce meet. Each waited for the other until the watchdog (minutes).
        return (y.sum() if rank == 0 else y.mean()).item()
    # "extra op": rank 0 alone gathers y (printing it, say), then both all-reduce a sum: rank 0's
    # gather meets rank 1's all-reduce.
    if rank == 0:
        y.to_global(sbp=flow.sbp.broadcast)
    return (y * 2).sum().item()


start = time.monotonic()
refusals = 0
try:
    program()
    raise AssertionError(f"rank {rank}: the ops ran")
except RuntimeError as e:
    # Either the differing runs meet (each rank names both), or one of them needed nothing from
    # the other rank (rank 1's mean only sends its rows of y to rank 0) and finished before
    # the other's announcement came: then the next run with that rank is refused, naming where
    # each rank is (Note [Program positions]). A loaded machine gave the second now and then.
    met = f"ranks {rank} and {1 - rank} run different things as their run" in str(e)
    later = (f"ranks {rank} and {1 - rank} run '" in str(e)
             and "at different points of their programs" in str(e))
    assert met or later, str(e)
    print(f"rank {rank}: {e}", flush=True)
    refusals += 1
assert time.monotonic() - start < 20, time.monotonic() - start
try:
    (y + 1).to_global(sbp=flow.sbp.broadcast)  # the same on both ranks, but too late
    raise AssertionError(f"rank {rank}: an op ran after the difference")
except RuntimeError as e:
    # This rank's own refusal, even when the other rank's notice of its refused run came first
    # (Runtime::run gives the refusal whatever came since the run started).
    assert f"' exchanges data with rank {1 - rank}, and an earlier run found" in str(e), str(e)
    refusals += 1
print(f"rank {rank}: refused {refusals}", flush=True)
