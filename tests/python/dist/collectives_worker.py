"""Run by test_ddp.py on 3 processes: torch.distributed's reductions (sum, avg, product, min,
max), reduce / gather / scatter to and from one rank, groups of some of the ranks, async_op's
Work and the object collectives (Note [Reductions and groups] in comm.py), against what one
process computes from every rank's values; and their refusals, raised on every rank (or, for a
rank outside a group, on that rank alone). Prints "collectives OK" per rank."""

import numpy as np

import oneflowlike as flow
import oneflowlike.distributed as dist
from oneflowlike import comm

rank, world = dist.get_rank(), dist.get_world_size()
assert world == 3


def values(r, dtype=np.float32):
    return (np.arange(6).reshape(2, 3) - 2).astype(dtype) * (r + 1)


every = np.stack([values(r) for r in range(world)])
expect = {"sum": every.sum(0), "avg": every.sum(0) / world, "product": every.prod(0),
          "min": every.min(0), "max": every.max(0)}
for op, want in expect.items():
    t = flow.tensor(values(rank))
    work = dist.all_reduce(t, op=op, async_op=op == "avg")
    if op == "avg":
        assert work.wait() and work.is_completed() and work.result()[0] is t
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, err_msg=op)
    # Integers too (avg aside: refused below).
    if op != "avg":
        i = flow.tensor(values(rank, np.int64))
        dist.all_reduce(i, op=getattr(dist.ReduceOp, op.upper()))
        np.testing.assert_array_equal(i.numpy(), want.astype(np.int64), err_msg=op)

# The sum and avg are made in the caller's tensor (Note [Donated pieces]): the result the run
# hands back is the tensor's own memory, and the write is counted in its version.
written, write = [], comm._write
comm._write = lambda tensor, value: written.append(value._data_ptr == tensor._data_ptr) or write(
    tensor, value)
for op in ("sum", "avg"):
    t = flow.tensor(values(rank))
    view = t.reshape(6)  # shares its memory: sees the result
    version = t._version
    dist.all_reduce(t, op=op)
    np.testing.assert_allclose(view.numpy(), expect[op].reshape(6), rtol=1e-6)
    assert t._version > version, (op, version, t._version)
g = flow.tensor(values(rank), requires_grad=True)
dist.all_reduce(g)  # on a leaf's data, as torch's (no autograd)
np.testing.assert_allclose(g.detach().numpy(), expect["sum"], rtol=1e-6)
assert written == [True, True, True], written
comm._write = write

# async_op=True: the call (its ranks' agreement check too) runs after it returns (Note
# [Asynchronous collectives]). Rank 1 joins late, so on the others the call has returned while
# the sum cannot be done yet; the caller computes meanwhile, and wait() finds the sum, its
# write counted, in the tensor.
import time  # noqa: E402

dist.barrier()
if rank == 1:
    time.sleep(1.0)
t = flow.tensor(values(rank))
version = t._version
work = dist.all_reduce(t, async_op=True)
if rank != 1:
    assert not work.is_completed(), "the sum was done before rank 1 took part"
meanwhile = flow.ones(64, 64) @ flow.ones(64, 64)  # local work while it runs
assert work.wait() and work.is_completed() and work.is_success()
np.testing.assert_allclose(t.numpy(), expect["sum"], rtol=1e-6)
assert t._version > version and work.get_future().wait()[0] is t
for op in ("max", "sum"):  # every op, with or without the agreement check (DDP's buckets)
    t = flow.tensor(values(rank))
    pending = comm._all_reduce(t, check=op == "max", reduce_op=op, async_op=True)
    assert pending.wait() is t
    np.testing.assert_allclose(t.numpy(), expect[op], rtol=1e-6)
# The other collectives too, in submission order, with torch's Work.
b = flow.tensor(values(rank))
parts = [flow.zeros(2, 3) for _ in range(world)]
works = [dist.broadcast(b, src=2, async_op=True),
         dist.all_gather(parts, flow.tensor(values(rank)), async_op=True),
         dist.barrier(async_op=True)]
assert all(w.wait() for w in works)
np.testing.assert_array_equal(b.numpy(), values(2))
for r in range(world):
    np.testing.assert_array_equal(parts[r].numpy(), values(r))
gathered = works[1].result()  # torch's list of the outputs: the gathered tensors
assert len(gathered) == world and all(g is p for g, p in zip(gathered, parts))
assert works[2].result() == [] and works[1].get_future().then(lambda f: 1).wait() == 1
# A bad call raises from wait(), on every rank, as the synchronous one raises from the call.
bad = dist.all_reduce(flow.ones(2), op="max" if rank == 0 else "sum", async_op=True)
try:
    bad.wait()
    raise AssertionError("ranks passing different ops were not refused")
except ValueError as e:
    assert "and the same op. However, op: rank 0 max, rank 1 sum, rank 2 sum." in str(e), e
assert not bad.is_success()
# An avg is whole once complete (divided by the runs thread, not by wait()); two in flight and
# nobody waiting, then a synchronous collective: they run first, in order, on every rank.
a, b = flow.tensor(values(rank)), flow.tensor(values(rank) * 2)
first, second = dist.all_reduce(a, op="avg", async_op=True), dist.all_reduce(b, async_op=True)
deadline = time.monotonic() + 60
while not first.is_completed():
    assert time.monotonic() < deadline, "an asynchronous avg never completed"
    time.sleep(0.001)
np.testing.assert_allclose(a.numpy(), expect["avg"], rtol=1e-6)
c = flow.tensor(values(rank))
dist.all_reduce(c)
np.testing.assert_allclose(b.numpy(), expect["sum"] * 2, rtol=1e-6)
np.testing.assert_allclose(c.numpy(), expect["sum"], rtol=1e-6)
assert second.is_completed() and second.wait()
# A shape no graph was compiled for yet, then a synchronous call of the same shape at once: the
# runs thread compiles and runs its graphs while the caller goes on, and the caller's call
# compiles (or finds) the same ones only after (the cache and the runtimes' transport sessions
# are made in one order on every rank).
for n in (5, 7, 11):
    fresh = [flow.full((n,), float(rank + k)) for k in range(2)]
    works = [dist.all_reduce(f, async_op=True) for f in fresh]
    now = flow.full((n,), float(rank))
    dist.all_reduce(now)
    for k, f in enumerate(fresh):
        assert works[k].wait()
        np.testing.assert_allclose(f.numpy(), np.full(n, sum(r + k for r in range(world))))
    np.testing.assert_allclose(now.numpy(), np.full(n, sum(range(world))))

# To and from one rank: the others' tensors stay as they were.
for op in ("sum", "max"):
    t = flow.tensor(values(rank))
    dist.reduce(t, dst=1, op=op)
    np.testing.assert_allclose(t.numpy(), expect[op] if rank == 1 else values(rank), rtol=1e-6)
# From comm.kColumnsBytes up, max, min and product reduce by columns (an all-to-all, each
# rank's columns reduced, then gathered or sent to dst), over a flat size the three ranks do not
# divide evenly: every rank ends with one process's bits (the rows taken in rank order).
by_columns, reduced_columns = [], comm._reduced_columns
comm._reduced_columns = lambda *a, **k: by_columns.append(1) or reduced_columns(*a, **k)
shape = (11, comm.kColumnsBytes // 4 // 11 + 4)
assert np.prod(shape) % world and np.prod(shape) * 4 >= comm.kColumnsBytes


def big(r, dtype):
    g = np.random.default_rng(r)
    if dtype == np.int64:
        return g.integers(-50, 50, shape).astype(dtype)
    return g.uniform(0.5, 1.5, shape).astype(dtype)


for dtype in (np.float32, np.int64):
    rows = [big(r, dtype) for r in range(world)]
    want = {"max": np.max(rows, 0), "min": np.min(rows, 0),
            "product": (rows[0] * rows[1]) * rows[2]}
    for op in ("max", "min", "product"):
        t = flow.tensor(big(rank, dtype))
        dist.all_reduce(t, op=op)
        np.testing.assert_array_equal(t.numpy(), want[op], err_msg=f"{op} {dtype}")
        t = flow.tensor(big(rank, dtype))
        dist.reduce(t, dst=2, op=op)
        np.testing.assert_array_equal(t.numpy(), want[op] if rank == 2 else big(rank, dtype),
                                      err_msg=f"reduce {op} {dtype}")
assert len(by_columns) == 12, by_columns
gathered = [flow.zeros(2, 3) for _ in range(world)] if rank == 2 else None
dist.gather(flow.tensor(values(rank)), gathered, dst=2)
if rank == 2:
    for r in range(world):
        np.testing.assert_array_equal(gathered[r].numpy(), values(r))
mine = flow.zeros(2, 3)
dist.scatter(mine, [flow.tensor(values(r) * 10) for r in range(world)] if rank == 0 else None,
             src=0)
np.testing.assert_array_equal(mine.numpy(), values(rank) * 10)
part = flow.zeros(2, 3)
dist.reduce_scatter_tensor(part, flow.tensor(np.concatenate([values(rank) + r for r in range(3)])),
                           op="max")
np.testing.assert_array_equal(part.numpy(), np.max([values(r) + rank for r in range(3)], 0))
part = flow.zeros(2, 3, dtype=flow.int64)
dist.reduce_scatter_tensor(part, flow.tensor(np.concatenate(
    [values(rank, np.int64) - r for r in range(3)])), op="product")
np.testing.assert_array_equal(part.numpy(), np.prod([values(r, np.int64) - rank
                                                     for r in range(3)], 0))

# A group of ranks 0 and 2: its collectives run over them; rank 1 is refused alone.
group = dist.new_group([0, 2])
assert dist.get_rank(group) == {0: 0, 1: -1, 2: 1}[rank]
assert dist.get_world_size(group) == (-1 if rank == 1 else 2)  # torch's, outside the group
assert dist.get_process_group_ranks(group) == [0, 2] and dist.get_global_rank(group, 1) == 2
assert dist.get_group_rank(group, 2) == 1 and dist.get_process_group_ranks(None) == [0, 1, 2]
for bad in (lambda: dist.get_group_rank(group, 1), lambda: dist.get_global_rank(group, 2)):
    try:
        bad()
        raise AssertionError("a rank outside the group was accepted")
    except ValueError as e:
        assert "ProcessGroup(ranks=[0, 2])" in str(e), e
try:
    dist.get_rank([0, 2])
    raise AssertionError("a list was taken for a group")
except TypeError as e:
    assert "[get_rank] group must be a group from new_group" in str(e), e
if rank == 1:
    try:
        dist.all_reduce(flow.ones(2), group=group)
        raise AssertionError("a rank outside the group ran its collective")
    except ValueError as e:
        assert "rank 1 is not in the group of ranks [0, 2]" in str(e), e
else:
    t = flow.tensor(values(rank))
    dist.all_reduce(t, group=group)
    np.testing.assert_array_equal(t.numpy(), values(0) + values(2))
    b = flow.tensor(values(rank))
    dist.broadcast(b, src=2, group=group)
    np.testing.assert_array_equal(b.numpy(), values(2))
    pair = [flow.zeros(2, 3), flow.zeros(2, 3)]
    dist.all_gather(pair, flow.tensor(values(rank)), group=group)
    np.testing.assert_array_equal(np.stack([p.numpy() for p in pair]),
                                  np.stack([values(0), values(2)]))
    names = [None, None]
    dist.all_gather_object(names, f"rank {rank}", group=group)
    assert names == ["rank 0", "rank 2"], names
    t = flow.tensor(big(rank, np.float32))
    dist.all_reduce(t, op="max", group=group)  # by columns over two ranks
    np.testing.assert_array_equal(t.numpy(), np.maximum(big(0, np.float32), big(2, np.float32)))
    dist.barrier(group)
assert len(by_columns) == (12 if rank == 1 else 13), by_columns
comm._reduced_columns = reduced_columns

# Objects.
seen = [None] * world
dist.all_gather_object(seen, {"rank": rank, "loss": [0.5 * rank] * (rank + 1)})
assert seen == [{"rank": r, "loss": [0.5 * r] * (r + 1)} for r in range(world)], seen
config = [{"lr": 3e-4, "name": "run"}, None] if rank == 1 else [None, None]
dist.broadcast_object_list(config, src=1)
assert config == [{"lr": 3e-4, "name": "run"}, None], config


def refused(call, error, phrase):
    try:
        call()
    except error as e:
        assert phrase in str(e), e
    else:
        raise AssertionError(f"not refused: {phrase}")


# Every rank raises, none waits: a bad op, avg of integers, ranks that differ in op.
refused(lambda: dist.all_reduce(flow.ones(2), op="mean"), ValueError,
        "op must be one of sum, avg, product, min, max (torch's ReduceOp). However, got 'mean'")
refused(lambda: dist.all_reduce(flow.ones(2, dtype=flow.int64), op="avg"), TypeError,
        "op avg needs a floating tensor")
refused(lambda: dist.all_reduce(flow.ones(2), op="max" if rank == 0 else "sum"), ValueError,
        "and the same op. However, op: rank 0 max, rank 1 sum, rank 2 sum.")
refused(lambda: dist.reduce(flow.ones(2), dst=5), ValueError,
        "dst must be a rank of the group [0, 1, 2]. However, got 5")
refused(lambda: dist.all_gather_object([None] * (2 if rank == 0 else 3), rank), ValueError,
        "object_list must be a list of 3 entries")
refused(lambda: dist.all_gather_object([None] * 3, (lambda: 0) if rank == 2 else rank),
        TypeError if rank == 2 else ValueError, "cannot pickle" if rank == 2 else "rank 2")
refused(lambda: dist.scatter(flow.zeros(2), [flow.zeros(2, dtype=flow.float64)] * 3
                             if rank == 0 else None, src=0), ValueError,
        "scatter_list[0] must have the tensor's shape and dtype (2,) oneflowlike.float32")
# A copy that indexing made (a view in torch) would take the result where its tensor never sees
# it: refused on every rank before anything moves, and the tensors stay as they were.
rows = flow.zeros(4, 3)
refused(lambda: dist.all_reduce(rows[1:3]), ValueError,
        "[all_reduce] cannot write the tensor in place: it is a copy that indexing")
refused(lambda: dist.broadcast(rows[1:3] if rank == 1 else flow.zeros(2, 3), src=0), ValueError,
        "[broadcast] cannot write the tensor in place" if rank == 1 else "rank 1")
assert float(rows.abs().sum()) == 0
dist.barrier()
print("collectives OK", flush=True)
