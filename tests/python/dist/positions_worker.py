"""Run by test_program_positions.py on 2 processes (Note [Program positions] in
actor/program_positions.h): the ranks run their ops on global tensors in different orders, as
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
        # A branch on the rank: rank 0 sums where rank 1 takes the mean, then both lay the result
        # out whole (item()): the same all-reduce of different values gave a wrong value and no
        # error.
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
    assert f"ranks {rank} and {1 - rank}" in str(e), str(e)
    if case == "different ops":
        # Found where the ranks first announce a run to each other: at the mean when it sends
        # rank 1's piece (the sum needs nothing of rank 1), or, when the mean's data went with
        # its message and it finished, at the all-reduce after it, before it takes any data;
        # each rank names what it ran there or since the ranks last agreed.
        own = "'Tensor.sum'" if rank == 0 else "'Tensor.mean'"
        said = own
        assert ("run different things as run 6" in str(e) or
                f"before run 7 over ranks {{0, 1}}, where both run 'to_global': since run 6 "
                f"rank {rank} ran {own}" in str(e)), str(e)
    else:
        # Found at rank 0's second sum (which rank 1 runs the all-reduce against), or at the
        # all-reduce, which the two ranks start as different runs over them: before it takes
        # any data.
        said = "'Tensor.sum'" if rank == 0 else "'to_global'"
        assert ("run different things as run 7 over ranks {0, 1}" in str(e) or
                "run 'to_global' at different points of their programs" in str(e)), str(e)
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
