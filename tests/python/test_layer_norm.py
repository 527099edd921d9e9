import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

F = flow.nn.functional


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-2, 3, size=shape).astype(dtype)


def np_layer_norm(x, n, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


@pytest.mark.parametrize("normalized_shape", [5, (5,), (4, 5), (3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_numpy(normalized_shape, dtype):
    x = rand(2, 3, 4, 5, dtype=dtype, seed=1)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    w, b = rand(*shape, dtype=dtype, seed=2), rand(*shape, dtype=dtype, seed=3)
    out = F.layer_norm(flow.tensor(x), normalized_shape, flow.tensor(w), flow.tensor(b), eps=1e-5)
    assert out.dtype == flow.tensor(x).dtype
    np.testing.assert_allclose(out.numpy(), np_layer_norm(x, len(shape), w, b), rtol=1e-5,
                               atol=1e-5)


def test_missing_weight_and_bias_mean_identity_affine():
    x = rand(3, 8, seed=4)
    np.testing.assert_allclose(F.layer_norm(flow.tensor(x), [8]).numpy(), np_layer_norm(x, 1),
                               rtol=1e-5, atol=1e-5)


def test_statistics_outputs_of_the_core_op():
    x = rand(3, 8, dtype=np.float64, seed=5)
    y, mean, inv_std = flow._C.layer_norm(flow.tensor(x), flow.tensor(np.ones(8)),
                                          flow.tensor(np.zeros(8)), -1, 1e-5)
    np.testing.assert_allclose(mean.numpy(), x.mean(1), rtol=1e-12)
    np.testing.assert_allclose(inv_std.numpy(), 1 / np.sqrt(x.var(1) + 1e-5), rtol=1e-12)
    np.testing.assert_allclose(y.numpy(), np_layer_norm(x, 1), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("normalized_shape", [(4,), (3, 4)])
def test_gradients_match_finite_differences(normalized_shape):
    x = rand(2, 3, 4, dtype=np.float64, seed=6)
    w = rand(*normalized_shape, dtype=np.float64, seed=7)
    b = rand(*normalized_shape, dtype=np.float64, seed=8)
    check_gradients(lambda t, tw, tb: F.layer_norm(t, normalized_shape, tw, tb), x, w, b,
                    rtol=1e-5, atol=1e-5)


def test_gradient_without_affine_parameters():
    check_gradients(lambda t: F.layer_norm(t, 4), rand(3, 4, dtype=np.float64, seed=9),
                    rtol=1e-5, atol=1e-5)


def test_normalized_shape_must_match_trailing_dims():
    with pytest.raises(ValueError, match="must be a non-empty match of the trailing dims"):
        F.layer_norm(flow.tensor(rand(2, 3, 4)), (3,))
    with pytest.raises(ValueError, match=r"normalized_shape \(2, 3, 4, 5\)"):
        F.layer_norm(flow.tensor(rand(3, 4)), (2, 3, 4, 5))


def test_wrong_weight_shape_raises_value_error():
    with pytest.raises(ValueError, match=r"weight must be shaped like the normalised axes of x \(4,\)"):
        F.layer_norm(flow.tensor(rand(2, 4)), (4,), flow.tensor(rand(3)), flow.tensor(rand(4)))


def test_mixed_dtypes_raise_type_error():
    with pytest.raises(TypeError, match="one floating dtype"):
        F.layer_norm(flow.tensor(rand(2, 4)), (4,), flow.tensor(rand(4, dtype=np.float64)))
