"""Unary elementwise ops against NumPy, with gradient checks in float64."""

import math

import numpy as np
import pytest
from gradcheck import check_gradients

import oneflowlike as flow

_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# name, flow function, numpy reference, input range
CASES = [
    ("neg", flow.neg, np.negative, (-2, 2)),
    ("negative", flow.negative, np.negative, (-2, 2)),
    ("abs", flow.abs, np.abs, (0.1, 2)),
    ("exp", flow.exp, np.exp, (-2, 2)),
    ("log", flow.log, np.log, (0.1, 3)),
    ("sqrt", flow.sqrt, np.sqrt, (0.1, 3)),
    ("rsqrt", flow.rsqrt, lambda x: 1 / np.sqrt(x), (0.2, 3)),
    ("tanh", flow.tanh, np.tanh, (-2, 2)),
    ("relu", flow.relu, lambda x: np.maximum(x, 0), (-2, 2)),
    ("sigmoid", flow.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-3, 3)),
    ("silu", flow.silu, lambda x: x / (1 + np.exp(-x)), (-4, 4)),
    ("gelu", flow.gelu, _gelu, (-3, 3)),
    ("gelu_tanh", lambda x: flow.gelu(x, approximate="tanh"), _gelu_tanh, (-3, 3)),
]


@pytest.mark.parametrize("name,fn,ref,bounds", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy(name, fn, ref, bounds, dtype):
    x = np.random.default_rng(0).uniform(*bounds, size=(3, 4)).astype(dtype)
    y = fn(flow.tensor(x))
    assert y.numpy().dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.numpy(), ref(x.astype(np.float64)), rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("name,fn,ref,bounds", CASES, ids=[c[0] for c in CASES])
def test_gradients(name, fn, ref, bounds):
    x = np.random.default_rng(1).uniform(*bounds, size=(2, 3))
    check_gradients(fn, x)


def test_tensor_methods_and_operators():
    x = np.random.default_rng(2).uniform(0.5, 2, size=(4,)).astype(np.float32)
    t = flow.tensor(x)
    np.testing.assert_allclose((-t).numpy(), -x)
    np.testing.assert_allclose(abs(flow.tensor(-x)).numpy(), x)
    np.testing.assert_allclose(t.neg().numpy(), -x)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(t.log().numpy(), np.log(x), rtol=1e-6)
    np.testing.assert_allclose(t.sqrt().numpy(), np.sqrt(x), rtol=1e-6)
    np.testing.assert_allclose(t.rsqrt().numpy(), 1 / np.sqrt(x), rtol=1e-6)
    np.testing.assert_allclose(t.tanh().numpy(), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(t.sigmoid().numpy(), 1 / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_allclose(flow.tensor(x - 1).relu().numpy(), np.maximum(x - 1, 0))


def test_nn_functional_names():
    x = np.linspace(-2, 2, 9)
    t = flow.tensor(x)
    F = flow.nn.functional
    np.testing.assert_allclose(F.relu(t).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(F.gelu(t).numpy(), _gelu(x), rtol=1e-12)
    np.testing.assert_allclose(F.gelu(t, approximate="tanh").numpy(), _gelu_tanh(x), rtol=1e-12)
    np.testing.assert_allclose(F.sigmoid(t).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(F.tanh(t).numpy(), np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(F.silu(t).numpy(), x / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(flow.nn.SiLU()(t).numpy(), x / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(t.silu().numpy(), x / (1 + np.exp(-x)), rtol=1e-12)


def test_neg_and_abs_keep_integer_dtypes():
    t = flow.tensor(np.array([-3, 0, 5], dtype=np.int64))
    assert (-t).dtype == flow.int64
    np.testing.assert_array_equal((-t).numpy(), [3, 0, -5])
    np.testing.assert_array_equal(abs(t).numpy(), [3, 0, 5])


def test_relu_gradient_is_zero_where_not_positive():
    x = flow.tensor(np.array([-1.0, 0.0, 2.0]), requires_grad=True)
    flow.relu(x).backward(flow.tensor(np.array([5.0, 6.0, 7.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 7])


def test_second_derivative_of_tanh():
    x = np.random.default_rng(3).uniform(-2, 2, size=(5,))
    dy = np.random.default_rng(4).uniform(-1, 1, size=(5,))
    check_gradients(lambda t, g: flow._C.tanh_grad(flow.tanh(t), g), x, dy)


def test_exp_of_integer_tensor_raises_type_error():
    with pytest.raises(TypeError, match=r"\[exp\] the input must have a floating-point dtype"):
        flow.exp(flow.tensor([1, 2, 3]))


def test_neg_of_bool_raises_type_error():
    with pytest.raises(TypeError, match=r"\[neg\] the input must have a number dtype, not bool"):
        flow.neg(flow.tensor([True, False]))


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match=r"approximate must be 'none' or 'tanh'. However, got 'x'"):
        flow.gelu(flow.tensor([1.0]), approximate="x")


def test_relu_inplace_is_refused():
    with pytest.raises(NotImplementedError, match=r"inplace=True is not supported"):
        flow.nn.functional.relu(flow.tensor([1.0]), inplace=True)


def test_silu_inplace_is_refused_by_the_function_and_the_module():
    with pytest.raises(NotImplementedError, match=r"\[silu\] inplace=True is not supported"):
        flow.nn.functional.silu(flow.tensor([1.0]), inplace=True)
    with pytest.raises(NotImplementedError, match=r"\[SiLU\] inplace=True is not supported"):
        flow.nn.SiLU(inplace=True)
