"""rms_norm and nn.RMSNorm against PyTorch and NumPy, with gradient checks in float64."""

import numpy as np
import pytest
from gradcheck import check_gradients

import oneflowlike as flow

F = flow.nn.functional


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-2, 3, size=shape).astype(dtype)


def np_rms_norm(x, n, weight=None, eps=1e-6):
    axes = tuple(range(x.ndim - n, x.ndim))
    y = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=axes, keepdims=True) + eps)
    return y * weight if weight is not None else y


@pytest.mark.parametrize("normalized_shape", [5, (4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm_matches_numpy(normalized_shape, dtype):
    x = rand(2, 3, 4, 5, dtype=dtype, seed=1)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    w = rand(*shape, dtype=dtype, seed=2)
    out = F.rms_norm(flow.tensor(x), normalized_shape, flow.tensor(w), eps=1e-6)
    assert out.numpy().dtype == dtype
    np.testing.assert_allclose(out.numpy(), np_rms_norm(x, len(shape), w), rtol=1e-5, atol=1e-5)


def test_matches_torch_forward_and_backward_with_default_eps():
    torch = pytest.importorskip("torch")
    x = rand(3, 7, 16, seed=3)
    w = rand(16, seed=4)
    dy = rand(3, 7, 16, seed=5)
    norm = flow.nn.RMSNorm(16)
    norm.weight = flow.nn.Parameter(flow.tensor(w))
    tx = flow.tensor(x, requires_grad=True)
    y = norm(tx)
    (y * flow.tensor(dy)).sum().backward()

    ref = torch.nn.RMSNorm(16)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
    rx = torch.from_numpy(x).requires_grad_()
    ry = ref(rx)
    (ry * torch.from_numpy(dy)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ry.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(norm.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("normalized_shape", [(4,), (3, 4)])
def test_gradients_match_finite_differences(normalized_shape):
    x = rand(2, 3, 4, dtype=np.float64, seed=6)
    w = rand(*normalized_shape, dtype=np.float64, seed=7)
    check_gradients(lambda t, tw: F.rms_norm(t, normalized_shape, tw, eps=1e-6), x, w,
                    rtol=1e-5, atol=1e-5)


def test_bfloat16_computes_in_float32_and_rounds_once():
    x = rand(4, 32, seed=8)
    xb = flow.tensor(x).to(flow.bfloat16)
    y = F.rms_norm(xb, 32, eps=1e-6)
    assert y.dtype == flow.bfloat16
    x_rounded = xb.to(flow.float32).numpy()
    expected = flow.tensor(np_rms_norm(x_rounded, 1).astype(np.float32)).to(flow.bfloat16)
    np.testing.assert_array_equal(y.to(flow.float32).numpy(), expected.to(flow.float32).numpy())


def test_module_state_and_refusals():
    norm = flow.nn.RMSNorm((4, 5), eps=1e-5)
    assert list(norm.state_dict()) == ["weight"]
    assert "eps=1e-05" in repr(norm)
    assert list(flow.nn.RMSNorm(5, elementwise_affine=False).state_dict()) == []
    with pytest.raises(ValueError, match=r"\[rms_norm\] normalized_shape must be"):
        F.rms_norm(flow.tensor(rand(2, 3)), 4)
    with pytest.raises(ValueError, match=r"\[RMSNorm\] normalized_shape"):
        flow.nn.RMSNorm(0)
