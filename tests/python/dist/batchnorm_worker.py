"""Run by test_batch_norm.py on 2 processes: a model with BatchNorm trained in nn.Graph with the
batch split over the two ranks (data parallelism) gives one device's losses and running
statistics (computed here by each rank alone, eagerly, on the whole batch): the batch's
statistics are the whole batch's on both ranks, torch's SyncBatchNorm without asking (Note
[Buffers written in build] in compiler/graph_tracer.h). Prints "batchnorm OK" per rank."""

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

rank = flow.env.get_rank()
P = flow.placement("cpu", ranks=[0, 1])
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
rng = np.random.default_rng(0)
xs = [rng.standard_normal((8, 3, 4, 4)).astype(np.float32) * 2 + 1 for _ in range(4)]
ys = [rng.standard_normal((8, 5)).astype(np.float32) for _ in range(4)]


def model():
    flow.manual_seed(0)
    return nn.Sequential(nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(48, 5), nn.BatchNorm1d(5))


# One device: eager, the whole batch.
alone = model()
opt = flow.optim.SGD(alone.parameters(), lr=0.1)
want = []
for x, y in zip(xs, ys):
    loss = ((alone(flow.tensor(x)) - flow.tensor(y)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    want.append(loss.item())

# Two ranks: the batch split, the model replicated, one graph.
split = model()
split.to_global(P, B)


class Step(nn.Graph):
    def __init__(self):
        super().__init__()
        self.m = split
        self.add_optimizer(flow.optim.SGD(split.parameters(), lr=0.1))

    def build(self, x, y):
        loss = ((self.m(x) - y) ** 2).mean()
        loss.backward()
        return loss


step = Step()
got = [step(flow.tensor(x, placement=P, sbp=S0), flow.tensor(y, placement=P, sbp=S0)).item()
       for x, y in zip(xs, ys)]
np.testing.assert_allclose(got, want, rtol=1e-5)
ours, theirs = split.state_dict(), alone.state_dict()
for name in ("0.running_mean", "0.running_var", "3.running_mean", "3.running_var"):
    np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-5, atol=1e-6,
                               err_msg=name)
assert int(ours["0.num_batches_tracked"].numpy()) == 4
# Evaluation through the running statistics, eager on the global model.
split.eval()
alone.eval()
np.testing.assert_allclose(split(flow.tensor(xs[0], placement=P, sbp=S0)).numpy(),
                           alone(flow.tensor(xs[0])).numpy(), rtol=1e-5, atol=1e-5)
print(f"rank {rank}: batchnorm OK", flush=True)
