import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(dtype)


@pytest.mark.parametrize("a_shape", [(5, 7), (2, 3, 7), (2, 2, 3, 7)])
def test_matmul_with_2d_weight_matches_numpy(a_shape):
    a, b = rand(*a_shape, seed=1), rand(7, 4, seed=2)
    out = flow.matmul(flow.tensor(a), flow.tensor(b))
    assert out.shape == a_shape[:-1] + (4,)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_operator_and_method_agree_with_numpy():
    a, b = rand(3, 4, seed=3), rand(4, 6, seed=4)
    ta, tb = flow.tensor(a), flow.tensor(b)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ta.matmul(tb).numpy(), a @ b, rtol=1e-5, atol=1e-6)


def test_batched_matmul_and_bmm_match_numpy():
    a, b = rand(2, 3, 4, 5, seed=5), rand(2, 3, 5, 6, seed=6)
    out = flow.matmul(flow.tensor(a), flow.tensor(b))
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    a3, b3 = rand(4, 3, 5, seed=7), rand(4, 5, 2, seed=8)
    np.testing.assert_allclose(flow.bmm(flow.tensor(a3), flow.tensor(b3)).numpy(), a3 @ b3,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(flow.tensor(a3).bmm(flow.tensor(b3)).numpy(), a3 @ b3,
                               rtol=1e-5, atol=1e-5)


def test_float64_matmul_matches_numpy():
    a, b = rand(6, 5, dtype=np.float64, seed=9), rand(5, 3, dtype=np.float64, seed=10)
    out = flow.matmul(flow.tensor(a), flow.tensor(b))
    assert out.dtype == flow.float64
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12)


def test_linear_matches_torch_definition():
    x, w, b = rand(2, 3, 4, seed=11), rand(5, 4, seed=12), rand(5, seed=13)
    F = flow.nn.functional
    np.testing.assert_allclose(F.linear(flow.tensor(x), flow.tensor(w), flow.tensor(b)).numpy(),
                               x @ w.T + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.linear(flow.tensor(x), flow.tensor(w)).numpy(), x @ w.T,
                               rtol=1e-5, atol=1e-6)


def test_matmul_gradients_match_finite_differences():
    check_gradients(flow.matmul, rand(3, 4, dtype=np.float64, seed=14),
                    rand(4, 2, dtype=np.float64, seed=15))
    check_gradients(flow.matmul, rand(2, 3, 4, dtype=np.float64, seed=16),
                    rand(4, 2, dtype=np.float64, seed=17))


def test_batched_matmul_gradients_match_finite_differences():
    check_gradients(flow.bmm, rand(2, 3, 4, dtype=np.float64, seed=18),
                    rand(2, 4, 2, dtype=np.float64, seed=19))


def test_linear_gradients_match_finite_differences():
    check_gradients(flow.nn.functional.linear, rand(3, 4, dtype=np.float64, seed=20),
                    rand(2, 4, dtype=np.float64, seed=21), rand(2, dtype=np.float64, seed=22))


def test_mismatched_inner_extents_raise_value_error():
    with pytest.raises(ValueError, match="contracted extents of a and b must match"):
        flow.matmul(flow.tensor(rand(4, 8)), flow.tensor(rand(6, 5)))


def test_unsupported_operand_ranks_raise_value_error():
    with pytest.raises(ValueError, match=r"However, got input \(4,\)"):
        flow.matmul(flow.tensor(rand(4)), flow.tensor(rand(4, 2)))
    with pytest.raises(ValueError, match="identical batch dims"):
        flow.matmul(flow.tensor(rand(2, 3, 4)), flow.tensor(rand(3, 4, 5)))
    with pytest.raises(ValueError, match="both operands must be 3-D"):
        flow.bmm(flow.tensor(rand(3, 4)), flow.tensor(rand(4, 5)))


def test_mixed_dtypes_raise_type_error():
    with pytest.raises(TypeError, match="one dtype"):
        flow.matmul(flow.tensor(rand(3, 4)), flow.tensor(rand(4, 2, dtype=np.float64)))
    with pytest.raises(TypeError, match="must be a Tensor"):
        flow.matmul(flow.tensor(rand(3, 4)), rand(4, 2))
