"""Run by test_ddp.py on 3 processes: the first collective is a group's (ranks 0 and 2), and
rank 1 runs nothing with the others at all. new_group joined every process to the job, so the
members do not wait for rank 1 in the bootstrap. Prints "group first OK" per rank."""

import numpy as np

import oneflowlike as flow
import oneflowlike.distributed as dist

rank = dist.get_rank()
group = dist.new_group([0, 2])
if rank != 1:
    t = flow.tensor(np.full(3, rank + 1.0, np.float32))
    dist.all_reduce(t, group=group)
    np.testing.assert_array_equal(t.numpy(), np.full(3, 4.0, np.float32))
    gathered = [flow.zeros(3), flow.zeros(3)] if rank == 2 else None
    dist.gather(t * (rank + 1), gathered, dst=2, group=group)
    if rank == 2:
        np.testing.assert_array_equal(np.stack([g.numpy() for g in gathered]),
                                      np.stack([np.full(3, 4.0), np.full(3, 12.0)]))
    mine = flow.zeros(2)
    dist.scatter(mine, [flow.ones(2), flow.ones(2) * 5] if rank == 0 else None, src=0,
                 group=group)
    np.testing.assert_array_equal(mine.numpy(), np.full(2, 1.0 if rank == 0 else 5.0))
    dist.reduce(mine, dst=0, op=dist.ReduceOp.MAX, group=group)
    np.testing.assert_array_equal(mine.numpy(), np.full(2, 5.0 if rank == 0 else 5.0))
assert dist.get_world_size(group) == (2 if rank != 1 else -1)
print("group first OK", flush=True)
