"""BatchNorm1d/2d/3d against torch (forward, backward, running statistics, evaluation), and
buffers written in place inside nn.Graph.build() (Note [Buffers written in build] in
compiler/graph_tracer.h): a graph trains BatchNorm as eager does, its statistics reach the
modules, data parallelism over two processes gives one device's (dist/batchnorm_worker.py), and
what cannot be written is refused naming it."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from launching import launch

torch = pytest.importorskip("torch")


class _Forward(nn.Graph):
    """A graph of module m's forward alone (no optimizer)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def build(self, x):
        return self.m(x)


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (8, 4)), ("BatchNorm1d", (6, 4, 5)),
                                       ("BatchNorm2d", (4, 3, 5, 5)),
                                       ("BatchNorm3d", (3, 2, 3, 4, 2))])
@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"affine": False},
                                    {"track_running_stats": False}, {"eps": 1e-3,
                                                                     "momentum": 0.3}],
                         ids=["default", "cumulative", "no_affine", "no_stats", "eps_momentum"])
def test_batch_norm_matches_torch(cls, shape, kwargs):
    rng = np.random.default_rng(0)
    c = shape[1]
    ours, theirs = getattr(nn, cls)(c, **kwargs), getattr(torch.nn, cls)(c, **kwargs)
    if ours.affine:
        w, b = (rng.standard_normal(c).astype(np.float32) for _ in range(2))
        with flow.no_grad():
            ours.weight.copy_(flow.tensor(w))
            ours.bias.copy_(flow.tensor(b))
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(w))
            theirs.bias.copy_(torch.tensor(b))
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
        g = rng.standard_normal(shape).astype(np.float32)
        a, t = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ya, yt = ours(a), theirs(t)
        (ya * flow.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)
        if ours.affine:
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(),
                                       rtol=1e-4, atol=1e-4)
    if ours.track_running_stats:
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(ours, name).numpy(),
                                       getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
        assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 3
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(ours(flow.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2),
                         nn.BatchNorm1d(2, momentum=None))


def _data(steps=4):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((16, 6)).astype(np.float32),
             rng.standard_normal((16, 2)).astype(np.float32)) for _ in range(steps)]


def test_a_graph_trains_batch_norm_as_eager_does_and_its_statistics_reach_the_modules():
    eager, traced = _model(), _model()
    opt = flow.optim.SGD(eager.parameters(), lr=0.1)
    want = []
    for x, y in _data():
        loss = ((eager(flow.tensor(x)) - flow.tensor(y)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        want.append(loss.item())

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = traced
            self.add_optimizer(flow.optim.SGD(traced.parameters(), lr=0.1))

        def build(self, x, y):
            loss = ((self.m(x) - y) ** 2).mean()
            loss.backward()
            return loss

    step = Step()
    got = [step(flow.tensor(x), flow.tensor(y)).item() for x, y in _data()]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    ours, theirs = traced.state_dict(), eager.state_dict()
    for name in ("1.running_mean", "1.running_var", "4.running_mean", "4.running_var",
                 "1.num_batches_tracked", "4.num_batches_tracked"):
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)

    # An evaluation graph reads the statistics the training graph wrote; an eager step after
    # the graph's continues from them, and the graph takes that write at its next call.
    class Evaluate(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = traced

        def build(self, x):
            return self.m(x)

    traced.eval()
    eager.eval()
    x = _data()[0][0]
    np.testing.assert_allclose(Evaluate()(flow.tensor(x)).numpy(), eager(flow.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    # An eager training step on the graph's module continues from what the graph wrote, and the
    # training graph takes that write at its next call.
    traced.train()
    eager.train()
    (x, y), (x2, y2) = _data(6)[4:]
    for model in (traced, eager):
        model(flow.tensor(x))
    got = step(flow.tensor(x2), flow.tensor(y2)).item()
    want = ((eager(flow.tensor(x2)) - flow.tensor(y2)) ** 2).mean().item()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(traced.state_dict()["4.running_mean"].numpy(),
                               eager.state_dict()["4.running_mean"].numpy(), rtol=1e-5, atol=1e-6)


def test_a_graph_without_an_optimizer_still_hands_over_what_it_wrote():
    # Statistics gathered by forward passes alone (a calibration pass) in a graph.
    traced, eager = _model(), _model()

    forward = _Forward(traced)
    for x, _ in _data(3):
        forward(flow.tensor(x))
        eager(flow.tensor(x))
    np.testing.assert_allclose(traced.state_dict()["1.running_var"].numpy(),
                               eager.state_dict()["1.running_var"].numpy(), rtol=1e-5)


def test_data_parallel_batch_norm_on_two_processes_gives_one_devices_statistics():
    out = launch(2, "batchnorm_worker.py")
    assert out.count("batchnorm OK") == 2, out


def test_what_a_graph_cannot_write_in_place_is_refused_naming_it():
    class Writes(nn.Graph):
        def __init__(self, module, what, accumulate=1):
            super().__init__()
            self.m, self.what = module, what
            self.config.gradient_accumulation_steps = accumulate
            if accumulate > 1:
                self.add_optimizer(flow.optim.SGD(module.parameters(), lr=0.1))

        def build(self, x):
            if self.what == "activation":
                y = self.m(x)
                y.add_(1.0)
                return y
            if self.what == "parameter":
                self.m[0].weight.mul_(0.5)
                return self.m(x)
            loss = self.m(x).sum()
            loss.backward()
            return loss

    x = flow.tensor(_data()[0][0])
    with pytest.raises(ValueError, match=r"\[add_\] in-place ops inside nn.Graph.build\(\) may "
                                         r"change a module's buffers \(running statistics\) only. "
                                         r"However, got a traced value"):
        Writes(_model(), "activation")(x)
    with pytest.raises(ValueError, match=r"However, got parameter 'm.0.weight', which changes "
                                         r"through its optimizer"):
        Writes(_model(), "parameter")(x)
    with pytest.raises(ValueError, match=r"\[nn.Graph\] build\(\) writes buffers in place "
                                         r"\(m.1.running_mean, m.1.running_var, m.1.num_batches_tracked"
                                         r"(.|\n)*with 2 micro-batches"):
        Writes(_model(), "train", accumulate=2)(x)
    with pytest.raises(ValueError, match=r"\[BatchNorm2d\] input must be 4-d with 3 channels on "
                                         r"axis 1. However, got \(2, 4, 5, 5\)"):
        nn.BatchNorm2d(3)(flow.ones(2, 4, 5, 5))
    with pytest.raises(ValueError, match=r"\[BatchNorm1d\] training needs more than one value "
                                         r"per channel"):
        nn.BatchNorm1d(3)(flow.ones(1, 3))
    with pytest.raises(TypeError, match=r"momentum must be a number or None"):
        nn.BatchNorm1d(3, momentum="fast")


def test_a_buffer_write_in_a_graph_carries_no_gradient_and_reaches_every_holder():
    """The written value is detached (eagerly such writes are made under no_grad), and a buffer
    registered in two modules is one variable both read after the write."""

    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("last", flow.zeros(3))

        def forward(self, x):
            with flow.no_grad():
                self.last.copy_(self.lin(x).mean(0))
            return self.last * 1.0  # a constant to autograd: no gradient reaches lin

    class Reads(nn.Module):
        def __init__(self, buf):
            super().__init__()
            self.register_buffer("last", buf)

        def forward(self, x):
            return x + self.last

    def model():
        flow.manual_seed(0)
        keeps = Keeps()
        return nn.ModuleList([keeps, Reads(keeps.last)])

    traced, eager = model(), model()

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = traced
            self.add_optimizer(flow.optim.SGD(traced.parameters(), lr=1.0))

        def build(self, x):
            loss = (self.m[1](self.m[0](x)) ** 2).sum() + (self.m[0].lin.weight ** 2).sum() * 0
            loss.backward()
            return loss

    before = traced[0].lin.weight.numpy().copy()
    x = np.ones((2, 3), np.float32)
    step = Step()
    for _ in range(2):
        got = step(flow.tensor(x)).item()
        want = (eager[1](eager[0](flow.tensor(x))) ** 2).sum().item()
        np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(traced.state_dict()["0.lin.weight"].numpy(), before)


def test_views_of_a_buffer_read_its_writes_in_a_graph_as_eagerly():
    """Note [Views of buffers] in compiler/graph_tracer.cpp: eagerly a view (view, reshape,
    unsqueeze, detach) shares the buffer's storage, so a view taken before a write reads the
    new value after it, and a write through a view writes the buffer. A graph must give those
    values too (it gave the old ones, silently)."""

    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("stat", flow.arange(6, dtype=flow.float32))

        def forward(self, x):
            col = self.stat.view(2, 3).unsqueeze(0)   # a view of a view, taken before the write
            same = self.stat.detach()
            early = x * col                          # read before: the old value
            self.stat.mul_(0.5).add_(x.mean())       # the buffer written
            late = x * col + same.reshape(2, 3)      # read after: the new value, twice
            col.squeeze(0).add_(1.0)                 # a write through a view writes the buffer
            return early.sum() + late.sum() + (x * col).sum() + self.stat.sum()

    traced, eager = Views(), Views()

    forward = _Forward(traced)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((4, 2, 3)).astype(np.float32)
        np.testing.assert_allclose(forward(flow.tensor(x)).item(), eager(flow.tensor(x)).item(),
                                   rtol=1e-5)
        np.testing.assert_allclose(traced.state_dict()["stat"].numpy(), eager.stat.numpy(),
                                   rtol=1e-6)


def test_data_of_a_buffer_in_a_graph_and_buffers_sharing_memory():
    """``buf.data`` inside build() is a detach of the trace, as ``buf.detach()`` (it raised "a
    value of another graph's build()"); a written buffer whose memory another buffer shares (one
    registered as a view of the other) is refused: the graph would keep the other's old value."""

    class Data(nn.Module):
        def __init__(self, shared=False):
            super().__init__()
            self.register_buffer("a", flow.arange(6, dtype=flow.float32))
            if shared:
                self.register_buffer("b", self.a.view(2, 3))

        def forward(self, x):
            before = self.a.data
            self.a.add_(1.0)
            return x * before.sum() + (self.b.sum() if hasattr(self, "b") else 0.0)

    traced, eager = Data(), Data()
    for _ in range(2):
        np.testing.assert_allclose(_Forward(traced)(flow.ones(1)).numpy(),
                                   eager(flow.ones(1)).numpy())
    with pytest.raises(ValueError, match=r"\[nn.Graph\] build\(\) writes buffer 'm.a', whose "
                                         r"memory 'm.b' shares"):
        _Forward(Data(shared=True))(flow.ones(1))


def test_a_state_dict_without_the_batch_count_loads_as_in_torch():
    # torch's BatchNorm fills in num_batches_tracked where a checkpoint lacks it; any other
    # missing entry is still missing.
    theirs = torch.nn.BatchNorm1d(3)
    theirs(torch.randn(4, 3))
    state = {k: flow.tensor(v.numpy()) for k, v in theirs.state_dict().items()
             if k != "num_batches_tracked"}
    ours = nn.BatchNorm1d(3)
    ours(flow.ones(4, 3) * flow.arange(4).reshape(4, 1))
    result = ours.load_state_dict(state)
    assert list(result.missing_keys) == [] and int(ours.num_batches_tracked) == 0
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-6)
    del state["running_var"]
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "running_var"'):
        nn.BatchNorm1d(3).load_state_dict(state)
