"""Run by test_global_tensor.py on 1, 2 and 4 processes through the launcher: every SBP-to-SBP
conversion keeps the logical value (numpy() before and after), on 1-d placements of 1..world
ranks and on a 2x2 placement, plus moves between placements and bad inputs. Prints one line
per checked case; exits non-zero on the first mismatch."""

import itertools
import sys

import numpy as np

import oneflowlike as flow

rank, world = flow.env.get_rank(), flow.env.get_world_size()
S0, S1, B, P = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum
ALL = [S0, S1, B, P]
checked = 0


def check(value, expected, what):
    global checked
    if rank not in value.placement:
        return
    got = value.numpy()
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-6, atol=1e-6):
        print(f"rank {rank}: MISMATCH {what}: got {got} expected {expected}", flush=True)
        sys.exit(1)
    checked += 1


# An uneven shape (5, 7): splits over 2, 3 and 4 ranks give unequal pieces.
array = np.arange(35, dtype=np.float32).reshape(5, 7) - 10.0

# 1-d placements of 1..world ranks: every conversion.
for n in range(1, world + 1):
    placement = flow.placement("cpu", ranks=list(range(n)))
    for a, b in itertools.product(ALL, ALL):
        x = flow.tensor(array, placement=placement, sbp=a)
        check(x, array, f"{n} ranks {a} numpy")
        y = x.to_global(sbp=b)
        assert y.sbp == (b,), (y.sbp, b)
        check(y, array, f"{n} ranks {a} -> {b}")

# 2x2: every pair of 2-d SBPs.
if world >= 4:
    grid = flow.placement("cpu", ranks=[[0, 1], [2, 3]])
    nd_all = list(itertools.product(ALL, ALL))
    for a in nd_all:
        x = flow.tensor(array, placement=grid, sbp=a)
        for b in nd_all:
            check(x.to_global(sbp=b), array, f"2x2 {a} -> {b}")

# Between placements (pipeline-stage boundaries).
if world >= 2:
    first = flow.placement("cpu", ranks=[0])
    rest = flow.placement("cpu", ranks=list(range(1, world)))
    everyone = flow.placement("cpu", ranks=list(range(world)))
    for a, b in itertools.product([S0, B, P], [S1, B]):
        x = flow.tensor(array, placement=first, sbp=a)
        check(x.to_global(placement=rest, sbp=b), array, f"[0] {a} -> {rest.ranks} {b}")
        x = flow.tensor(array, placement=everyone, sbp=a)
        check(x.to_global(placement=first, sbp=b), array, f"all {a} -> [0] {b}")

# One rank's tensor to B on a placement holding that rank: one BROADCAST (a tree for small
# tensors, a chain of pieces for large ones).
if world >= 2:
    large = (np.arange(300 * 200, dtype=np.float32).reshape(300, 200) % 97) / 7.0
    for root in sorted({0, world - 1}):
        single = flow.placement("cpu", ranks=[root])
        for value, what in [(array, "small"), (large, "large")]:
            x = flow.tensor(value, placement=single, sbp=B)
            check(x.to_global(placement=everyone, sbp=B), value, f"[{root}] -> all B ({what})")

# Layouts of one rank set that no one-dimension collective makes, across hierarchies too: one
# grouped SEND_RECV per rank.
if world >= 4:
    for a in [(S0, S1), (S1, S0), (B, S1)]:
        x = flow.tensor(array, placement=everyone, sbp=S0)
        check(x.to_global(placement=grid, sbp=a), array, f"all S0 -> 2x2 {a}")
        y = flow.tensor(array, placement=grid, sbp=a)
        check(y.to_global(placement=everyone, sbp=S1), array, f"2x2 {a} -> all S1")

# Local pieces: each rank gives its own shard.
placement = flow.placement("cpu", ranks=list(range(world)))
local = flow.tensor(np.full((2, 3), float(rank), np.float32))
g = local.to_global(placement=placement, sbp=S0)
assert g.shape == (2 * world, 3), g.shape
expected = np.repeat(np.arange(world, dtype=np.float32), 2)[:, None] * np.ones((1, 3), np.float32)
check(g, expected, "local S(0) pieces")
g = local.to_global(placement=placement, sbp=P)
check(g, np.full((2, 3), sum(range(world)), np.float32), "local P pieces")
assert np.array_equal(g.to_local().numpy(), local.numpy())

# Ops on global tensors compile to small graphs.
x = flow.tensor(array, placement=placement, sbp=S0)
check(x * 2.0 + 1.0, array * 2 + 1, "x * 2 + 1")
check((x * x).sum(), np.asarray((array * array).sum()), "sum(x * x)")
w = flow.tensor(np.ones((7, 3), np.float32), placement=placement, sbp=B)
check(x @ w, array @ np.ones((7, 3), np.float32), "x @ w")
check(flow.matmul(x, w), array @ np.ones((7, 3), np.float32), "flow.matmul(x, w)")
check(flow.nn.functional.relu(x), np.maximum(array, 0), "F.relu(x)")

# Random tensors: the same values whatever the placement.
flow.manual_seed(3)
r1 = flow.randn(6, 4, placement=placement, sbp=S0).numpy()
flow.manual_seed(3)
r2 = flow.randn(6, 4, placement=flow.placement("cpu", ranks=[0]), sbp=B).numpy() if rank == 0 else None
flow.manual_seed(3)
r3 = flow.randn(6, 4).numpy()
assert np.array_equal(r1, r3)
if rank == 0:
    assert np.array_equal(r2, r3)

# Bad inputs raise the right exceptions, naming the problem.
def expect(exc, fragment, fn):
    try:
        fn()
    except exc as e:
        assert fragment in str(e), (fragment, str(e))
        return
    raise AssertionError(f"expected {exc.__name__} with '{fragment}'")


expect(ValueError, "outside the world", lambda: flow.placement("cpu", ranks=[0, world]))
expect(IndexError, "split on axis 2",
       lambda: flow.tensor(array, placement=placement, sbp=flow.sbp.split(2)))
expect(ValueError, "needs 2 sbp",
       lambda: flow.tensor(array, placement=flow.placement("cpu", ranks=[[0]]), sbp=S0))
expect(ValueError, "must have shape", lambda: flow.tensor(np.ones((3, 3), np.float32)).to_global(
    placement=placement, sbp=S0, shape=(5 * world, 3)))
expect(TypeError, "flow.sbp", lambda: flow.tensor(array, placement=placement, sbp="S(0)"))
print(f"rank {rank}: {checked} checks passed", flush=True)
