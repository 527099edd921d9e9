"""Run by test_sharded_creation.py through the launcher: flow.randn / rand / randint / zeros /
ones / full with placement= and sbp= (Note [Sharded creation]) give the one-device values for
every SBP on 1-d placements of 1..world ranks and on 2x2, each rank making only its piece (the
allocator's live bytes grow by the piece, not the logical tensor), and the generator moves on
alike on every rank, also on ranks outside the placement. A layer built on the meta device
lays out to the eager values, allocating only its pieces."""

import itertools
import sys

import numpy as np

import oneflowlike as flow
from oneflowlike import _C

rank, world = flow.env.get_rank(), flow.env.get_world_size()
S0, S1, B, P = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum
ALL = [S0, S1, B, P]
SHAPE = (5, 7)  # uneven pieces over 2, 3 and 4 ranks
MAKERS = {
    "randn": lambda **kw: flow.randn(*SHAPE, **kw),
    "rand": lambda **kw: flow.rand(SHAPE, dtype=flow.float64, **kw),
    "randint": lambda **kw: flow.randint(-3, 9, SHAPE, **kw),
    "zeros": lambda **kw: flow.zeros(*SHAPE, **kw),
    "empty": lambda **kw: flow.empty(*SHAPE, **kw),
    "ones": lambda **kw: flow.ones(SHAPE, dtype=flow.float64, **kw),
    "full": lambda **kw: flow.full(SHAPE, 2.5, **kw),
    "normal": lambda **kw: flow.normal(1.5, 0.5, SHAPE, **kw),
}
checked = 0


def expected(name, seed):
    flow.manual_seed(seed)
    value = MAKERS[name]().numpy()
    after = flow.randn(3).numpy()  # where the generator stands afterwards
    return value, after


def check(name, placement, sbp, seed):
    global checked
    want, want_after = expected(name, seed)
    flow.manual_seed(seed)
    g = MAKERS[name](placement=placement, sbp=sbp)
    after = flow.randn(3).numpy()
    if not np.array_equal(after, want_after):
        print(f"rank {rank}: GENERATOR OUT OF STEP after {name} on {placement} {sbp}")
        sys.exit(1)
    if g.shape != SHAPE or g.dtype != flow.tensor(want).dtype:
        # Every rank, also one outside the placement, knows the shape and dtype.
        print(f"rank {rank}: SHAPE {g.shape} or DTYPE {g.dtype} for {name} on {placement}")
        sys.exit(1)
    if rank in placement:
        got = g.numpy()
        if got.dtype != want.dtype or not np.array_equal(got, want):
            print(f"rank {rank}: MISMATCH {name} on {placement} {sbp}: {got} vs {want}")
            sys.exit(1)
        checked += 1


for n in range(1, world + 1):
    placement = flow.placement("cpu", ranks=list(range(n)))
    for name, sbp in itertools.product(MAKERS, ALL):
        check(name, placement, sbp, seed=n * 100 + len(name))
if world == 4:
    grid = flow.placement("cpu", ranks=[[0, 1], [2, 3]])
    for name, (a, b) in itertools.product(MAKERS, itertools.product(ALL, ALL)):
        check(name, grid, (a, b), seed=7 + len(name))
    # Only the piece is ever allocated: a (1024, 1024) float32 split over 4 ranks is 1 MiB
    # here, never the 4 MiB of the whole (the peak, not just what stays).
    before = _C.cpu_memory_live_bytes()
    _C.cpu_memory_reset_peak()
    big = flow.randn(1024, 1024, placement=flow.placement("cpu", ranks=[0, 1, 2, 3]), sbp=S0)
    grown = _C.cpu_memory_live_bytes() - before
    peak = _C.cpu_memory_peak_bytes() - before
    if grown != 256 * 1024 * 4 or peak != grown:
        print(f"rank {rank}: ALLOCATED {grown} bytes (peak {peak}) for a 256 x 1024 float32 "
              "piece")
        sys.exit(1)
    del big
    # A meta-built layer laid out with its weight split: the same values as an eager one, and
    # only the pieces allocated, never the whole weight (Note [Meta tensors]).
    import oneflowlike.nn as nn

    flow.manual_seed(21)
    eager = nn.Linear(1024, 1024)
    flow.manual_seed(21)
    with flow.device("meta"):
        lazy = nn.Linear(1024, 1024)
    before = _C.cpu_memory_live_bytes()
    _C.cpu_memory_reset_peak()
    lazy.to_global(flow.placement("cpu", ranks=[0, 1, 2, 3]), B,
                   sbp_for=lambda name: S0 if name == "weight" else None)
    peak = _C.cpu_memory_peak_bytes() - before
    if not (256 * 1024 + 1024) * 4 <= peak <= (256 * 1024 + 1024) * 4 + 4096:  # agreement's bytes
        print(f"rank {rank}: META LAYOUT PEAK {peak} bytes for a 256 x 1024 piece and a bias")
        sys.exit(1)
    for name in ("weight", "bias"):
        if not np.array_equal(getattr(lazy, name).numpy(), getattr(eager, name).numpy()):
            print(f"rank {rank}: META VALUES of {name} differ from the eager layer's")
            sys.exit(1)
    checked += 1
print(f"rank {rank}: {checked} creation checks passed", flush=True)
