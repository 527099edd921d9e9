import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients


def rand(*shape, dtype=np.float32, seed=0, scale=3.0):
    return (np.random.default_rng(seed).uniform(-1, 1, size=shape) * scale).astype(dtype)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_log_softmax_match_numpy(dim, dtype):
    x = rand(3, 4, 70, dtype=dtype, seed=1)
    t = flow.tensor(x)
    np.testing.assert_allclose(flow.softmax(t, dim).numpy(), np_softmax(x, dim), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(flow.log_softmax(t, dim).numpy(), np_log_softmax(x, dim),
                               rtol=1e-5, atol=1e-5)


def test_methods_and_functional_forms_agree():
    x = rand(4, 5, seed=2)
    t = flow.tensor(x)
    F = flow.nn.functional
    np.testing.assert_allclose(t.softmax(0).numpy(), np_softmax(x, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.log_softmax(dim=1).numpy(), np_log_softmax(x, 1), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(F.softmax(t, dim=-1).numpy(), np_softmax(x, -1), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(F.log_softmax(t, dim=0).numpy(), np_log_softmax(x, 0), rtol=1e-5,
                               atol=1e-6)


def test_large_logits_stay_finite():
    x = np.array([[1000.0, 1001.0, 1002.0, -1000.0]], dtype=np.float32)
    y = flow.softmax(flow.tensor(x), 1).numpy()
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(flow.log_softmax(flow.tensor(x), 1).numpy(), np_log_softmax(x, 1),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gradients_match_finite_differences(dim):
    x = rand(2, 3, 4, dtype=np.float64, seed=3, scale=1.0)
    check_gradients(lambda t: flow.softmax(t, dim), x)
    check_gradients(lambda t: flow.log_softmax(t, dim), x)


def test_out_of_range_dim_raises_index_error():
    with pytest.raises(IndexError, match=r"\[softmax\] dimension out of range"):
        flow.softmax(flow.tensor(rand(2, 3)), 2)
    with pytest.raises(IndexError, match=r"\[log_softmax\] dimension out of range"):
        flow.log_softmax(flow.tensor(rand(2, 3)), -3)


def test_integer_input_raises_type_error():
    with pytest.raises(TypeError, match="floating dtype"):
        flow.softmax(flow.tensor([1, 2, 3]), 0)
