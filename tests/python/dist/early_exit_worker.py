"""Run by test_departures.py on 3 processes: a data-parallel graph trained for 5 steps, except
on rank 1, whose loop ends after 3 (a normal exit). Ranks 0 and 2 must end at once, each naming
rank 1 and the iteration it stopped before (Note [Departures]); they print what they caught
and exit 1, as an uncaught exception would. With --eager the same model trains eagerly on
global tensors (each op a one-op graph run on the caller: Note [Caller-run runtimes])."""

import os
import sys
import time

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

rank = flow.env.get_rank()
everyone = flow.placement("cpu", ranks=[0, 1, 2])
flow.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
model.to_global(everyone, flow.sbp.broadcast)


class Train(nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


eager = "--eager" in sys.argv
graph = Train()
if eager:
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    def graph(x, y):  # noqa: F811  the eager step in the graph's place
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.numpy()
rng = np.random.default_rng(0)
# Every rank makes every batch (making a global tensor is collective: Note [Ranks agree]), so
# the rank that leaves early stops in the training loop, between steps.
batches = [(flow.tensor(rng.standard_normal((6, 4)).astype(np.float32), placement=everyone,
                        sbp=flow.sbp.split(0)),
            flow.tensor(rng.integers(0, 3, 6), placement=everyone, sbp=flow.sbp.split(0)))
           for _ in range(5)]
steps = 3 if rank == 1 else 5
for step in range(1, steps + 1):
    x, y = batches[step - 1]
    start = time.monotonic()
    try:
        graph(x, y)
    except RuntimeError as e:
        print(f"rank {rank} caught after {time.monotonic() - start:.2f} s in step {step}: {e}",
              flush=True)
        os._exit(1)
print(f"rank {rank}: done after {steps} steps", flush=True)
sys.exit(0)
