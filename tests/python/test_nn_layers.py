"""flow.nn layers against NumPy (and torch where it is installed): Linear, Embedding,
LayerNorm, GELU, ReLU, Dropout, CrossEntropyLoss, causal self-attention, MSELoss, Tanh, Softmax,
Identity and one_hot."""

import math
import subprocess
import sys

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import nn
from oneflowlike.nn import functional as F
from gradcheck import check_gradients
from numpy_helpers import _grad_of, _np, _softmax

_erf = np.vectorize(math.erf)


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


# ---- MSELoss, Tanh, Softmax, Identity, one_hot (issue 14) --------------------------------------
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
