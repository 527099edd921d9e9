"""Run by test_ddp.py on 2 processes: collectives on local tensors (flow.comm, and
flow.distributed's torch names) and DistributedDataParallel, against what one process computes;
with --device cuda the tensors and models are on each process's GPU (simulated in CI). Prints
"ddp OK" per rank."""

import sys

import numpy as np

import oneflowlike as flow
import oneflowlike.distributed as dist
import oneflowlike.nn as nn
import oneflowlike.nn.functional as F

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2
device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"


def on(array, **kwargs):
    return flow.tensor(array, device=device, **kwargs)


# Collectives: each rank's own values, the results every rank computes alone.
mine = np.arange(6, dtype=np.float32).reshape(2, 3) * (rank + 1)
t = on(mine)
dist.all_reduce(t)
assert str(t.device) == str(flow.device(device))
np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3) * 3)
b = on(mine)
flow.comm.broadcast(b, 1)
np.testing.assert_array_equal(b.numpy(), np.arange(6).reshape(2, 3) * 2)
gathered = [flow.zeros(2, 3, device=device), flow.zeros(2, 3, device=device)]
dist.all_gather(gathered, on(mine))
for r in range(2):
    np.testing.assert_array_equal(gathered[r].numpy(), np.arange(6).reshape(2, 3) * (r + 1))
joined = flow.zeros(4, 3, device=device)
dist.all_gather_into_tensor(joined, on(mine))
np.testing.assert_array_equal(joined.numpy(), np.concatenate([np.arange(6).reshape(2, 3) * (r + 1)
                                                              for r in range(2)]))
part = flow.zeros(1, 3, device=device)
dist.reduce_scatter_tensor(part, on(mine))  # rows of the sum (3 x mine): row `rank`
np.testing.assert_array_equal(part.numpy(), (np.arange(6).reshape(2, 3) * 3)[rank:rank + 1])
counts = flow.tensor([rank + 1], dtype=flow.int64)
flow.comm.all_reduce(counts)
assert counts.numpy().tolist() == [3]
top = on(mine)
dist.all_reduce(top, op=dist.ReduceOp.MAX)  # (every reduction: dist/collectives_worker.py)
assert str(top.device) == str(flow.device(device))
np.testing.assert_array_equal(top.numpy(), np.arange(6).reshape(2, 3) * 2)
dist.barrier()

# DDP: each rank trains on its half of every batch; the weights must be those of one process
# trained on the whole batches (the mean loss of two equal halves is the mean of their means).
rng = np.random.default_rng(0)
xs = rng.standard_normal((4, 8, 6)).astype(np.float32)
ys = rng.integers(0, 3, (4, 8))


def build(seed):
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16),
                         nn.Linear(16, 3)).to(device)


def train(model, params, x_of, y_of, steps, accumulate=1):
    opt = flow.optim.AdamW(params, lr=0.05, weight_decay=0.1)
    for step in range(steps):
        for k in range(accumulate):
            last = k == accumulate - 1
            context = model.no_sync() if hasattr(model, "no_sync") and not last else _nothing()
            with context:
                loss = F.cross_entropy(model(x_of(step, k)), y_of(step, k)) / accumulate
                loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


half = slice(4 * rank, 4 * rank + 4)
reference = build(0)
train(reference, list(reference.parameters()), lambda s, k: on(xs[s]),
      lambda s, k: on(ys[s]), 4)
# Every rank built its model with another seed: the wrapper starts them all from rank 0's.
local = build(rank)
ddp = nn.parallel.DistributedDataParallel(local)
train(ddp, list(ddp.parameters()), lambda s, k: on(xs[s][half]),
      lambda s, k: on(ys[s][half]), 4)
for (name, want), got in zip(reference.state_dict().items(), local.state_dict().values()):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)

# no_sync: two micro-batches per step, each rank half of each, one average per step.
quarter = [slice(4 * rank, 4 * rank + 2), slice(4 * rank + 2, 4 * rank + 4)]
reference = build(0)
train(reference, list(reference.parameters()),
      lambda s, k: on(xs[s][[0, 1, 4, 5] if k == 0 else [2, 3, 6, 7]]),
      lambda s, k: on(ys[s][[0, 1, 4, 5] if k == 0 else [2, 3, 6, 7]]), 3, accumulate=2)
local = build(0)
ddp = nn.parallel.DistributedDataParallel(local)
train(ddp, list(ddp.parameters()), lambda s, k: on(xs[s][quarter[k]]),
      lambda s, k: on(ys[s][quarter[k]]), 3, accumulate=2)
for (name, want), got in zip(reference.state_dict().items(), local.state_dict().values()):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-6,
                               err_msg=f"no_sync {name}")
# A parameter used on one rank only gets the average with zeros from the others; one no rank
# used keeps no gradient (as torch leaves it). In eval mode the gradients are averaged too.
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.never = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x, use_b):
        y = self.a(x)
        return self.b(y) if use_b else y


flow.manual_seed(3)
branchy = nn.parallel.DistributedDataParallel(Branchy().to(device)).eval()
x = on(np.full((2, 3), rank + 1.0, np.float32))
branchy(x, use_b=rank == 0).sum().backward()
assert branchy.module.never.weight.grad is None
grads = [flow.zeros(3, 3, device=device), flow.zeros(3, 3, device=device)]
dist.all_gather(grads, branchy.module.b.weight.grad)
np.testing.assert_array_equal(grads[0].numpy(), grads[1].numpy())  # the same average on both
flow.manual_seed(3)
alone = Branchy()
alone(flow.tensor(np.full((2, 3), 1.0, np.float32)), use_b=True).sum().backward()
np.testing.assert_allclose(grads[0].numpy(), alone.b.weight.grad.numpy() / 2, rtol=1e-6)
print(f"rank {rank}: ddp OK", flush=True)
