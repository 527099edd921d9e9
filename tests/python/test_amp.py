"""flow.autocast (Note [Eager autocast] in oneflowlike/autocast.h) against torch.autocast, and
nn.Graph's enable_amp (Note [Mixed precision] in compiler/passes/amp.cpp)."""

import threading

import numpy as np
import pytest

import oneflowlike as flow
from tolerances import LOSS_RTOL

torch = pytest.importorskip("torch", reason="the reference is torch.autocast")

F = flow.nn.functional


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_linear_and_matmul_run_in_bfloat16_like_torch_autocast():
    x, w, b = rand(6, 16, seed=1), rand(5, 16, seed=2), rand(5, seed=3)
    a3, b3 = rand(2, 6, 16, seed=4), rand(2, 16, 7, seed=5)
    ours_in = [flow.tensor(v, requires_grad=True) for v in (x, w, b, a3, b3)]
    theirs_in = [torch.tensor(v, requires_grad=True) for v in (x, w, b, a3, b3)]
    with flow.autocast("cpu", dtype=flow.bfloat16):
        ours = [F.linear(*ours_in[:3]), flow.matmul(ours_in[3], ours_in[4]),
                ours_in[0] @ ours_in[1].transpose(0, 1)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs = [torch.nn.functional.linear(*theirs_in[:3]), theirs_in[3] @ theirs_in[4],
                  theirs_in[0] @ theirs_in[1].t()]
    # As torch, a product stays bfloat16; our linear adds its float32 bias after the product (one
    # op of its own, which promotes), where torch's one linear op rounds the bias to bfloat16.
    assert [o.dtype for o in ours] == [flow.float32, flow.bfloat16, flow.bfloat16]
    assert [t.dtype for t in theirs] == [torch.bfloat16] * 3
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.numpy(), t.float().detach().numpy(), rtol=1e-2, atol=1e-2)
    exact = x @ w.T + b
    assert np.abs(ours[0].numpy() - exact).max() > 1e-4, "the product was not rounded to bf16"
    sum(o.float().sum() for o in ours).backward()
    sum(t.float().sum() for t in theirs).backward()
    for o, t in zip(ours_in, theirs_in):
        assert o.grad.dtype == flow.float32
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=2e-2, atol=2e-2)


def test_activations_between_products_stay_bfloat16_and_float32_meeting_them_promotes():
    # torch.autocast's classes (Note [Mixed precision policy]): a product's output stays bf16
    # through followers (gelu, transpose) and the next product; the residual sum promotes.
    # Softmax, norms and reductions run in float32 (torch's CUDA list; its CPU list keeps
    # them bf16).
    x, w, r = rand(4, 8, seed=1), rand(8, 8, seed=2), rand(4, 8, seed=3)
    ours = [flow.tensor(v) for v in (x, w, r)]
    theirs = [torch.tensor(v) for v in (x, w, r)]

    def chain(lib, F_, x, w, r):
        h = x @ w
        g = F_.gelu(h)
        return {"product": h, "gelu": g, "transpose": g.transpose(0, 1), "next product": g @ w,
                "residual": r + g, "softmax": lib.softmax(g, -1)}

    with flow.autocast("cpu", dtype=flow.bfloat16):
        got = chain(flow, F, *ours)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = chain(torch, torch.nn.functional, *theirs)
    for name in ("product", "gelu", "transpose", "next product", "residual"):
        assert str(got[name].dtype).split(".")[-1] == str(want[name].dtype).split(".")[-1], name
        np.testing.assert_allclose(got[name].float().numpy(), want[name].float().numpy(),
                                   rtol=2e-2, atol=2e-2, err_msg=name)
    assert got["softmax"].dtype == flow.float32


def test_outside_the_block_nothing_changes_and_blocks_nest():
    x, w = flow.tensor(rand(4, 8, seed=1)), flow.tensor(rand(8, 3, seed=2))
    exact = (x @ w).numpy()
    with flow.autocast("cpu"):
        with flow.autocast("cpu", enabled=False):
            np.testing.assert_array_equal((x @ w).numpy(), exact)
        assert not np.array_equal((x @ w).numpy(), exact)
    np.testing.assert_array_equal((x @ w).numpy(), exact)
    assert flow._C.autocast_dtype() == flow.float32


def test_the_block_belongs_to_its_thread():
    x, w = flow.tensor(rand(4, 8, seed=1)), flow.tensor(rand(8, 3, seed=2))
    exact = (x @ w).numpy()
    seen = {}
    with flow.autocast("cpu"):
        thread = threading.Thread(target=lambda: seen.setdefault("y", (x @ w).numpy()))
        thread.start()
        thread.join()
    np.testing.assert_array_equal(seen["y"], exact)


def test_as_a_decorator():
    @flow.autocast("cpu")
    def product(a, b):
        return a @ b

    x, w = flow.tensor(rand(4, 8, seed=1)), flow.tensor(rand(8, 3, seed=2))
    assert not np.array_equal(product(x, w).numpy(), (x @ w).numpy())


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"device_type must be 'cpu' or 'cuda'. However, got "
                                         r"'tpu'"):
        flow.autocast("tpu")
    with pytest.raises(TypeError, match=r"dtype must be flow.bfloat16 .* However, got "
                                        r"oneflowlike.int32"):
        flow.autocast("cpu", dtype=flow.int32)
    flow.autocast("cpu", dtype=flow.float16)  # eager float16 takes a GradScaler (below)


class _Mlp(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = flow.nn.Linear(16, 32)
        self.fc2 = flow.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(flow.relu(self.fc1(x)))


class _Step(flow.nn.Graph):
    def __init__(self, model, opt, amp):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        if amp:
            self.config.enable_amp(True, dtype=flow.bfloat16)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


def _train(amp, eager_autocast=False, steps=5, checkpointing=False):
    flow.manual_seed(7)
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    x, y = rand(32, 16, seed=8), rand(32, 4, seed=9)
    if eager_autocast:
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            with flow.autocast("cpu"):
                loss = ((model(flow.tensor(x)) - flow.tensor(y)) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.numpy()))
        return losses, model
    graph = _Step(model, opt, amp)
    if checkpointing:
        graph.set_activation_checkpointing(model)
    losses = [float(graph(flow.tensor(x), flow.tensor(y)).numpy()) for _ in range(steps)]
    graph.sync_to_modules()
    return losses, model


def test_graph_amp_trains_like_eager_autocast_with_float32_master_weights():
    amp, amp_model = _train(True)
    eager, eager_model = _train(False, eager_autocast=True)
    full, _ = _train(False)
    np.testing.assert_allclose(amp, eager, rtol=LOSS_RTOL["bfloat16"])
    np.testing.assert_allclose(amp, full, rtol=5e-2)
    assert amp != full, "enable_amp computed nothing in bfloat16"
    assert amp_model.fc1.weight.dtype == flow.float32
    np.testing.assert_allclose(amp_model.fc1.weight.numpy(), eager_model.fc1.weight.numpy(),
                               rtol=1e-2, atol=1e-3)


def test_graph_amp_with_activation_checkpointing_trains_like_without():
    """enable_amp and set_activation_checkpointing together (refused before: amp's casts were
    outside the checkpointed block, which then left itself and came back): the same curve."""
    plain, _ = _train(True)
    checkpointed, _ = _train(True, checkpointing=True)
    np.testing.assert_allclose(checkpointed, plain, rtol=1e-6)


# --- GradScaler (float16) ------------------------------------------------------------------------

def _fp16_step(model, opt, scaler, x, y, poison=1.0):
    opt.zero_grad()
    with flow.autocast("cpu", dtype=flow.float16):
        loss = ((model(flow.tensor(x)) - flow.tensor(y)) ** 2).mean() * poison
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return float(loss.numpy())


def test_an_overflow_skips_the_step_and_halves_the_scale_leaving_the_weights():
    flow.manual_seed(3)
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2)
    x, y = rand(32, 16, seed=8), rand(32, 4, seed=9)
    _fp16_step(model, opt, scaler, x, y)
    assert scaler.get_scale() == 2.0**16
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    state = {k: v["momentum_buffer"].numpy().copy() for k, v in opt.state_dict()["state"].items()}
    # A loss 1e9 times larger: its scaled gradients overflow float16 in the backward matmuls.
    _fp16_step(model, opt, scaler, x, y, poison=1e9)
    assert scaler.get_scale() == 2.0**15
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), weights[k], err_msg=k)
    for k, v in opt.state_dict()["state"].items():
        np.testing.assert_array_equal(v["momentum_buffer"].numpy(), state[k])
    # Good steps again: the weights move, and after growth_interval of them the scale grows.
    _fp16_step(model, opt, scaler, x, y)
    assert not np.array_equal(model.fc1.weight.numpy(), weights["fc1.weight"])
    _fp16_step(model, opt, scaler, x, y)
    assert scaler.get_scale() == 2.0**16


def test_float16_training_with_a_scaler_follows_float32():
    x, y = rand(32, 16, seed=8), rand(32, 4, seed=9)
    flow.manual_seed(3)
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    scaler = flow.amp.GradScaler()
    half = [_fp16_step(model, opt, scaler, x, y) for _ in range(5)]
    flow.manual_seed(3)
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    full = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((model(flow.tensor(x)) - flow.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        full.append(float(loss.numpy()))
    np.testing.assert_allclose(half, full, rtol=5e-3)
    assert half != full


def test_scaler_state_round_trips_and_misuse_is_refused():
    scaler = flow.amp.GradScaler(init_scale=8.0, growth_interval=3)
    scaler._growth_tracker = 2
    other = flow.amp.GradScaler()
    other.load_state_dict(scaler.state_dict())
    assert other.get_scale() == 8.0 and other.state_dict() == scaler.state_dict()
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    (model(flow.tensor(rand(2, 16))) ** 2).mean().backward()
    with pytest.raises(RuntimeError, match=r"without scale\(\) since the last update"):
        scaler.unscale_(opt)  # the gradients were not scaled
    scaler.scale((model(flow.tensor(rand(2, 16))) ** 2).mean()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) was already called"):
        scaler.unscale_(opt)
    opt.step()  # (the unscaled step itself is the test's business)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"step\(\) was already called on this optimizer"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match=r"update\(\) needs a step\(\) or unscale_\(\)"):
        scaler.update()
    with pytest.raises(ValueError, match=r"growth_interval must be an int >= 1"):
        flow.amp.GradScaler(growth_interval=0)
    with pytest.raises(ValueError, match=r"0 < backoff_factor < 1"):
        flow.amp.GradScaler(backoff_factor=2.0)
    with pytest.raises(ValueError, match=r"not a GradScaler's state_dict"):
        other.load_state_dict({"step": 3})


# --- dynamic loss scaling in a graph (Note [Dynamic loss scaling in a graph]) -----------------

class _ScaledStep(flow.nn.Graph):
    def __init__(self, model, opt, scaler):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)
        self.config.enable_amp(True, dtype=flow.float16)
        self.set_grad_scaler(scaler)

    def build(self, x, y, k):
        loss = ((self.model(x) - y) ** 2).mean() * k
        loss.backward()
        return loss


POISONS = [1.0, 1.0, 1e9, 1.0, 1.0, 1.0]  # step 3's scaled gradients overflow float16


def test_graph_float16_skips_an_overflow_like_the_eager_scaler():
    x, y = rand(32, 16, seed=8), rand(32, 4, seed=9)

    def fresh():
        flow.manual_seed(3)
        model = _Mlp()
        return model, flow.optim.Adam(model.parameters(), lr=0.01)

    # Eager: autocast + GradScaler, the reference semantics (torch's).
    model, opt = fresh()
    scaler = flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2)
    eager, eager_scales = [], []
    for k in POISONS:
        opt.zero_grad()
        with flow.autocast("cpu", dtype=flow.float16):
            loss = ((model(flow.tensor(x)) - flow.tensor(y)) ** 2).mean() * k
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        eager.append(float(loss.numpy()))
        eager_scales.append(scaler.get_scale())
    # The graph: enable_amp(float16) + set_grad_scaler.
    model, opt = fresh()
    graph = _ScaledStep(model, opt, flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2))
    ours, scales, weights = [], [], []
    for k in POISONS:
        ours.append(float(graph(flow.tensor(x), flow.tensor(y),
                                flow.tensor(np.float32(k))).numpy()))
        scales.append(graph.loss_scale)
        graph.sync_to_modules()
        weights.append(model.fc1.weight.numpy().copy())
    assert eager_scales == [2.0**16, 2.0**17, 2.0**16, 2.0**16, 2.0**17, 2.0**17]
    assert scales == eager_scales
    np.testing.assert_array_equal(weights[2], weights[1])  # the overflow step changed nothing
    assert not np.array_equal(weights[3], weights[2])
    finite = [i for i, k in enumerate(POISONS) if k == 1.0]
    np.testing.assert_allclose([ours[i] for i in finite], [eager[i] for i in finite],
                               rtol=LOSS_RTOL["bfloat16"])


def test_graph_float16_needs_a_scaler():
    model = _Mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    class Unscaled(_ScaledStep):
        def __init__(self):
            flow.nn.Graph.__init__(self)
            self.model = model
            self.add_optimizer(opt)
            self.config.enable_amp(True, dtype=flow.float16)

    x, y, k = flow.tensor(rand(4, 16)), flow.tensor(rand(4, 4)), flow.tensor(np.float32(1))
    with pytest.raises(ValueError, match=r"needs dynamic loss scaling: call "
                                         r"graph.set_grad_scaler"):
        Unscaled()(x, y, k)
    graph = _ScaledStep(model, opt, flow.amp.GradScaler())
    with pytest.raises(TypeError, match=r"set_grad_scaler takes a flow.amp.GradScaler"):
        graph.set_grad_scaler(2.0**16)
    graph(x, y, k)
    with pytest.raises(RuntimeError, match=r"set_grad_scaler must come before the first call"):
        graph.set_grad_scaler(flow.amp.GradScaler())


def test_a_scaled_graph_resumed_from_a_checkpoint_continues_the_same_curve(tmp_path):
    x, y = rand(32, 16, seed=8), rand(32, 4, seed=9)

    def make():
        flow.manual_seed(3)
        model = _Mlp()
        opt = flow.optim.Adam(model.parameters(), lr=0.01)
        return _ScaledStep(model, opt, flow.amp.GradScaler(init_scale=2.0**16, growth_interval=2))

    def run(graph, poisons):
        out = []
        for k in poisons:
            out.append(float(graph(flow.tensor(x), flow.tensor(y),
                                   flow.tensor(np.float32(k))).numpy()))
            out.append(graph.loss_scale)
        return out

    whole = run(make(), POISONS)
    first = make()
    head = run(first, POISONS[:3])  # up to and with the overflow
    assert first.state_dict()["_graph.grad_scaler"] == {"scale": 2.0**16, "good_steps": 0.0,
                                                       "steps": 2.0}
    flow.save(first.state_dict(), str(tmp_path / "ckpt"))
    resumed = make()
    resumed.load_state_dict(flow.load(str(tmp_path / "ckpt"), like=resumed.state_dict()))
    assert head + run(resumed, POISONS[3:]) == whole


# In a graph, and eagerly (flow.autocast and flow.amp.GradScaler on global tensors).
@pytest.mark.parametrize("eager", [False, True], ids=["graph", "eager"])
@pytest.mark.parametrize("layout", ["dp2", "pp2"])
def test_an_overflow_skips_the_step_on_every_rank(layout, eager):
    from launching import launch

    out = launch(2, "loss_scale_worker.py", "--layout", layout, *(["--eager"] if eager else []))
    assert out.count(" OK") == 2, out


def test_weights_are_cast_once_per_region_while_gradients_are_off():
    """Note [Autocast weight cache] in oneflowlike/autocast.h, as torch's cache_enabled."""
    from oneflowlike import _C

    flow.manual_seed(0)
    layer = flow.nn.Linear(8, 8)
    x = flow.randn(4, 8)
    with flow.no_grad():
        plain = [layer(x).numpy()]
        with flow.autocast("cpu", cache_enabled=False):
            uncached = layer(x).numpy()
            assert _C._autocast_cache_size() == 0
        with flow.autocast("cpu"):
            first = layer(x).numpy()
            assert _C._autocast_cache_size() == 1  # the weight; the bias is added in float32
            np.testing.assert_array_equal(layer(x).numpy(), first)
            layer.weight.mul_(2.0)  # a write casts again: the version moved
            doubled = layer(x).numpy()
            with flow.autocast("cpu"):  # a nested region shares the outer one's cache
                np.testing.assert_array_equal(layer(x).numpy(), doubled)
            assert _C._autocast_cache_size() == 1
        assert _C._autocast_cache_size() == 0  # the outermost region ended
        plain.append(layer(x).numpy())
    np.testing.assert_array_equal(first, uncached)
    np.testing.assert_allclose(first, plain[0], rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(doubled - layer.bias.numpy(),
                               2 * (first - layer.bias.numpy()), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(doubled, plain[1], rtol=2e-2, atol=2e-2)
    # With gradients on nothing is cached: each backward has casts of its own to free.
    with flow.autocast("cpu"):
        for _ in range(2):
            layer(x).sum().backward()
            assert _C._autocast_cache_size() == 0
    np.testing.assert_allclose(layer.weight.grad.numpy(),
                               2 * np.tile(x.numpy().sum(0), (8, 1)), rtol=2e-2)


def test_a_weight_given_new_storage_is_cast_again():
    """A storage freed by `.data =` and another made at its address (version 0 again) must not
    pass for the cached one (found by review: the cache compared addresses)."""
    layer = flow.nn.Linear(8, 8, bias=False)
    x = flow.randn(2, 8)
    ones = x.numpy() @ np.ones((8, 8), np.float32).T
    with flow.no_grad(), flow.autocast("cpu"):
        for _ in range(20):
            layer.weight.data = flow.randn(8, 8)
            layer(x)
            layer.weight.data = flow.zeros(8, 8)
            layer.weight.data = flow.ones(8, 8)
            np.testing.assert_allclose(layer(x).float().numpy(), ones, rtol=2e-2, atol=2e-2)
        layer.weight.data = flow.ones(4, 8)  # another shape, same elements' memory or not
        assert tuple(layer(x).shape) == (2, 4)


def test_an_amp_graph_hands_back_a_bfloat16_products_output_in_float32():
    """The amp pass casts what build() returns back to the traced dtype; the cast took the
    fetched tensor's place but not its name, so a graph ending in a product without a bias (a
    language model's logits) returned None."""
    flow.manual_seed(0)
    head = flow.nn.Linear(8, 5, bias=False)

    class Logits(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.head = head

        def build(self, x):
            return self.head(x), self.head(x) * 2.0

    graph = Logits()
    graph.config.enable_amp(True, dtype=flow.bfloat16)
    x = flow.randn(2, 3, 8)
    with flow.no_grad():
        got, doubled = graph(x)
        with flow.autocast("cpu", dtype=flow.bfloat16):
            want = head(x).float().numpy()
    assert got.dtype == flow.float32 and doubled.dtype == flow.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(doubled.numpy(), 2 * got.numpy(), rtol=1e-2, atol=1e-2)
