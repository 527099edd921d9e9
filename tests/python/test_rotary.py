"""Rotary position embedding against a NumPy reference and a PyTorch LLaMA-style one, with
gradient checks in float64."""

import numpy as np
import pytest
from gradcheck import check_gradients

import oneflowlike as flow

F = flow.nn.functional


def tables(seq, head_dim, base=10000.0):
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    return np.cos(angles), np.sin(angles)


def np_rotary(x, cos, sin, interleaved):
    """x (B, H, T, D)."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = np.split(x, 2, axis=-1)
    y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if interleaved:
        return np.stack([y1, y2], axis=-1).reshape(x.shape)
    return np.concatenate([y1, y2], axis=-1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_matches_numpy(interleaved):
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 8)).astype(np.float32)
    cos, sin = tables(7, 8)
    y = F.rotary_embedding(flow.tensor(x), flow.tensor(cos.astype(np.float32)),
                           flow.tensor(sin.astype(np.float32)), interleaved=interleaved)
    np.testing.assert_allclose(y.numpy(), np_rotary(x, cos, sin, interleaved), rtol=1e-5,
                               atol=1e-6)


def test_module_matches_a_torch_llama_rotary_and_keeps_norms():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((2, 5, 4, 16)).astype(np.float32)  # (B,T,H,D)
    rope = flow.nn.RotaryEmbedding(16, max_seq_len=12, seq_dim=1)
    y = rope(flow.tensor(x)).numpy()
    # Hugging Face's rotate_half form, in torch.
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    freqs = torch.outer(torch.arange(5, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    tx = torch.from_numpy(x).double()
    half = tx.shape[-1] // 2
    rotated = torch.cat([-tx[..., half:], tx[..., :half]], dim=-1)
    expected = (tx * cos + rotated * sin).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    assert list(rope.state_dict()) == []  # derived tables stay out of checkpoints


@pytest.mark.parametrize("interleaved", [False, True])
def test_gradient_matches_finite_differences(interleaved):
    cos, sin = tables(4, 6)
    tc, ts = flow.tensor(cos), flow.tensor(sin)
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 6))
    check_gradients(lambda t: F.rotary_embedding(t, tc, ts, interleaved=interleaved), x)


def test_bfloat16_rounds_once():
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 8)).astype(np.float32)
    cos, sin = (t.astype(np.float32) for t in tables(4, 8))
    xb = flow.tensor(x).to(flow.bfloat16)
    cb, sb = flow.tensor(cos).to(flow.bfloat16), flow.tensor(sin).to(flow.bfloat16)
    y = F.rotary_embedding(xb, cb, sb)
    assert y.dtype == flow.bfloat16
    ref = F.rotary_embedding(xb.to(flow.float32), cb.to(flow.float32), sb.to(flow.float32))
    np.testing.assert_array_equal(y.to(flow.float32).numpy(),
                                  ref.to(flow.bfloat16).to(flow.float32).numpy())


def test_refusals_name_the_problem():
    cos, sin = (flow.tensor(t.astype(np.float32)) for t in tables(4, 8))
    with pytest.raises(ValueError, match=r"\[rotary_embedding\] cos must be shaped"):
        F.rotary_embedding(flow.randn(1, 2, 5, 8), cos, sin)
    with pytest.raises(ValueError, match=r"more than max_seq_len 4"):
        flow.nn.RotaryEmbedding(8, 4)(flow.randn(1, 2, 5, 8))
    with pytest.raises(ValueError, match=r"head_dim must be positive and even"):
        flow.nn.RotaryEmbedding(7, 4)
    c = flow.tensor(tables(4, 8)[0].astype(np.float32), requires_grad=True)
    y = F.rotary_embedding(flow.randn(1, 2, 4, 8), c, sin)
    with pytest.raises(Exception, match=r"gradients with respect to cos and sin"):
        y.sum().backward()


@pytest.mark.parametrize("seq", [16, 8])
def test_rotary_embedding_in_the_zigzag_order_rotates_each_row_by_its_position(seq):
    # Note [Zigzag order]: rows stored in the zigzag order over 2 pieces get the rotation of
    # their position in the sequence: the tables kept in that order (a whole sequence), or
    # reordered (a shorter one).
    x = np.random.default_rng(1).standard_normal((2, 3, seq, 8)).astype(np.float32)
    plain = flow.nn.RotaryEmbedding(8, 16)(flow.tensor(x))
    ordered = flow.nn.RotaryEmbedding(8, 16, zigzag=2)(F.zigzag(flow.tensor(x), 2, 2))
    np.testing.assert_array_equal(ordered.numpy(), F.zigzag(plain, 2, 2).numpy())
