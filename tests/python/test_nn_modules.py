"""flow.nn: Parameter, Module bookkeeping and state_dict, the layers against NumPy, containers,
a small training run, and clip_grad_norm_."""

import collections
import math
import subprocess
import sys

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import nn
from oneflowlike.nn import functional as F
from gradcheck import check_gradients

_erf = np.vectorize(math.erf)


def _grad_of(output, weights):
    """Backpropagates sum(output * weights) (weights a numpy array)."""
    output.backward(flow.tensor(weights, dtype=output.dtype))


def _np(t):
    return t.numpy().astype(np.float64)


# ---- Parameter ---------------------------------------------------------------------------------


def test_parameter_is_a_leaf_tensor_sharing_storage_that_requires_grad():
    data = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    p = nn.Parameter(data)
    assert isinstance(p, flow.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf
    assert p._shares_storage_with(data)
    assert not nn.Parameter(data, requires_grad=False).requires_grad
    assert repr(p).startswith("Parameter containing:\ntensor([[1., 2.],")
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [[2.0, 4.0], [6.0, 8.0]])
    assert type(p * 2) is flow.Tensor  # ops return plain tensors


def test_parameter_from_a_computed_tensor_drops_its_history():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    p = nn.Parameter(x * 3)
    assert p.is_leaf and p.requires_grad
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [6.0, 12.0])
    assert x.grad is None


def test_parameter_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"\[Parameter\] data must be a Tensor"):
        nn.Parameter([1.0, 2.0])


# ---- Module bookkeeping ------------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2, bias=False)
        self.scale = nn.Parameter(flow.ones(2))
        self.register_buffer("steps", flow.zeros((), dtype=flow.int64))
        self.register_buffer("cache", flow.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_attribute_assignment_registers_parameters_buffers_and_children():
    net = _Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc1.weight", "fc1.bias",
                                                      "fc2.weight"]
    assert [tuple(p.shape) for p in net.parameters()] == [(2,), (3, 4), (3,), (2, 3)]
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert len(list(net.buffers())) == 2
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert list(net.children()) == [net.fc1, net.act, net.fc2]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert list(net.modules())[0] is net
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert net.fc2.bias is None
    assert "fc1" in dir(net) and "scale" in dir(net)


def test_reassigning_and_deleting_attributes_moves_them_between_registries():
    net = _Net()
    net.fc1 = None
    assert net.fc1 is None and [n for n, _ in net.named_children()] == ["act", "fc2"]
    net.scale = nn.Parameter(flow.zeros(2))
    np.testing.assert_array_equal(net.scale.numpy(), [0.0, 0.0])
    net.steps = flow.ones((), dtype=flow.int64)
    assert net.steps.item() == 1
    del net.scale
    assert "scale" not in dict(net.named_parameters())
    with pytest.raises(AttributeError, match="'_Net' object has no attribute 'scale'"):
        net.scale
    net.plain = 3
    assert net.plain == 3 and "plain" not in dict(net.named_parameters())


def test_shared_parameters_and_modules_are_listed_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.wte.weight
            self.again = self.head

    tied = Tied()
    assert [n for n, _ in tied.named_parameters()] == ["wte.weight"]
    assert [n for n, _ in tied.named_modules()] == ["", "wte", "head"]
    # state_dict lists a tied weight under every name, as torch does
    assert list(tied.state_dict()) == ["wte.weight", "head.weight", "again.weight"]


def test_registration_errors_name_the_problem():
    net = _Net()
    with pytest.raises(TypeError, match="cannot assign an object of type Tensor to parameter"):
        net.scale = flow.ones(2)
    with pytest.raises(TypeError, match=r"flow.nn.Parameter or None.*Parameter\(tensor\)"):
        net.register_parameter("w", flow.ones(2))
    with pytest.raises(KeyError, match="attribute 'fc1' already exists"):
        net.register_parameter("fc1", nn.Parameter(flow.ones(1)))
    with pytest.raises(KeyError, match='contain no "."'):
        net.register_buffer("a.b", flow.ones(1))
    with pytest.raises(TypeError, match="must be a Tensor or None"):
        net.register_buffer("b", [1.0])
    with pytest.raises(TypeError, match="type int to child module 'fc1': a Module or None"):
        net.fc1 = 3
    with pytest.raises(TypeError, match="type list to buffer 'steps': a Tensor or None"):
        net.steps = [1]

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(flow.ones(1))
            super().__init__()

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) is called"):
        Early()
    with pytest.raises(NotImplementedError, match="Module must define forward"):
        nn.Module()(flow.ones(1))


def test_train_eval_zero_grad_apply_and_requires_grad():
    net = _Net()
    assert net.training and net.fc1.training
    assert net.eval() is net
    assert not net.training and not net.fc1.training and not net.act.training
    net.train()
    assert net.fc2.training
    with pytest.raises(ValueError, match="mode must be a bool"):
        net.train("no")

    net(flow.randn(5, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())

    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited == ["Linear", "ReLU", "Linear", "_Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_repr_matches_torch_layout():
    net = nn.Sequential(nn.Linear(4, 8), nn.GELU(approximate="tanh"), nn.Dropout(0.1),
                        nn.LayerNorm(8), nn.Embedding(10, 3), nn.ReLU(),
                        nn.CrossEntropyLoss())
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (1): GELU(approximate='tanh')\n"
        "  (2): Dropout(p=0.1, inplace=False)\n"
        "  (3): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
        "  (4): Embedding(10, 3)\n"
        "  (5): ReLU()\n"
        "  (6): CrossEntropyLoss()\n"
        ")"
    )
    assert repr(nn.Sequential(nn.Sequential(nn.ReLU()))) == (
        "Sequential(\n  (0): Sequential(\n    (0): ReLU()\n  )\n)")


def test_get_submodule_walks_dotted_paths():
    net = nn.Sequential(collections.OrderedDict(block=nn.ModuleList([nn.ReLU(), nn.GELU()])))
    assert isinstance(net.get_submodule("block.1"), nn.GELU)
    assert net.get_submodule("") is net
    with pytest.raises(AttributeError, match="block has no submodule '7'"):
        net.get_submodule("block.7")


# ---- state_dict --------------------------------------------------------------------------------


def test_state_dict_round_trip_copies_values_into_the_same_parameters():
    flow.manual_seed(1)
    source = _Net()
    flow.manual_seed(2)
    target = _Net()
    state = source.state_dict()
    assert list(state) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert not isinstance(state["fc1.weight"], nn.Parameter)
    assert not state["fc1.weight"].requires_grad
    assert state["fc1.weight"]._shares_storage_with(source.fc1.weight)
    assert isinstance(source.state_dict(keep_vars=True)["fc1.weight"], nn.Parameter)

    before = {n: p for n, p in target.named_parameters()}
    optimizer = flow.optim.SGD(target.parameters(), lr=0.1)
    source.steps = flow.full((), 7)
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    for name, p in target.named_parameters():
        assert p is before[name]  # loaded in place: the optimizer still holds them
        np.testing.assert_array_equal(p.numpy(), dict(source.named_parameters())[name].numpy())
    assert target.steps.item() == 7
    x = flow.randn(3, 4)
    np.testing.assert_array_equal(target(x).numpy(), source(x).numpy())
    assert not target.fc1.weight._shares_storage_with(source.fc1.weight)

    target(x).sum().backward()
    optimizer.step()
    assert not np.array_equal(target.fc1.weight.numpy(), source.fc1.weight.numpy())


def test_loading_a_modules_own_state_dict_keeps_its_values():
    net = _Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    net.load_state_dict(net.state_dict())
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_load_state_dict_casts_dtype_and_accepts_numpy_arrays():
    layer = nn.Linear(2, 2)
    weight = np.array([[1.5, -2.0], [0.25, 3.0]])
    layer.load_state_dict({"weight": weight, "bias": flow.tensor([1, 2])})
    assert layer.weight.dtype == flow.float32 and layer.bias.dtype == flow.float32
    np.testing.assert_array_equal(layer.weight.numpy(), weight.astype(np.float32))
    np.testing.assert_array_equal(layer.bias.numpy(), [1.0, 2.0])


def test_load_state_dict_reports_missing_and_unexpected_keys():
    net = _Net()
    state = net.state_dict()
    del state["fc1.bias"]
    state["fc3.weight"] = flow.zeros(1)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(state)
    message = str(info.value)
    assert "[load_state_dict] Error(s) in loading state_dict for _Net" in message
    assert 'Missing key(s) in state_dict: "fc1.bias".' in message
    assert 'Unexpected key(s) in state_dict: "fc3.weight".' in message
    assert "HINT: strict=False" in message

    original = net.fc1.weight.numpy().copy()
    state["fc1.weight"] = flow.zeros(3, 4)
    result = net.load_state_dict(state, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["fc3.weight"]
    np.testing.assert_array_equal(net.fc1.weight.numpy(), 0.0)
    assert not np.array_equal(original, 0.0)


def test_load_state_dict_reports_shape_mismatches_and_copies_nothing():
    net = _Net()
    state = net.state_dict()
    state["fc1.weight"] = flow.zeros(4, 3)
    state["scale"] = flow.full((2,), 5.0)
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=(
                r"size mismatch for fc1.weight: copying a param with shape \(4, 3\) from "
                r"checkpoint, the shape in current model is \(3, 4\)")):
            net.load_state_dict(state, strict=strict)
    np.testing.assert_array_equal(net.scale.numpy(), [1.0, 1.0])  # checks come before copies
    with pytest.raises(TypeError, match='the value of "scale" must be a Tensor'):
        net.load_state_dict({**net.state_dict(), "scale": [1.0, 2.0]})
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        net.load_state_dict([("scale", flow.ones(2))])


def test_loading_into_a_non_finite_parameter_overwrites_it_in_place():
    layer = nn.Linear(2, 1)
    layer.weight = nn.Parameter(flow.tensor([[float("nan"), 1.0]]))
    old = layer.weight
    layer.load_state_dict({"weight": flow.tensor([[2.0, 3.0]]), "bias": flow.zeros(1)})
    assert layer.weight is old and layer.weight.requires_grad
    np.testing.assert_array_equal(layer.weight.numpy(), [[2.0, 3.0]])


# ---- layers against NumPy ----------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_numpy_forward_and_backward(bias):
    rng = np.random.default_rng(0)
    layer = nn.Linear(5, 3, bias=bias, dtype=flow.float64)
    x = rng.standard_normal((2, 4, 5))
    xt = flow.tensor(x, requires_grad=True)
    y = layer(xt)
    w = _np(layer.weight)
    expected = x @ w.T + (_np(layer.bias) if bias else 0.0)
    np.testing.assert_allclose(_np(y), expected, rtol=1e-12, atol=1e-12)

    dy = rng.standard_normal(expected.shape)
    _grad_of(y, dy)
    np.testing.assert_allclose(_np(xt.grad), dy @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(layer.weight.grad), dy.reshape(-1, 3).T @ x.reshape(-1, 5),
                               rtol=1e-12, atol=1e-12)
    if bias:
        np.testing.assert_allclose(_np(layer.bias.grad), dy.sum(axis=(0, 1)), rtol=1e-12)
    else:
        assert layer.bias is None and list(layer.state_dict()) == ["weight"]


def test_linear_initialisation_is_uniform_within_torch_bounds_and_seeded():
    flow.manual_seed(123)
    layer = nn.Linear(64, 256)
    bound = 1 / math.sqrt(64)
    for p in (layer.weight, layer.bias):
        values = p.numpy()
        assert values.min() >= -bound and values.max() < bound
    assert abs(layer.weight.numpy().std() - bound / math.sqrt(3)) < 0.01
    assert layer.weight.dtype == flow.float32
    flow.manual_seed(123)
    again = nn.Linear(64, 256)
    np.testing.assert_array_equal(again.weight.numpy(), layer.weight.numpy())
    np.testing.assert_array_equal(again.bias.numpy(), layer.bias.numpy())
    if not flow.cuda.is_available():  # with one: tests/python/cuda_eager_cases.py
        with pytest.raises(RuntimeError, match=r"\[Linear\] device cuda needs a CUDA device"):
            nn.Linear(2, 2, device="cuda")


def test_modules_built_by_two_processes_with_one_seed_are_identical():
    script = (
        "import oneflowlike as flow, sys\n"
        "flow.manual_seed(7)\n"
        "m = flow.nn.Sequential(flow.nn.Embedding(11, 4), flow.nn.Linear(4, 6),\n"
        "                       flow.nn.CausalSelfAttention(6, 2, 8))\n"
        "for p in m.parameters():\n"
        "    sys.stdout.buffer.write(p.numpy().tobytes())\n"
    )
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
            for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout) > 0
    flow.manual_seed(7)
    here = nn.Sequential(nn.Embedding(11, 4), nn.Linear(4, 6), nn.CausalSelfAttention(6, 2, 8))
    assert b"".join(p.numpy().tobytes() for p in here.parameters()) == runs[0].stdout


def test_embedding_matches_numpy_lookup_and_scatter_add_gradient():
    flow.manual_seed(3)
    emb = nn.Embedding(6, 4, dtype=flow.float64)
    table = _np(emb.weight)
    assert abs(nn.Embedding(1000, 64).weight.numpy().std() - 1.0) < 0.02  # N(0, 1) init
    idx = np.array([[0, 5, 2], [2, 2, 1]])
    y = emb(flow.tensor(idx))
    np.testing.assert_array_equal(_np(y), table[idx])
    dy = np.random.default_rng(1).standard_normal((2, 3, 4))
    _grad_of(y, dy)
    expected = np.zeros_like(table)
    np.add.at(expected, idx, dy)
    np.testing.assert_allclose(_np(emb.weight.grad), expected, rtol=1e-12, atol=1e-12)


def _layer_norm_reference(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    inv_std = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * inv_std
    return xhat * w + b, xhat, inv_std


@pytest.mark.parametrize("normalized_shape", [6, (6,)])
def test_layer_norm_matches_numpy_forward_and_backward(normalized_shape):
    rng = np.random.default_rng(4)
    ln = nn.LayerNorm(normalized_shape, eps=1e-5, dtype=flow.float64)
    np.testing.assert_array_equal(_np(ln.weight), np.ones(6))
    np.testing.assert_array_equal(_np(ln.bias), np.zeros(6))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    ln.load_state_dict({"weight": flow.tensor(w), "bias": flow.tensor(b)})
    x = rng.standard_normal((3, 2, 6)) * 3 + 1
    xt = flow.tensor(x, requires_grad=True)
    y = ln(xt)
    expected, xhat, inv_std = _layer_norm_reference(x, w, b, 1e-5)
    np.testing.assert_allclose(_np(y), expected, rtol=1e-10, atol=1e-10)

    dy = rng.standard_normal(x.shape)
    _grad_of(y, dy)
    dxhat = dy * w
    dx = inv_std * (dxhat - dxhat.mean(-1, keepdims=True)
                    - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(_np(xt.grad), dx, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(_np(ln.weight.grad), (dy * xhat).sum(axis=(0, 1)), rtol=1e-10)
    np.testing.assert_allclose(_np(ln.bias.grad), dy.sum(axis=(0, 1)), rtol=1e-10)


def test_layer_norm_without_affine_parameters_only_normalises():
    ln = nn.LayerNorm(4, eps=1e-3, elementwise_affine=False)
    assert ln.weight is None and ln.bias is None and list(ln.parameters()) == []
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    expected, _, _ = _layer_norm_reference(x.astype(np.float64), 1.0, 0.0, 1e-3)
    np.testing.assert_allclose(ln(flow.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert [n for n, _ in nn.LayerNorm(4, bias=False).named_parameters()] == ["weight"]


def _gelu_reference(x, approximate):
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)
        inner = c * (x + 0.044715 * x**3)
        t = np.tanh(inner)
        y = 0.5 * x * (1 + t)
        dy = 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2)
        return y, dy
    cdf = 0.5 * (1 + _erf(x / math.sqrt(2)))
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    return x * cdf, cdf + x * pdf


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_numpy_forward_and_backward(approximate):
    x = np.linspace(-4, 4, 33)
    xt = flow.tensor(x, requires_grad=True)
    y = nn.GELU(approximate=approximate)(xt)
    expected, slope = _gelu_reference(x, approximate)
    np.testing.assert_allclose(_np(y), expected, rtol=1e-10, atol=1e-12)
    y.sum().backward()
    np.testing.assert_allclose(_np(xt.grad), slope, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match=r"approximate must be one of \('none', 'tanh'\)"):
        nn.GELU(approximate="fast")


def test_relu_matches_numpy():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0])
    xt = flow.tensor(x, requires_grad=True)
    y = nn.ReLU()(xt)
    np.testing.assert_array_equal(_np(y), np.maximum(x, 0))
    y.sum().backward()
    np.testing.assert_array_equal(_np(xt.grad), (x > 0).astype(np.float64))


def test_dropout_drops_and_rescales_in_training_and_is_identity_in_eval():
    flow.manual_seed(0)
    drop = nn.Dropout(p=0.25)
    x = np.random.default_rng(6).uniform(1, 2, size=(200, 50)).astype(np.float32)
    y = drop(flow.tensor(x)).numpy()
    kept = y != 0
    assert abs(1 - kept.mean() - 0.25) < 0.02
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    drop.eval()
    np.testing.assert_array_equal(drop(flow.tensor(x)).numpy(), x)
    net = nn.Sequential(nn.Linear(50, 50), nn.Dropout(0.5))
    net.eval()
    xt = flow.tensor(x)
    np.testing.assert_array_equal(net(xt).numpy(), net(xt).numpy())
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        nn.Dropout(1.5)


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_loss_matches_numpy_with_ignored_targets(reduction):
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((6, 5))
    target = np.array([1, 4, -100, 0, 2, -100])
    xt = flow.tensor(logits, requires_grad=True)
    loss = nn.CrossEntropyLoss(reduction=reduction)(xt, flow.tensor(target))
    keep = target != -100
    probs = _softmax(logits)
    per_sample = np.where(keep, -np.log(probs[np.arange(6), np.where(keep, target, 0)]), 0.0)
    expected = {"mean": per_sample.sum() / keep.sum(), "sum": per_sample.sum(),
                "none": per_sample}[reduction]
    np.testing.assert_allclose(_np(loss), expected, rtol=1e-12)

    scale = {"mean": 1 / keep.sum(), "sum": 1.0, "none": 1.0}[reduction]
    loss.sum().backward()
    onehot = np.eye(5)[np.where(keep, target, 0)]
    expected_grad = (probs - onehot) * keep[:, None] * scale
    np.testing.assert_allclose(_np(xt.grad), expected_grad, rtol=1e-10, atol=1e-12)


def test_cross_entropy_loss_with_spatial_targets_and_custom_ignore_index():
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((2, 3, 4))  # (N, C, d1)
    target = np.array([[0, 2, 1, -1], [-1, -1, 1, 2]])
    loss = nn.CrossEntropyLoss(ignore_index=-1)(flow.tensor(logits), flow.tensor(target))
    moved = np.moveaxis(logits, 1, -1).reshape(-1, 3)
    flat = target.reshape(-1)
    keep = flat != -1
    nll = -np.log(_softmax(moved)[np.arange(8), np.where(keep, flat, 0)])
    np.testing.assert_allclose(_np(loss), nll[keep].mean(), rtol=1e-12)
    plain = nn.CrossEntropyLoss(ignore_index=None)(flow.tensor(logits), flow.tensor(target % 3))
    np.testing.assert_allclose(_np(plain), F.cross_entropy(
        flow.tensor(logits), flow.tensor(target % 3)).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.CrossEntropyLoss(reduction="avg")
    with pytest.raises(NotImplementedError, match="label smoothing"):
        nn.CrossEntropyLoss(label_smoothing=0.1)


# ---- causal self-attention ---------------------------------------------------------------------


def _attention_reference(x, w_attn, b_attn, w_proj, b_proj, n_head):
    """GPT-2 causal attention in NumPy, with c_attn's columns ordered (head, q/k/v, head_dim)."""
    B, T, C = x.shape
    D = C // n_head
    qkv = (x @ w_attn.T + b_attn).reshape(B, T, n_head, 3, D)
    q, k, v = (qkv[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, T, D)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    scores = np.where(future, -np.inf, scores)
    y = _softmax(scores) @ v  # (B, H, T, D)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ w_proj.T + b_proj


def test_causal_self_attention_matches_numpy():
    flow.manual_seed(11)
    attn = nn.CausalSelfAttention(n_embd=8, n_head=2, block_size=6, dtype=flow.float64)
    assert [n for n, _ in attn.named_parameters()] == [
        "c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"]
    assert tuple(attn.c_attn.weight.shape) == (24, 8) and attn.head_dim == 4
    weights = [_np(p) for p in attn.parameters()]
    x = np.random.default_rng(9).standard_normal((3, 5, 8))
    y = attn(flow.tensor(x))
    np.testing.assert_allclose(_np(y), _attention_reference(x, *weights, n_head=2), rtol=1e-10,
                               atol=1e-12)


def test_causal_self_attention_gradients_match_numpy_finite_differences():
    flow.manual_seed(12)
    attn = nn.CausalSelfAttention(n_embd=4, n_head=2, block_size=3, dtype=flow.float64)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 4))
    dy = rng.standard_normal((2, 3, 4))
    xt = flow.tensor(x, requires_grad=True)
    _grad_of(attn(xt), dy)
    weights = [_np(p) for p in attn.parameters()]

    def loss(values, k):
        args = [x] + weights
        args = args[:k] + [values] + args[k + 1:]
        return float((_attention_reference(*args, n_head=2) * dy).sum())

    analytic = [_np(xt.grad)] + [_np(p.grad) for p in attn.parameters()]
    for k, value in enumerate([x] + weights):
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus, minus = value.copy(), value.copy()
            plus[idx] += 1e-6
            minus[idx] -= 1e-6
            numeric[idx] = (loss(plus, k) - loss(minus, k)) / 2e-6
        np.testing.assert_allclose(analytic[k], numeric, rtol=1e-6, atol=1e-8,
                                   err_msg=f"gradient of argument {k}")


def test_causal_self_attention_never_looks_ahead_and_orders_qkv_by_head():
    flow.manual_seed(13)
    attn = nn.CausalSelfAttention(n_embd=6, n_head=3, block_size=4)
    x = np.random.default_rng(11).standard_normal((1, 4, 6)).astype(np.float32)
    changed = x.copy()
    changed[0, 2:] += 5.0
    before, after = attn(flow.tensor(x)).numpy(), attn(flow.tensor(changed)).numpy()
    np.testing.assert_array_equal(before[0, :2], after[0, :2])
    assert not np.allclose(before[0, 2:], after[0, 2:])

    # Head h reads its q, k and v from columns [3Dh, 3D(h+1)) of c_attn: zeroing head 0's
    # columns (q, k and v) leaves its output (values) zero, whatever the other heads do.
    w = attn.c_attn.weight.numpy().copy()
    b = attn.c_attn.bias.numpy().copy()
    w[0:6], b[0:6] = 0.0, 0.0
    attn.c_attn.load_state_dict({"weight": flow.tensor(w), "bias": flow.tensor(b)})
    proj = attn.c_proj
    proj.load_state_dict({"weight": flow.tensor(np.eye(6, dtype=np.float32)),
                          "bias": flow.zeros(6)})
    y = attn(flow.tensor(x)).numpy()
    np.testing.assert_array_equal(y[..., 0:2], 0.0)
    assert np.all(np.abs(y[..., 2:]) > 0)


def test_causal_self_attention_checks_its_arguments():
    with pytest.raises(ValueError, match="n_embd must be a multiple of n_head"):
        nn.CausalSelfAttention(10, 3, 4)
    attn = nn.CausalSelfAttention(4, 2, block_size=3)
    with pytest.raises(ValueError, match=r"T <= block_size 3. However, got \(1, 5, 4\)"):
        attn(flow.zeros(1, 5, 4))


def test_attention_dropout_is_off_in_eval_mode():
    flow.manual_seed(14)
    attn = nn.CausalSelfAttention(8, 2, 4, dropout=0.5)
    x = flow.randn(2, 4, 8)
    assert not np.array_equal(attn(x).numpy(), attn(x).numpy())
    attn.eval()
    np.testing.assert_array_equal(attn(x).numpy(), attn(x).numpy())


# ---- containers --------------------------------------------------------------------------------


def test_sequential_indexes_slices_iterates_and_chains():
    layers = [nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and list(seq) == layers
    assert seq[0] is layers[0] and seq[-1] is layers[2]
    assert isinstance(seq[1:], nn.Sequential) and list(seq[1:]) == layers[1:]
    x = flow.randn(5, 3)
    np.testing.assert_array_equal(seq(x).numpy(), layers[2](layers[1](layers[0](x))).numpy())
    named = nn.Sequential(collections.OrderedDict(fc=nn.Linear(3, 3), act=nn.GELU()))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    seq.append(nn.ReLU())
    assert len(seq) == 4
    seq[3] = nn.GELU()
    assert isinstance(seq[3], nn.GELU)
    with pytest.raises(IndexError, match="index 4 is out of range for 4 modules"):
        seq[4]
    with pytest.raises(TypeError, match="expects Modules. However, got int"):
        nn.Sequential(nn.ReLU(), 3)


def test_module_list_registers_its_modules():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    blocks.append(nn.Linear(2, 3))
    blocks.extend([nn.ReLU()])
    blocks.insert(0, nn.GELU())
    assert len(blocks) == 5
    assert [type(m).__name__ for m in blocks] == ["GELU", "Linear", "Linear", "Linear", "ReLU"]
    assert blocks[-1] is list(blocks)[4] and isinstance(blocks[1:3], nn.ModuleList)
    assert [n for n, _ in blocks.named_parameters()][:2] == ["1.weight", "1.bias"]
    assert len(list(blocks.parameters())) == 6

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    tower = Tower()
    assert list(tower.state_dict()) == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                        "blocks.1.bias"]
    assert tuple(tower(flow.randn(3, 2)).shape) == (3, 2)
    with pytest.raises(NotImplementedError, match="iterate over it"):
        blocks(flow.ones(1))


def test_module_dict_maps_names_to_modules():
    d = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    d["c"] = nn.GELU()
    assert list(d) == ["a", "b", "c"] and len(d) == 3 and "b" in d
    assert list(d.keys()) == ["a", "b", "c"] and isinstance(d["c"], nn.GELU)
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias"]
    assert isinstance(d.pop("b"), nn.ReLU) and list(d) == ["a", "c"]
    del d["c"]
    d.update([("e", nn.ReLU())])
    assert [k for k, _ in d.items()] == ["a", "e"] and len(list(d.values())) == 2


# ---- training ----------------------------------------------------------------------------------


def _mlp_reference_losses(params, x, y, lr, steps):
    """The MLP of test_tiny_mlp_trains_like_numpy, trained with plain SGD in NumPy."""
    w1, b1, w2, b2 = (p.copy() for p in params)
    n = len(y)
    losses = []
    for _ in range(steps):
        h_pre = x @ w1.T + b1
        h = np.maximum(h_pre, 0)
        logits = h @ w2.T + b2
        probs = _softmax(logits)
        losses.append(-np.log(probs[np.arange(n), y]).mean())
        dlogits = (probs - np.eye(logits.shape[1])[y]) / n
        dw2, db2 = dlogits.T @ h, dlogits.sum(0)
        dh_pre = (dlogits @ w2) * (h_pre > 0)
        dw1, db1 = dh_pre.T @ x, dh_pre.sum(0)
        w1, b1, w2, b2 = w1 - lr * dw1, b1 - lr * db1, w2 - lr * dw2, b2 - lr * db2
    return losses, [w1, b1, w2, b2]


def test_tiny_mlp_trains_like_numpy():
    flow.manual_seed(21)
    model = nn.Sequential(nn.Linear(4, 16, dtype=flow.float64), nn.ReLU(),
                          nn.Linear(16, 3, dtype=flow.float64))
    rng = np.random.default_rng(12)
    x = rng.standard_normal((32, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    initial = [_np(p) for p in model.parameters()]
    optimizer = flow.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    xt, yt = flow.tensor(x), flow.tensor(y)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = criterion(model(xt), yt)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    expected, final = _mlp_reference_losses(initial, x, y, lr=0.5, steps=20)
    np.testing.assert_allclose(losses, expected, rtol=1e-9)
    for p, e in zip(model.parameters(), final):
        np.testing.assert_allclose(_np(p), e, rtol=1e-8, atol=1e-10)
    assert losses[-1] < 0.6 * losses[0]


# ---- clip_grad_norm_ ---------------------------------------------------------------------------


def _params_with_grads(grads):
    params = []
    for g in grads:
        p = nn.Parameter(flow.zeros(*g.shape, dtype=flow.float64))
        p.grad = flow.tensor(g)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_matches_numpy(norm_type):
    rng = np.random.default_rng(13)
    grads = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    flat = np.concatenate([g.ravel() for g in grads])
    expected_norm = np.linalg.norm(flat, ord=norm_type)
    params = _params_with_grads(grads)
    total = nn.utils.clip_grad_norm_(params, max_norm=0.5, norm_type=norm_type)
    assert isinstance(total, flow.Tensor) and total.ndim == 0
    np.testing.assert_allclose(total.item(), expected_norm, rtol=1e-12)
    coef = 0.5 / (expected_norm + 1e-6)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(_np(p.grad), g * coef, rtol=1e-12)


def test_clip_grad_norm_leaves_small_gradients_unchanged():
    grads = [np.array([0.3, -0.4])]
    params = _params_with_grads(grads)
    params.append(nn.Parameter(flow.zeros(2)))  # no gradient: skipped
    total = nn.utils.clip_grad_norm_(iter(params), max_norm=1.0)
    np.testing.assert_allclose(total.item(), 0.5, rtol=1e-12)
    np.testing.assert_array_equal(params[0].grad.numpy(), grads[0])
    assert params[1].grad is None
    assert nn.utils.clip_grad_norm_([params[1]], 1.0).item() == 0.0
    single = _params_with_grads([np.array([3.0, 4.0])])[0]
    np.testing.assert_allclose(nn.utils.clip_grad_norm_(single, 1.0).item(), 5.0)
    np.testing.assert_allclose(single.grad.numpy(), [0.6, 0.8], rtol=1e-6)


def test_clip_grad_norm_errors():
    params = _params_with_grads([np.array([np.inf, 1.0])])
    with pytest.raises(RuntimeError, match="must be finite. However, got inf"):
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type must be positive or inf"):
        nn.utils.clip_grad_norm_(params, 1.0, norm_type=0)


# ---- MSELoss, Tanh, Softmax, Identity, one_hot, nn.init (issue 14) -----------------------------
def test_new_layers_match_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    x, y, tx, ty = flow.tensor(a), flow.tensor(b), torch.from_numpy(a), torch.from_numpy(b)
    for reduction in ("mean", "sum", "none"):
        np.testing.assert_allclose(nn.MSELoss(reduction=reduction)(x, y).numpy(),
                                   torch.nn.MSELoss(reduction=reduction)(tx, ty).numpy(),
                                   rtol=1e-6)
    np.testing.assert_allclose(nn.Tanh()(x).numpy(), torch.nn.Tanh()(tx).numpy(), rtol=1e-6)
    np.testing.assert_allclose(nn.Softmax(dim=1)(x).numpy(), torch.nn.Softmax(dim=1)(tx).numpy(),
                               rtol=1e-6)
    assert nn.Identity(54, unused="x")(x) is x
    labels = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(
        F.one_hot(flow.tensor(labels), 5).numpy(),
        torch.nn.functional.one_hot(torch.from_numpy(labels), 5).numpy())
    np.testing.assert_array_equal(F.one_hot(flow.tensor([2, 0])).numpy(), [[0, 0, 1], [1, 0, 0]])
    check_gradients(lambda p, q: F.mse_loss(p, q), a.astype(np.float64), b.astype(np.float64))


def test_new_layer_errors():
    with pytest.raises(ValueError, match=r"\[Softmax\] dim must be an int"):
        nn.Softmax()
    with pytest.raises(ValueError, match=r"\[mse_loss\] input and target must have one shape"):
        F.mse_loss(flow.ones(3), flow.ones(1))
    with pytest.raises(ValueError, match=r"\[one_hot\] class indices must lie in \[0, 2\)"):
        F.one_hot(flow.tensor([0, 2]), 2)
    with pytest.raises(TypeError, match=r"\[one_hot\] needs int64 class indices"):
        F.one_hot(flow.tensor([0.0]), 2)


def test_init_functions_follow_torchs_formulas():
    torch = pytest.importorskip("torch")
    for name, args in (("linear", ()), ("tanh", ()), ("relu", ()), ("leaky_relu", (0.2,)),
                       ("selu", ())):
        assert nn.init.calculate_gain(name, *args) == pytest.approx(
            torch.nn.init.calculate_gain(name, *args))
    flow.manual_seed(0)
    w = nn.Parameter(flow.zeros(300, 200))
    nn.init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * np.sqrt(6.0 / 500)
    values = w.numpy()
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.98 * bound
    assert values.std() == pytest.approx(bound / np.sqrt(3), rel=0.02)
    nn.init.kaiming_uniform_(w, a=np.sqrt(5))  # what torch's nn.Linear uses
    bound = np.sqrt(3.0) * np.sqrt(2.0 / (1 + 5)) / np.sqrt(200)
    assert np.abs(w.numpy()).max() <= bound and w.numpy().std() == pytest.approx(
        bound / np.sqrt(3), rel=0.02)
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert w.numpy().std() == pytest.approx(np.sqrt(2.0 / 300), rel=0.02)
    nn.init.xavier_normal_(w)
    assert w.numpy().std() == pytest.approx(np.sqrt(2.0 / 500), rel=0.02)
    assert w.requires_grad and w.grad is None
    with pytest.raises(ValueError, match=r"\[kaiming_uniform_\] needs a tensor with at least 2"):
        nn.init.kaiming_uniform_(nn.Parameter(flow.zeros(3)))


def test_init_of_a_global_parameter_gives_each_rank_its_piece_of_the_same_values():
    placement = flow.placement("cpu", ranks=[0])
    flow.manual_seed(4)
    whole = nn.Parameter(flow.zeros(6, 4))
    nn.init.xavier_uniform_(whole)
    layer = nn.Linear(4, 6, bias=False)
    layer.to_global(placement, flow.sbp.split(0))
    flow.manual_seed(4)
    nn.init.xavier_uniform_(layer.weight)
    np.testing.assert_array_equal(layer.weight.numpy(), whole.numpy())
