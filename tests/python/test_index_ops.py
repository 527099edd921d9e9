"""gather and index_select against PyTorch (NumPy where torch is absent), their gradients
against finite differences, and their errors."""

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

torch = pytest.importorskip("torch")


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_matches_torch_with_a_narrower_index(dim, index_dtype):
    x = rand(4, 5, 6, seed=1)
    shape = [3, 4, 5]
    index = np.random.default_rng(2).integers(0, x.shape[dim], size=shape).astype(index_dtype)
    out = flow.gather(flow.tensor(x), dim, flow.tensor(index))
    expected = torch.gather(torch.from_numpy(x), dim, torch.from_numpy(index.astype(np.int64)))
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    np.testing.assert_array_equal(flow.tensor(x).gather(dim, flow.tensor(index)).numpy(),
                                  expected.numpy())


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_matches_torch(dim):
    x = rand(4, 5, 6, seed=3)
    index = np.array([3, 0, 3, 1], dtype=np.int64)
    out = flow.index_select(flow.tensor(x), dim, flow.tensor(index))
    expected = torch.index_select(torch.from_numpy(x), dim, torch.from_numpy(index))
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    assert flow.tensor(x).index_select(dim, flow.tensor(index)).shape == tuple(expected.shape)


@pytest.mark.parametrize("dtype", [flow.bfloat16, flow.float16, flow.int64, flow.float64])
def test_gathers_move_every_dtype_exactly(dtype):
    x = flow.tensor(np.arange(12.0).reshape(3, 4)).to(dtype)
    out = flow.index_select(x, 1, flow.tensor([2, 2, 0]))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.to(flow.float64).numpy(),
                                  np.arange(12.0).reshape(3, 4)[:, [2, 2, 0]])
    g = flow.gather(x, 0, flow.tensor([[2, 0, 1, 1]]))
    np.testing.assert_array_equal(g.to(flow.float64).numpy(), [[8, 1, 6, 7]])


def test_gradients_scatter_add_repeated_indices_as_torch():
    x = rand(3, 5, seed=4).astype(np.float64)
    index = np.array([[4, 4, 0], [1, 1, 1]], dtype=np.int64)
    dy = rand(2, 3, seed=5).astype(np.float64)
    a = flow.tensor(x, requires_grad=True)
    flow.gather(a, 1, flow.tensor(index)).backward(flow.tensor(dy))
    t = torch.from_numpy(x).requires_grad_()
    torch.gather(t, 1, torch.from_numpy(index)).backward(torch.from_numpy(dy))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12)

    b = flow.tensor(x, requires_grad=True)
    select = np.array([2, 0, 2, 2], dtype=np.int64)
    dz = rand(3, 4, seed=6).astype(np.float64)
    flow.index_select(b, 1, flow.tensor(select)).backward(flow.tensor(dz))
    u = torch.from_numpy(x).requires_grad_()
    torch.index_select(u, 1, torch.from_numpy(select)).backward(torch.from_numpy(dz))
    np.testing.assert_allclose(b.grad.numpy(), u.grad.numpy(), rtol=1e-12)


def test_gradients_match_finite_differences():
    index = np.array([[0, 2, 2], [1, 0, 0]], dtype=np.int64)
    check_gradients(lambda x, i: flow.gather(x, 1, i), rand(2, 3, seed=7).astype(np.float64),
                    index)
    check_gradients(lambda x, i: flow.index_select(x, 0, i),
                    rand(3, 2, seed=8).astype(np.float64), np.array([2, 0, 2], dtype=np.int64))
    check_gradients(lambda d, i: flow._C.gather_grad(d, i, 1, (2, 4)),
                    rand(2, 3, seed=9).astype(np.float64), index)


def test_low_precision_gradients_sum_in_float32():
    x = flow.tensor(np.zeros((2, 3), dtype=np.float32)).to(flow.bfloat16)
    x.requires_grad = True
    dy = flow.tensor(np.array([256.0, 1.0, 1.0], dtype=np.float32)).to(flow.bfloat16)
    flow.index_select(x, 0, flow.tensor([1, 1, 1]))[:, 0].backward(dy)  # rows of 3
    assert float(x.grad.to(flow.float32).numpy()[1, 0]) == 258.0


def test_out_of_range_index_raises_index_error():
    x = flow.tensor(rand(2, 5))
    with pytest.raises(IndexError, match=r"\[gather\] .*x.shape\[dim\] = 5.*got index 5"):
        flow.gather(x, 1, flow.tensor([[0, 5]]))
    with pytest.raises(IndexError, match=r"\[index_select\] .*got index -1 at position 1"):
        flow.index_select(x, 0, flow.tensor([0, -1]))


def test_bad_shapes_dims_and_dtypes_raise_naming_op_and_tensors():
    x = flow.tensor(rand(3, 4))
    with pytest.raises(ValueError, match=r"\[gather\] index must have as many dims as x \(2\)"
                                         r".*x \(3, 4\) float32, index \(2,\) int64"):
        flow.gather(x, 0, flow.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"index.shape\[1\] must be at most x.shape\[1\] = 4"):
        flow.gather(x, 0, flow.tensor([[0, 0, 0, 0, 0]]))
    with pytest.raises(IndexError, match=r"\[index_select\] dimension out of range"):
        flow.index_select(x, 2, flow.tensor([0]))
    with pytest.raises(TypeError, match=r"\[index_select\] index must be int32 or int64"):
        flow.index_select(x, 0, flow.tensor([0.0]))
    with pytest.raises(ValueError, match=r"\[index_select\] index into a 0-d x must have "
                       r"exactly 1 element"):
        flow.index_select(flow.tensor(5.0), 0, flow.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"\[index_select\] index into a 0-d x must have "
                       r"exactly 1 element"):
        flow.index_select(flow.tensor(5.0), 0, flow.tensor([], dtype=flow.int64))
    with pytest.raises(ValueError, match=r"\[index_select\] index must be 1-d"):
        flow.index_select(x, 0, flow.tensor([[0]]))
    with pytest.raises(NotImplementedError, match="sparse_grad"):
        flow.gather(x, 0, flow.tensor([[0]]), sparse_grad=True)
