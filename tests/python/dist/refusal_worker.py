"""Run by test_graph_refusals.py on 2 processes: every rank refuses a graph that mixes local
and global tensors (Note [Local and global do not mix in a graph]) with the same error, before
anything runs, and the job then ends normally."""

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

rank = flow.env.get_rank()
both = flow.placement("cpu", ranks=[0, 1])
rng = np.random.default_rng(rank)  # a different data shard per rank
x = flow.tensor(rng.standard_normal((4, 4)).astype(np.float32))
y = flow.tensor(rng.integers(0, 3, 4))


class Train(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.AdamW(model.parameters(), lr=0.01))

    def build(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


def refused(kind, phrase, call):
    try:
        call()
    except kind as e:
        assert phrase in str(e), e
        return
    raise AssertionError(f"rank {rank}: accepted what must be refused ({phrase})")


flow.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
model.to_global(both, flow.sbp.broadcast)
# Item 1: local shards fed to a data-parallel graph would train without reducing gradients.
refused(TypeError, "input 'x' of Train is a local tensor", lambda: Train(model)(x, y))

# Local weights with global data: each rank would keep its own copy.
local_model = nn.Sequential(nn.Linear(4, 3))
refused(TypeError, "parameter 'model.0.weight' (3, 4) of Train is a local tensor",
        lambda: Train(local_model)(x.to_global(placement=both, sbp=flow.sbp.split(0)),
                                   y.to_global(placement=both, sbp=flow.sbp.split(0))))


# A local graph reaching a shared placement would be traced differently on each rank.
class Gather(nn.Graph):
    def build(self, x):
        return x.to_global(placement=both, sbp=flow.sbp.broadcast)


refused(ValueError, "inputs and parameters are local, so it runs on this rank alone",
        lambda: Gather()(x))

# Eager: a local operand of a global op.
g = flow.tensor(np.ones((4, 4), np.float32), placement=both, sbp=flow.sbp.split(0))
refused(TypeError, "got a global tensor and a local tensor (4, 4)", lambda: g + x)
refused(TypeError, "got a global tensor and a local tensor (4, 4)", lambda: x + g)
refused(TypeError, "got a global tensor and a local tensor (4, 4)", lambda: flow.cat([g, x]))
# Local values loaded into a global graph: fine when every rank gives the same, refused on
# every rank when they differ.
graph = Train(model)
state = {k: (v.numpy() if flow.is_tensor(v) else v) for k, v in graph.state_dict().items()}
same = {k: flow.tensor(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}
graph.load_state_dict(same)
differs = dict(same)
differs["model.0.bias"] = flow.full((8,), float(rank))
refused(ValueError, "differ between ranks: ['model.0.bias']",
        lambda: graph.load_state_dict(differs))
print(f"rank {rank}: refusals OK", flush=True)
