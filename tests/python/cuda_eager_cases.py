"""Eager training on CUDA devices as a PyTorch user writes it (issue 15): module.to / .cuda(),
layers built with device=, autograd across tensor.to(device), optimizers, clipping and loss
scaling on the moved parameters, checkpoints, a model split over two devices, and nn.Graph over
a module on a GPU. Each result is compared with the same run on the CPU.

Not collected by the main pytest run (no test_ prefix): test_cuda_eager.py runs this file in a
process with two simulated CUDA devices (OFL_SIMULATE_CUDA_DEVICES=2, Note [Simulated CUDA
devices]), where the devices' ops run the CPU kernels, so results must equal the CPU's bit for
bit; scripts/gpu/check.sh runs it on a real GPU, where the CUDA kernels run and results are
held to the dtype's tolerance.
"""

import os
import tempfile

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
import oneflowlike.nn.functional as F
from tolerances import LOSS_RTOL

pytestmark = pytest.mark.skipif(not flow.cuda.is_available(),
                                reason=f"no CUDA device: {flow.cuda.why_unavailable()}")

SIMULATED = flow.cuda.is_simulated()
TWO_DEVICES = pytest.mark.skipif(flow.cuda.device_count() < 2, reason="needs 2 CUDA devices")


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    """Equal on simulated devices (the CPU kernels), within tolerance on a GPU."""
    got, want = np.asarray(got), np.asarray(want)
    if SIMULATED:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# ---- tensors -----------------------------------------------------------------------------------

def test_a_device_copy_is_differentiable_both_ways():
    w = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    x = flow.tensor(np.ones((2, 3), np.float32), requires_grad=True)  # a CPU leaf
    y = (x.to("cuda") * flow.tensor(w, device="cuda")).sum()
    assert str(y.device) == "cuda:0"
    y.backward()
    assert str(x.grad.device) == "cpu:0"
    assert_same(x.grad.numpy(), w)

    g = flow.tensor(w, device="cuda", requires_grad=True)  # a GPU leaf through the CPU
    (g.cpu() ** 2).to("cuda").to(flow.float64).sum().backward()
    assert str(g.grad.device) == "cuda:0" and g.grad.dtype == flow.float32
    assert_same(g.grad.numpy(), 2 * w)


@TWO_DEVICES
def test_a_copy_between_two_devices_sends_the_gradient_back():
    x = flow.tensor([1.0, 2.0, 3.0], device="cuda:0", requires_grad=True)
    y = x.to("cuda:1") * 3.0
    assert str(y.device) == "cuda:1"
    y.sum().backward()
    assert str(x.grad.device) == "cuda:0"
    assert_same(x.grad.numpy(), [3.0, 3.0, 3.0])


def test_backward_starts_on_the_losss_device():
    x = flow.tensor([1.0, -2.0], device="cuda", requires_grad=True)
    (x * x).sum().backward()  # the implicit 1 is made on the loss's device
    assert_same(x.grad.numpy(), [2.0, -4.0])
    y = x * 2.0
    with pytest.raises(ValueError, match=r"\[backward\] the gradient must be on the output's "
                                         r"device. However, got gradient .*cpu:0.* for output "
                                         r".*cuda:0"):
        y.backward(flow.tensor([1.0, 1.0]))


def test_the_current_device_and_its_memory_as_torch_cuda():
    start = flow.cuda.current_device()
    last = flow.cuda.device_count() - 1
    try:
        flow.cuda.set_device(last)
        assert flow.cuda.current_device() == last
        assert str(flow.zeros(2, device="cuda").device) == f"cuda:{last}"
        assert str(nn.Linear(2, 2).cuda().weight.device) == f"cuda:{last}"
        with pytest.raises(RuntimeError, match=rf"no CUDA device {last + 1}: this process sees"):
            flow.cuda.set_device(last + 1)
    finally:
        flow.cuda.set_device(start)
    flow.cuda.synchronize()
    before = flow.cuda.memory_allocated(0)
    flow.cuda.reset_peak_memory_stats(0)
    t = flow.zeros(1024, 256, device="cuda:0")
    assert flow.cuda.memory_allocated(0) >= before + 1024 * 1024
    assert flow.cuda.max_memory_allocated("cuda:0") >= before + 1024 * 1024
    assert flow.cuda.memory_reserved(0) >= flow.cuda.memory_allocated(0)
    del t
    assert flow.cuda.memory_allocated(0) == before
    assert flow.cuda.max_memory_allocated(0) >= before + 1024 * 1024
    flow.cuda.empty_cache()
    props = flow.cuda.get_device_properties(0)
    assert props.major >= 7 and props.total_memory > 0 and flow.cuda.get_device_name(0)
    assert flow.cuda.is_bf16_supported() == (props.major >= 8)


def test_tensor_helpers_follow_the_device():
    x = flow.ones(2, 3, device="cuda")
    assert x.is_cuda and x.get_device() == 0 and not flow.ones(1).is_cuda
    assert str(x.new_zeros(4).device) == "cuda:0" and x.new_full((2,), 3.0).is_cuda
    assert str(x.new_tensor([1.0]).device) == "cuda:0"
    host = flow.arange(6, dtype=flow.float32)
    pinned = host.pin_memory()
    assert pinned.is_pinned() == (not SIMULATED)  # simulated devices lock nothing
    assert pinned.pin_memory()._shares_storage_with(pinned) or SIMULATED  # already pinned
    assert_same(pinned.to("cuda", non_blocking=True).numpy(), host.numpy())
    from oneflowlike.utils.data import DataLoader

    loader = DataLoader([np.float32(i) for i in range(4)], batch_size=2, pin_memory=True)
    batches = [b for b in loader]
    assert [b.numpy().tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0]]
    assert all(b.is_pinned() == (not SIMULATED) for b in batches)


def test_mixing_devices_in_one_op_names_both():
    with pytest.raises(ValueError, match=r"\[mul\] all inputs must be on one device. However, "
                                         r"got input 0 on cuda:0 and input 1 on cpu:0"):
        flow.ones(2, device="cuda") * flow.ones(2)


def test_a_cpu_scalar_goes_with_tensors_on_a_device():
    # Note [CPU scalars on a device] in oneflowlike/eager.cpp, as torch's rule.
    x = flow.tensor([1.0, 2.0], device="cuda")
    y = x * flow.tensor(3.0)
    assert str(y.device) == "cuda:0"
    assert_same(y.numpy(), [3.0, 6.0])
    w = flow.tensor(2.0, requires_grad=True)  # its gradient would land on the copy: refused
    with pytest.raises(ValueError, match=r"all inputs must be on one device"):
        x * w


def test_ops_make_their_own_tensors_on_the_inputs_device():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2, 3, 4)).astype(np.float32)
    labels = np.array([[0, 2, 1], [1, 1, 0]])
    mask = np.tril(np.ones((3, 3), dtype=bool))
    q = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    cases = {
        "layer_norm without affine": lambda t, d: F.layer_norm(t(data), (4,)),
        "LayerNorm without bias": lambda t, d: nn.LayerNorm(4, bias=False, device=d)(t(data)),
        "rms_norm without weight": lambda t, d: F.rms_norm(t(data), (4,)),
        "one_hot": lambda t, d: F.one_hot(t(labels), num_classes=3),
        "where with numbers": lambda t, d: flow.where(t(data) > 0, 1.0, t(data)),
        "isclose": lambda t, d: flow.isclose(t(data), t(data) + 1e-9),
        "masked attention": lambda t, d: F.scaled_dot_product_attention(
            t(q), t(q), t(q), attn_mask=t(mask)),
        "cross_entropy with ignore_index": lambda t, d: nn.CrossEntropyLoss(ignore_index=1)(
            t(data[0]), t(labels[0])),
        "cross_entropy with weights and smoothing": lambda t, d: F.cross_entropy(
            t(data[0]), t(labels[0]), t(np.array([0.5, 1.0, 2.0, 1.5], np.float32)),
            label_smoothing=0.1),
        "tril": lambda t, d: flow.tril(t(data), -1),
        "nan_to_num": lambda t, d: flow.nan_to_num(flow.log(t(data)) * t(data)),
        "norm": lambda t, d: t(data).norm(dim=-1),
        "flip, roll, repeat": lambda t, d: t(data).flip(0).roll(1, 2).repeat(1, 2, 1),
        # Draws follow the seed alike on both devices (the CPU's counter-based values).
        "multinomial": lambda t, d: (flow.manual_seed(3),
                                     flow.multinomial(t(np.abs(data[0])), 3))[1],
    }
    for name, fn in cases.items():
        want = fn(lambda a: flow.tensor(a), "cpu")
        got = fn(lambda a: flow.tensor(a, device="cuda"), "cuda")
        assert str(got.device) == "cuda:0", name
        assert_same(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_in_place_writes_and_inits_on_a_device():
    t = flow.zeros(2, 3, device="cuda")
    t.fill_(2.5)
    t[0, 1:] = 7.0
    t.add_(flow.ones(2, 3, device="cuda"))
    assert str(t.device) == "cuda:0"
    assert_same(t.numpy(), [[3.5, 8.0, 8.0], [3.5, 3.5, 3.5]])
    w = flow.zeros(3, device="cuda")
    nn.init.constant_(w, 0.25)
    assert_same(w.numpy(), [0.25, 0.25, 0.25])
    w.copy_(flow.tensor([1.0, 2.0, 3.0]))  # across devices, as torch's copy_
    assert_same(w.numpy(), [1.0, 2.0, 3.0])


# ---- modules -----------------------------------------------------------------------------------

class _WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("scale", flow.tensor([0.5, 2.0]))
        self.register_buffer("counts", flow.tensor([1, 2, 3]))  # int64: dtype moves leave it

    def forward(self, x):
        return self.fc(x) * self.scale


def test_module_to_moves_every_tensor_and_keeps_the_objects():
    flow.manual_seed(3)
    m = _WithBuffers()
    before = {name: t.numpy() for name, t in m.state_dict().items()}
    held = [id(t) for t in (*m.parameters(), *m.buffers())]
    m(flow.ones((4, 3))).sum().backward()
    grad = m.fc.weight.grad.numpy()
    assert m.cuda() is m
    assert [id(t) for t in (*m.parameters(), *m.buffers())] == held
    for name, t in m.state_dict().items():
        assert str(t.device) == "cuda:0", name
        np.testing.assert_array_equal(t.numpy(), before[name])
    assert str(m.fc.weight.grad.device) == "cuda:0"
    np.testing.assert_array_equal(m.fc.weight.grad.numpy(), grad)
    assert m.fc.weight.requires_grad and m.fc.weight.is_leaf
    out = m(flow.ones((4, 3), device="cuda"))
    assert str(out.device) == "cuda:0"
    m.cpu()
    assert {str(t.device) for t in m.state_dict().values()} == {"cpu:0"}


def test_module_dtype_moves_cast_the_floating_tensors_only():
    m = _WithBuffers()
    m.half()
    assert m.fc.weight.dtype == flow.float16 and m.scale.dtype == flow.float16
    assert m.counts.dtype == flow.int64
    m.to("cuda", flow.bfloat16)
    assert m.fc.bias.dtype == flow.bfloat16 and str(m.fc.bias.device) == "cuda:0"
    m.to(flow.zeros(1, dtype=flow.float64))  # to(tensor): its device and dtype
    assert m.fc.weight.dtype == flow.float64 and str(m.fc.weight.device) == "cpu:0"
    m.float().to(device="cuda")
    assert m.fc.weight.dtype == flow.float32 and str(m.fc.weight.device) == "cuda:0"
    with pytest.raises(TypeError, match=r"\[Module.to\] a module's dtype must be floating"):
        m.to(flow.int32)
    with pytest.raises(RuntimeError, match=r"\[Module.to\] device cuda:7 does not exist"):
        m.to("cuda:7")


def test_layers_built_on_a_device_hold_the_cpu_values():
    builders = [lambda **kw: nn.Linear(5, 4, **kw), lambda **kw: nn.LayerNorm(6, **kw),
                lambda **kw: nn.Embedding(7, 3, padding_idx=2, **kw),
                lambda **kw: nn.RMSNorm(4, **kw)]
    for build in builders:
        flow.manual_seed(11)
        want = build().state_dict()
        flow.manual_seed(11)
        got = build(device="cuda").state_dict()
        for name, t in got.items():
            assert str(t.device) == "cuda:0", name
            np.testing.assert_array_equal(t.numpy(), want[name].numpy())


def test_modules_without_values_here_are_refused():
    with flow.device("meta"):
        m = nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match=r"\[Module.to\] 'weight' was built on the "
                                                  r"meta device"):
        m.cuda()
    g = nn.Linear(2, 2).to_global(flow.placement("cpu", ranks=[0]), flow.sbp.broadcast)
    with pytest.raises(NotImplementedError, match=r"\[Module.to\] 'weight' is a global tensor"):
        g.to("cuda")


# ---- training ----------------------------------------------------------------------------------

def _train(device, steps=4, amp=None, split=False):
    """Losses of a small model trained eagerly on ``device`` (built on the CPU, moved after the
    optimizer was made, as users often do); with ``split``, its two halves on cuda:0 and
    cuda:1."""
    flow.manual_seed(0)
    emb = nn.Embedding(16, 8, padding_idx=0)
    body = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16))
    params = list(emb.parameters()) + list(body.parameters())
    opt = flow.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    first, second = ("cuda:0", "cuda:1") if split else (device, device)
    emb.to(first)
    body.to(second)
    scaler = flow.amp.GradScaler() if amp == flow.float16 else None
    tokens = np.arange(12).reshape(3, 4) % 16
    idx = flow.tensor(tokens, device=first)
    target = flow.tensor((tokens * 7) % 16, device=second)
    losses = []
    for _ in range(steps):
        with flow.autocast(second.split(":")[0], dtype=amp or flow.float32, enabled=amp is not None):
            logits = body(emb(idx).to(second))
        loss = F.cross_entropy(logits.reshape(-1, 16).float(), target.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=False)
        assert {str(p.device) for p in params} == {str(flow.device(first)), str(flow.device(second))}
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_training_on_the_gpu_gives_the_cpu_curve(dtype):
    amp = None if dtype == "float32" else getattr(flow, dtype)
    want = _train("cpu", amp=amp)
    got = _train("cuda", amp=amp)
    assert want[-1] < want[0]
    assert_same(got, want, rtol=LOSS_RTOL[dtype], atol=0)


@TWO_DEVICES
def test_a_model_split_over_two_devices_gives_the_cpu_curve():
    assert_same(_train("cuda", split=True), _train("cpu"), rtol=LOSS_RTOL["float32"], atol=0)


def test_a_checkpoint_of_a_model_on_the_gpu_resumes_there():
    def make():
        flow.manual_seed(6)
        model = nn.Linear(4, 3).cuda()
        return model, flow.optim.Adam(model.parameters(), lr=0.1)

    def step(model, opt):
        loss = (model(flow.ones((2, 4), device="cuda")) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    model, opt = make()
    step(model, opt)
    with tempfile.TemporaryDirectory() as d:
        flow.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, d)
        loaded = flow.load(d)  # tensors come back on the CPU
    want = [step(model, opt) for _ in range(3)]
    again, resumed = make()
    again.load_state_dict(loaded["model"])
    resumed.load_state_dict(loaded["optimizer"])  # its state goes to the parameters' device
    assert str(resumed.state[again.weight]["exp_avg"].device) == "cuda:0"
    assert_same([step(again, resumed) for _ in range(3)], want, rtol=1e-6, atol=0)


def test_checkpoints_move_between_devices():
    flow.manual_seed(5)
    m = nn.Linear(4, 3).cuda()
    with tempfile.TemporaryDirectory() as d:
        flow.save(m.state_dict(), os.path.join(d, "m"))
        loaded = flow.load(os.path.join(d, "m"))
    on_cpu = nn.Linear(4, 3)
    on_cpu.load_state_dict(loaded)
    on_gpu = nn.Linear(4, 3, device="cuda")
    on_gpu.load_state_dict(m.state_dict())
    for name, t in m.state_dict().items():
        np.testing.assert_array_equal(on_cpu.state_dict()[name].numpy(), t.numpy())
        np.testing.assert_array_equal(on_gpu.state_dict()[name].numpy(), t.numpy())
        assert str(on_gpu.state_dict()[name].device) == "cuda:0"


# ---- nn.Graph ----------------------------------------------------------------------------------

class _Step(nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        return loss


def _graph_run(device, steps=3):
    flow.manual_seed(2)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
    graph = _Step(model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    x = flow.randn(5, 3, device=device)
    y = flow.randn(5, 2, device=device)
    losses = []
    for _ in range(steps):
        loss = graph(x, y)
        assert str(loss.device) == str(flow.device(device))
        losses.append(loss.item())
    weights = {name: t for name, t in graph.state_dict().items() if isinstance(t, flow.Tensor)}
    return losses, weights, graph, model


def test_a_graph_of_a_module_on_the_gpu_runs_there():
    # Note [Local graphs on a GPU]: a CUDA placement of this rank, on the tensors' device.
    want, want_weights, _, _ = _graph_run("cpu")
    got, got_weights, graph, model = _graph_run("cuda")
    assert graph._tracer_placement.type == "cuda"
    assert_same(got, want, rtol=LOSS_RTOL["float32"], atol=0)
    for name, t in got_weights.items():
        assert str(t.device) == "cuda:0", name
        assert_same(t.numpy(), want_weights[name].numpy())
    with pytest.raises(ValueError, match=r"input 0 must be like the one the graph was traced "
                                         r"with: a local tensor \(5, 3\) .* on cuda:0"):
        graph(flow.randn(5, 3), flow.randn(5, 2, device="cuda"))
    model.cpu()
    with pytest.raises(RuntimeError, match=r"moved to another device or dtype \(module.to\)"):
        graph(flow.randn(5, 3, device="cuda"), flow.randn(5, 2, device="cuda"))


def test_a_graph_of_tensors_on_two_devices_is_refused():
    model = nn.Linear(3, 2).cuda()
    graph = _Step(model, flow.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=r"must be on one device. However, input 0 is on cpu:0 "
                                         r"and input 1 on cuda:0"):
        graph(flow.randn(4, 3), flow.randn(4, 2, device="cuda"))


def test_a_device_move_inside_build_is_refused():
    class Moves(nn.Graph):
        def build(self, x):
            return x.to("cuda") * 2

    with pytest.raises(ValueError, match=r"\[to\] inside nn.Graph.build\(\) the placement "
                                         r"decides where values live"):
        Moves()(flow.randn(2))


def test_a_global_tensor_moves_between_cpu_and_cuda_placements_with_its_gradient():
    """GlobalTensor.cpu(), .cuda() and .to(device): the placement of the same ranks on the
    other device type, SBP kept (they returned the tensor itself: a cuda tensor stayed there)."""
    p = flow.placement("cuda", ranks=[0])
    g = flow.tensor([1.0, 2.0], placement=p, sbp=flow.sbp.broadcast, requires_grad=True)
    c = g.cpu()
    assert c.placement == flow.placement("cpu", ranks=[0]) and c.sbp == g.sbp
    assert_same(c.to_local().numpy(), [1.0, 2.0])
    back = c.to("cuda", flow.float64)
    assert back.placement == p and back.dtype == flow.float64
    assert c.cuda().placement == p and g.cpu().cpu().placement == c.placement
    (g.cpu() * 2).sum().backward()
    assert_same(g.grad.to_local().numpy(), [2.0, 2.0])
    with pytest.raises(ValueError, match=r"\[to\] a global tensor moves to a placement type"):
        g.to("cuda:7")
    with pytest.raises(ValueError, match=r"However, got cuda:7"):
        g.to(flow.device("cuda:7"))
    assert g.to("cpu:0").placement == c.placement
    copied = g.to(flow.device("cuda"), copy=True)  # a copy autograd follows
    assert copied is not g and copied.requires_grad
    (copied * 3).sum().backward()
    assert_same(g.grad.to_local().numpy(), [5.0, 5.0])


# ---- generation --------------------------------------------------------------------------------

@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_attention_through_a_kv_cache_on_the_gpu_gives_the_cpus_rows(autocast):
    """An attention layer fed a prompt, single tokens and several after a prefix through a
    flow.nn.KVCache on the GPU (Note [KV cache]), and under bf16 autocast with its weight-cast
    cache (Note [Autocast weight cache]; against the CPU's bf16 rows): the CPU's rows."""
    flow.manual_seed(0)
    layer = nn.CausalSelfAttention(32, 4, block_size=32, window=5).eval()
    x = flow.randn(2, 12, 32)

    def steps(device):
        moved = layer.to(device)
        cache = nn.KVCache(window=5)
        with flow.no_grad(), flow.autocast(device, dtype=flow.bfloat16, enabled=autocast):
            rows = [moved(x[:, a:b].to(device), cache=cache)
                    for a, b in ((0, 5), (5, 6), (6, 9), (9, 10), (10, 12))]
        return flow.cat([r.float().cpu() for r in rows], dim=1).numpy()

    want = steps("cpu")
    got = steps("cuda")
    if autocast:
        np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2)
    else:
        assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("slots", [16, 1100], ids=["warp-rows", "block-rows"])
def test_a_static_cache_on_the_gpu_eagerly_and_through_a_graph_gives_the_cpus_rows(slots):
    """flow.nn.StaticKVCache on the GPU (Note [Static KV cache]): a prompt and several tokens
    eagerly, single tokens through a graph writing the cache's buffers: the CPU's rows. Caches
    of more than 1024 slots take the CUDA kernel's block-per-row path."""
    flow.manual_seed(0)
    layer = nn.CausalSelfAttention(32, 4, block_size=32, window=5).eval()
    x = flow.randn(2, 12, 32)

    class Step(nn.Graph):
        def __init__(self, moved, cache):
            super().__init__()
            self.layer, self.cache = moved, cache

        def build(self, piece):
            return self.layer(piece, cache=self.cache)

    def steps(device):
        moved = layer.to(device)
        cache = nn.StaticKVCache(2, 4, slots, 8, window=5, device=device)
        step = Step(moved, cache)
        rows = []
        with flow.no_grad():
            for a, b in ((0, 5), (5, 6), (6, 9), (9, 10), (10, 11), (11, 12)):
                piece = x[:, a:b].to(device)
                rows.append(step(piece) if b - a == 1 else moved(piece, cache=cache))
        return flow.cat([r.cpu() for r in rows], dim=1).numpy()

    assert_same(steps("cuda"), steps("cpu"), rtol=1e-4, atol=1e-5)
