"""Run by test_distributed_frontend.py on 2 processes: regressions from a review.

- a pipeline stage without parameters, reached only by to_global in build(), still runs;
- eager ops on a global tensor and different global operands of one shape do not reuse a
  baked-in value, and a local operand is refused;
- a checkpoint loaded onto a partial-sum layout keeps the value (not doubled)."""

import os

import numpy as np

import oneflowlike as flow

rank = flow.env.get_rank()
first = flow.placement("cpu", ranks=[0])
second = flow.placement("cpu", ranks=[1])
both = flow.placement("cpu", ranks=[0, 1])

flow.manual_seed(0)
linear = flow.nn.Linear(3, 3)
expected = flow.nn.functional.relu(linear(flow.ones(2, 3))).detach().numpy()
linear.to_global(first, flow.sbp.broadcast)


class TwoStages(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.linear = linear

    def build(self, x):
        h = self.linear(x).to_global(placement=second, sbp=flow.sbp.broadcast)
        return flow.nn.functional.relu(h)  # stage 1 has no parameters


out = TwoStages()(flow.tensor(np.ones((2, 3), np.float32), placement=first, sbp=flow.sbp.broadcast))
if rank == 1:
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)

g = flow.tensor(np.ones((1000,), np.float32), placement=both, sbp=flow.sbp.split(0))
a = np.zeros(1000, np.float32)
b = np.full(1000, 5.0, np.float32)
B = flow.sbp.broadcast
np.testing.assert_array_equal((g * flow.tensor(a, placement=both, sbp=B)).numpy(), a)
np.testing.assert_array_equal((g * flow.tensor(b, placement=both, sbp=B)).numpy(), b)
try:  # a local operand would be taken as the same on every rank: refused on every rank
    g * flow.tensor(a if rank == 0 else b)
    raise AssertionError("a local operand of a global op was accepted")
except TypeError as e:
    assert "local tensor" in str(e) and "to_global" in str(e), e

# A LayerNorm without bias (GPT-2's nanoGPT default) or affine parameters on a global input:
# its default weight and bias are made on the input's placement, the result is one device's.
x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
for kwargs in ({"bias": False}, {"elementwise_affine": False}):
    norm = flow.nn.LayerNorm(6, **kwargs)
    want = norm(flow.tensor(x)).numpy()
    got = norm.to_global(both, B)(flow.tensor(x, placement=both, sbp=flow.sbp.split(0)))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=str(kwargs))

# Note [Gradients laid out together]: reading one parameter's gradient lays out every pending
# one (a partial sum under split data) in the same run, with the values of one device.
flow.manual_seed(5)
mlp = flow.nn.Sequential(flow.nn.Linear(6, 8), flow.nn.GELU(), flow.nn.Linear(8, 2))
data = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
mlp(flow.tensor(data)).sum().backward()
want = {name: p.grad.numpy() for name, p in mlp.named_parameters()}
for p in mlp.parameters():
    p.grad = None
mlp.to_global(both, B)
mlp(flow.tensor(data, placement=both, sbp=flow.sbp.split(0))).sum().backward()
params = dict(mlp.named_parameters())
pending = [name for name, p in params.items() if not p._grad_laid_out()]
assert len(pending) >= 2, f"partial sums expected: {pending}"
first = params[pending[-1]].grad
assert all(p._grad_laid_out() for p in params.values()), "one read lays out every gradient"
for name, p in params.items():
    np.testing.assert_allclose(p.grad.numpy(), want[name], rtol=1e-5, atol=1e-6, err_msg=name)
assert first.sbp == (B,)

path = os.environ["OFL_TEST_CHECKPOINT"]
flow.save({"x": flow.tensor(np.asarray([7.0], np.float32), placement=both, sbp=flow.sbp.broadcast)},
          path)
like = {"x": flow.tensor(np.zeros(1, np.float32), placement=both, sbp=flow.sbp.partial_sum)}
loaded = flow.load(path, like=like)["x"]
assert loaded.sbp == (flow.sbp.partial_sum,)
np.testing.assert_array_equal(loaded.numpy(), [7.0])
# An eager optimizer's state saved from a model on rank 0 alone loads onto the same model split
# over both ranks (flow.load gives whole tensors; each rank keeps its piece of each), and the
# next steps are the ones the first model takes.
alone = flow.placement("cpu", ranks=[0])


def make(placement, sbp):
    flow.manual_seed(8)
    model = flow.nn.Linear(4, 6).to_global(placement, sbp)
    return model, flow.optim.AdamW(model.parameters(), lr=0.1)


def step(model, opt, placement):
    x = flow.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), placement=placement,
                    sbp=B)
    (model(x) ** 2).mean().backward()
    opt.step()
    opt.zero_grad()


model, opt = make(alone, B)
step(model, opt, alone)
flow.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path + "_optim")
step(model, opt, alone)
want = {name: v.to_global(placement=both, sbp=B).numpy() for name, v in model.state_dict().items()}
state = flow.load(path + "_optim")
split, split_opt = make(both, flow.sbp.split(0))
split.load_state_dict(state["model"])
split_opt.load_state_dict(state["optimizer"])
step(split, split_opt, both)
for name, value in split.state_dict().items():
    np.testing.assert_allclose(value.numpy(), want[name], rtol=1e-6, atol=1e-7, err_msg=name)

print(f"rank {rank}: misc OK", flush=True)
