import numpy as np
import pytest

import gradcheck
import oneflowlike as flow

F = flow.nn.functional


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_gathers_rows_like_numpy(dtype, index_dtype):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((7, 5)).astype(dtype)
    indices = rng.integers(0, 7, size=(3, 4)).astype(index_dtype)
    out = F.embedding(flow.tensor(indices), flow.tensor(weight))
    assert out.shape == (3, 4, 5)
    assert out.dtype == flow.tensor(weight).dtype
    np.testing.assert_array_equal(out.numpy(), weight[indices])


def test_embedding_accepts_a_scalar_index_and_python_lists():
    weight = np.arange(12.0).reshape(4, 3)
    scalar_index = flow._C.from_numpy(np.array(2))  # 0-d (flow.tensor gives (1,))
    out = F.embedding(scalar_index, flow.tensor(weight))
    assert out.shape == (3,)
    np.testing.assert_array_equal(out.numpy(), weight[2])
    np.testing.assert_array_equal(F.embedding([[0, 3]], flow.tensor(weight)).numpy(),
                                  weight[[[0, 3]]])


def test_embedding_weight_gradient_sums_repeated_rows():
    weight = flow.tensor(np.zeros((4, 2)), requires_grad=True)
    indices = flow.tensor([1, 3, 1, 1])
    dy = np.arange(8.0).reshape(4, 2)
    F.embedding(indices, weight).backward(flow.tensor(dy))
    expected = np.zeros((4, 2))
    np.add.at(expected, [1, 3, 1, 1], dy)
    np.testing.assert_allclose(weight.grad.numpy(), expected)


def test_embedding_gradient_matches_finite_differences():
    indices = np.array([[2, 0], [2, 3], [1, 2]], dtype=np.int64)
    weight = np.random.default_rng(1).standard_normal((4, 3))
    gradcheck.check_gradients(lambda w, i: F.embedding(i, w), weight, indices)


def test_embedding_grad_op_is_differentiable_in_dy():
    indices = np.array([2, 0, 2], dtype=np.int64)
    dy = np.random.default_rng(2).standard_normal((3, 2))
    gradcheck.check_gradients(lambda d, i: flow._C.embedding_grad(d, i, 4), dy, indices)


def test_embedding_large_batch_matches_numpy():
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((100, 64)).astype(np.float32)
    indices = rng.integers(0, 100, size=(40, 50))
    w = flow.tensor(weight, requires_grad=True)
    out = F.embedding(flow.tensor(indices), w)
    np.testing.assert_array_equal(out.numpy(), weight[indices])
    dy = rng.standard_normal((40, 50, 64)).astype(np.float32)
    out.backward(flow.tensor(dy))
    expected = np.zeros((100, 64), dtype=np.float64)
    np.add.at(expected, indices.reshape(-1), dy.reshape(-1, 64).astype(np.float64))
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_embedding_out_of_range_index_raises_index_error():
    weight = flow.tensor(np.zeros((5, 2), dtype=np.float32))
    with pytest.raises(IndexError, match="got index 5 at position 2"):
        F.embedding(flow.tensor([0, 4, 5]), weight)
    with pytest.raises(IndexError, match="num_embeddings = 5"):
        F.embedding(flow.tensor([-1]), weight)


def test_embedding_bad_inputs_raise():
    with pytest.raises(ValueError, match="weight must be 2-d"):
        F.embedding(flow.tensor([0]), flow.tensor(np.zeros(5, dtype=np.float32)))
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        F.embedding(flow.tensor([0.0]), flow.tensor(np.zeros((5, 2), dtype=np.float32)))
    with pytest.raises(NotImplementedError, match="max_norm"):
        F.embedding(flow.tensor([0]), flow.tensor(np.zeros((5, 2))), max_norm=1.0)
    with pytest.raises(ValueError, match=r"\[embedding\] padding_idx must be within \[-5, 5\)"):
        F.embedding(flow.tensor([0]), flow.tensor(np.zeros((5, 2))), padding_idx=5)
    with pytest.raises(ValueError, match=r"padding_idx must be a row of the table, in \[0, 5\)"):
        flow._C.embedding(flow.tensor(np.zeros((5, 2))), flow.tensor([0]), 7)


@pytest.mark.parametrize("padding_idx", [1, -2])
def test_padding_row_gets_no_gradient_as_in_torch(padding_idx):
    torch = pytest.importorskip("torch")
    idx = np.array([[0, 1, 3], [1, 3, 2]])
    dy = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    emb = flow.nn.Embedding(4, 4, padding_idx=padding_idx)
    ref = torch.nn.Embedding(4, 4, padding_idx=padding_idx)
    assert emb.padding_idx == ref.padding_idx
    np.testing.assert_array_equal(emb.weight.numpy()[ref.padding_idx], np.zeros(4))
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(emb.weight.numpy()))
    y = emb(flow.tensor(idx))
    (y * flow.tensor(dy)).sum().backward()
    ry = ref(torch.from_numpy(idx))
    (ry * torch.from_numpy(dy)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ry.detach().numpy())
    np.testing.assert_allclose(emb.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-6)
    assert "padding_idx=" in repr(emb)
