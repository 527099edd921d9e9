"""Run by test_distributed_frontend.py on 4 processes: a GPT trained two steps on DP2 x TP2 is
saved (every rank writes its pieces); the checkpoint is loaded whole on every rank, and onto a
PP2 layout and a one-rank layout, where training resumes with the loss and weights the DP2 x TP2
run has after its third step; corrupt, incomplete and mismatched checkpoints are refused."""

import os
import shutil
import sys

import numpy as np

import oneflowlike as flow

sys.path.insert(0, os.path.dirname(__file__))
sys.argv = [sys.argv[0], "--model", "gpt", "--layout", "single", "--steps", "3"] + sys.argv[1:]
import graph_worker as gw  # noqa: E402  (reuses its models and data; runs its 1-rank check)

path = os.environ["OFL_TEST_CHECKPOINT"]
rank = flow.env.get_rank()
B = flow.sbp.broadcast
grid = flow.placement("cpu", ranks=[[0, 1], [2, 3]])
data = gw.batches()


def dp2tp2_model():
    model = gw.make_model()
    model.to_global(grid, (B, B))
    for name, p in model.named_parameters():
        if name.endswith(("fc.weight", "fc.bias", "c_attn.weight", "c_attn.bias")):
            split = (B, flow.sbp.split(0))
        elif name.endswith(("proj.weight", "c_proj.weight")):
            split = (B, flow.sbp.split(1))
        else:
            continue
        owner = model.get_submodule(name.rsplit(".", 1)[0])
        setattr(owner, name.rsplit(".", 1)[1], p.to_global(sbp=split))
    return model


def feed(array, placement, sbp):
    return flow.tensor(array, placement=placement, sbp=sbp)


# Train DP2 x TP2 for two steps, save, take a third step for the reference.
graph = gw.Train(dp2tp2_model())
for x, y in data[:2]:
    graph(feed(x, grid, (flow.sbp.split(0), B)), feed(y, grid, (flow.sbp.split(0), B)))
flow.save(graph.state_dict(), path)
assert os.path.exists(os.path.join(path, "manifest.json"))
third = float(np.mean(graph(feed(data[2][0], grid, (flow.sbp.split(0), B)),
                            feed(data[2][1], grid, (flow.sbp.split(0), B))).numpy()))
after = {k: v.numpy() for k, v in graph.state_dict().items() if not k.startswith("_graph.")}

# Whole on every rank: the saved values.
whole = flow.load(path)
assert all(isinstance(v, flow.Tensor) for k, v in whole.items() if k != "_graph.optimizer")
assert whole["_graph.optimizer"]["step"] == 2, whole["_graph.optimizer"]
assert "model.head.weight.momentum" in whole

# Resume on PP2 (ranks 0 and 1) and on one rank (rank 0 of each process's own placement).
stages = [flow.placement("cpu", ranks=[0]), flow.placement("cpu", ranks=[1])]
pp = gw.Train(gw.make_model(), placements=stages, micro=1)
pp.load_state_dict(flow.load(path, like=pp.state_dict()))
out = pp(feed(data[2][0], stages[0], flow.sbp.split(0)), feed(data[2][1], stages[1], flow.sbp.split(0)))
if rank == 1:
    got = float(np.mean(out.numpy()))
    assert abs(got - third) < 1e-5, (got, third)
resumed = pp.state_dict()
assert resumed["_graph.optimizer"]["step"] == 3, resumed["_graph.optimizer"]
for name, v in resumed.items():
    if name in after and rank in v.placement:
        np.testing.assert_allclose(v.numpy(), after[name], rtol=1e-5, atol=1e-6, err_msg=name)

local = gw.Train(gw.make_model())
local.load_state_dict(flow.load(path, like=local.state_dict()))
got = float(np.mean(local(flow.tensor(data[2][0]), flow.tensor(data[2][1])).numpy()))
assert abs(got - third) < 1e-5, (got, third)

# Refused: a mismatched target, a corrupt piece, an incomplete checkpoint.
like = dict(local.state_dict())
like["model.head.weight"] = flow.zeros(3, 3)
try:
    flow.load(path, like=like)
    raise AssertionError("a mismatched shape was accepted")
except ValueError as e:
    assert "model.head.weight" in str(e) and "shape" in str(e), e
if rank == 0:
    broken = path + "-broken"
    shutil.copytree(path, broken)
    piece = os.path.join(broken, "rank0", sorted(os.listdir(os.path.join(broken, "rank0")))[0])
    with open(piece, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    try:
        flow.load(broken)
        raise AssertionError("a corrupt piece was accepted")
    except RuntimeError as e:
        assert "corrupt" in str(e), e
    os.remove(os.path.join(broken, "manifest.json"))
    try:
        flow.load(broken)
        raise AssertionError("an incomplete checkpoint was accepted")
    except FileNotFoundError as e:
        assert "not a complete checkpoint" in str(e), e
print(f"rank {rank}: checkpoint OK", flush=True)
