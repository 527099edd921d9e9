"""Run by test_checkpoint_resume.py through the launcher on 1 and 2 processes.

For SGD with momentum, Adam and AdamW, each without a schedule, with a step schedule and with a
warmup-then-cosine schedule: train 3 steps, save graph.state_dict(), build model, optimizer,
scheduler and graph anew, load, train 3 more. On the same layout the 6 losses and the final
weights equal the uninterrupted run's exactly; resumed on another layout (--cross A:B), they
equal it within float tolerance.

Usage: resume_worker.py --layouts local,global1 | dp2,tp2 [--cross dp2:tp2]
"""

import argparse
import os

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--layouts", required=True)
parser.add_argument("--cross", default="")
args = parser.parse_args()
rank, world = flow.env.get_rank(), flow.env.get_world_size()
root = os.environ["OFL_TEST_CHECKPOINT"]
B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
STEPS, SAVE_AT = 6, 3

rng = np.random.default_rng(5)
DATA = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int64))
        for _ in range(STEPS)]


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


OPTIMIZERS = {
    "sgd": lambda params: flow.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: flow.optim.Adam(params, lr=0.02),
    "adamw": lambda params: flow.optim.AdamW(params, lr=0.02, weight_decay=0.1),
}
SCHEDULES = {
    "none": None,
    "step": lambda opt: flow.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    "warmup_cosine": lambda opt: flow.optim.lr_scheduler.SequentialLR(
        opt, [flow.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=2),
              flow.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)], milestones=[2]),
}


def lay_out(model, layout):
    """The model on ``layout``; returns (input placement, input sbp) or (None, None)."""
    if layout == "local":
        return None, None
    ranks = [0] if layout == "global1" else [0, 1]
    placement = flow.placement("cpu", ranks=ranks)
    model.to_global(placement, B)
    if layout == "tp2":  # Megatron: fc1 by output features, fc2 by input features
        model.fc1.weight = model.fc1.weight.to_global(sbp=S0)
        model.fc1.bias = model.fc1.bias.to_global(sbp=S0)
        model.fc2.weight = model.fc2.weight.to_global(sbp=S1)
        return placement, B
    return placement, S0


class Train(nn.Graph):
    def __init__(self, model, opt, schedule):
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()
        self.add_optimizer(opt, lr_sch=schedule)

    def build(self, x, y):
        loss = self.loss(self.model(x), y)
        loss.backward()
        return loss


def make(layout, optimizer, schedule):
    flow.manual_seed(3)
    model = Mlp()
    opt = OPTIMIZERS[optimizer](model.parameters())  # before the layout, as the guide does
    placement, sbp = lay_out(model, layout)
    sched = SCHEDULES[schedule](opt) if SCHEDULES[schedule] else None
    graph = Train(model, opt, sched)

    def step(k):
        x, y = DATA[k]
        if placement is None:
            out = graph(flow.tensor(x), flow.tensor(y))
        else:
            out = graph(flow.tensor(x, placement=placement, sbp=sbp),
                        flow.tensor(y, placement=placement, sbp=sbp))
        return float(out.numpy())

    return graph, step


def weights(graph):
    return {k: v.numpy() for k, v in graph.state_dict().items()
            if flow.is_tensor(v) and (not getattr(v, "is_global", False) or rank in v.placement)}


def run(save_layout, resume_layout, optimizer, schedule):
    graph, step = make(save_layout, optimizer, schedule)
    reference = [step(k) for k in range(STEPS)]
    expected = weights(graph) if save_layout == resume_layout else None

    graph, step = make(save_layout, optimizer, schedule)
    losses = [step(k) for k in range(SAVE_AT)]
    path = os.path.join(root, f"{save_layout}-{resume_layout}-{optimizer}-{schedule}")
    flow.save(graph.state_dict(), path)

    graph, step = make(resume_layout, optimizer, schedule)
    graph.load_state_dict(flow.load(path, like=graph.state_dict()))
    assert graph.step_count == SAVE_AT, graph.step_count
    losses += [step(k) for k in range(SAVE_AT, STEPS)]
    what = f"{save_layout}->{resume_layout} {optimizer} {schedule}"
    if expected is not None:
        assert losses == reference, f"{what}: {losses} != {reference}"
        got = weights(graph)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"{what} {name}")
    else:
        np.testing.assert_allclose(losses, reference, rtol=1e-5, atol=1e-6, err_msg=what)
    return what


checked = []
pairs = [(layout, layout) for layout in args.layouts.split(",")]
if args.cross:
    pairs.append(tuple(args.cross.split(":")))
for save_layout, resume_layout in pairs:
    for optimizer in OPTIMIZERS:
        for schedule in SCHEDULES:
            checked.append(run(save_layout, resume_layout, optimizer, schedule))
print(f"rank {rank}: resume OK ({len(checked)} runs)", flush=True)
