"""Run by test_amp.py through the launcher: float16 mixed precision with dynamic loss scaling in
a graph (Note [Dynamic loss scaling in a graph]) on DP2 or PP2, or with --eager in eager mode
(flow.autocast and flow.amp.GradScaler on global tensors). Step 3's loss is multiplied by 1e9,
so its scaled gradients overflow float16: every rank must skip it (weights and Adam's state
unchanged), the scale must back off, and the
steps before and after must follow the same graph (or eager loop) on one device, which each
process runs itself first."""

import argparse
import sys

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--layout", choices=["dp2", "pp2"], required=True)
parser.add_argument("--eager", action="store_true", help="eager autocast + GradScaler")
args = parser.parse_args()
rank = flow.env.get_rank()
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
POISONS = [1.0, 1.0, 1e9, 1.0, 1.0]


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = flow.relu(self.fc1(x))
        if args.eager and isinstance(self.fc2.weight, flow.GlobalTensor):  # the next stage's
            h = h.to_global(placement=self.fc2.weight.placement, sbp=h.sbp)
        return self.fc2(h)


class EagerStep:
    """The eager loop Step compiles: autocast float16, GradScaler, Adam."""

    def __init__(self, model):
        self.model = model
        self.opt = flow.optim.Adam(model.parameters(), lr=0.01)
        self.scaler = flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2)
        self.loss_scale = None

    def __call__(self, x, y, k):
        self.opt.zero_grad()
        with flow.autocast("cpu", dtype=flow.float16):
            loss = ((self.model(x) - y) ** 2).mean() * k
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.loss_scale = self.scaler.get_scale()
        return loss

    def sync_to_modules(self):
        pass


class Step(nn.Graph):
    def __init__(self, model, stages=None):
        super().__init__()
        self.model = model
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=0.01))
        self.config.enable_amp(True, dtype=flow.float16)
        self.set_grad_scaler(flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2))
        if stages is not None:
            self.set_stage(model.fc1, 0, stages[0])
            self.set_stage(model.fc2, 1, stages[1])

    def build(self, x, y, k):
        loss = ((self.model(x) - y) ** 2).mean() * k
        loss.backward()
        return loss


def make_model():
    flow.manual_seed(3)
    return Mlp()


def local(t):
    return t.to_local() if isinstance(t, flow.GlobalTensor) else t


rng = np.random.default_rng(8)
x, y = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)

ref_model = make_model()
ref = EagerStep(ref_model) if args.eager else Step(ref_model)
ref_scales, ref_weights = [], []
for k in POISONS:
    ref(flow.tensor(x), flow.tensor(y), flow.tensor(np.float32(k)))
    ref.sync_to_modules()
    ref_scales.append(ref.loss_scale)
    ref_weights.append({n: p.numpy().copy() for n, p in ref_model.named_parameters()})

model = make_model()
if args.layout == "dp2":
    both = flow.placement("cpu", ranks=[0, 1])
    model.to_global(both, B)
    graph = EagerStep(model) if args.eager else Step(model)
    inputs = [flow.tensor(x, placement=both, sbp=S0), flow.tensor(y, placement=both, sbp=S0)]
    k_placement = both
else:
    stages = [flow.placement("cpu", ranks=[0]), flow.placement("cpu", ranks=[1])]
    model.fc1.to_global(stages[0], B)
    model.fc2.to_global(stages[1], B)
    graph = EagerStep(model) if args.eager else Step(model, stages)
    inputs = [flow.tensor(x, placement=stages[0], sbp=B), flow.tensor(y, placement=stages[1], sbp=B)]
    k_placement = stages[1]  # where the loss is

bad = []
weights = []
for step, k in enumerate(POISONS):
    graph(*inputs, flow.tensor(np.float32(k), placement=k_placement, sbp=B))
    graph.sync_to_modules()
    mine = {n: local(p).numpy().copy() for n, p in model.named_parameters()
            if not isinstance(p, flow.GlobalTensor) or rank in p.placement}
    weights.append(mine)
    scale = graph.loss_scale
    if scale is not None and scale != ref_scales[step]:
        bad.append(f"step {step + 1}: scale {scale}, one device {ref_scales[step]}")
    for n, w in mine.items():
        if not np.allclose(w, ref_weights[step][n], rtol=1e-2, atol=1e-3):
            bad.append(f"step {step + 1}: {n} differs from one device by "
                       f"{np.abs(w - ref_weights[step][n]).max()}")
for n in weights[2]:
    if not np.array_equal(weights[2][n], weights[1][n]):
        bad.append(f"the overflowing step 3 changed {n} on rank {rank}")
    if np.array_equal(weights[3][n], weights[2][n]):
        bad.append(f"step 4 did not change {n} on rank {rank}")
assert ref_scales == [2.0**16, 2.0**17, 2.0**16, 2.0**16, 2.0**17], ref_scales
if args.eager:
    # The check agrees on every rank: an inf held by rank 0 alone counts on rank 1 too.
    from oneflowlike.amp import _count_nonfinite

    values = np.ones((4, 3), np.float32)
    values[1, 2] = np.inf
    first, last = flow.placement("cpu", ranks=[0]), flow.placement("cpu", ranks=[1])
    grads = [flow.tensor(values, placement=first, sbp=B),
             flow.tensor(np.ones(5, np.float32), placement=last, sbp=B),
             flow.tensor(values, placement=flow.placement("cpu", ranks=[0, 1]), sbp=S0)]
    if _count_nonfinite(grads) != 2:
        bad.append(f"rank {rank} counted {_count_nonfinite(grads)} inf, not 2")
print(f"rank {rank}: {args.layout}{' eager' if args.eager else ''} "
      f"{'OK' if not bad else 'FAILED ' + '; '.join(bad)}",
      flush=True)
sys.exit(1 if bad else 0)
