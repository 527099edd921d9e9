"""Tensor-scalar ops (scalar_add/mul/pow/rpow, ** and pow) against NumPy."""

import numpy as np
import pytest
from gradcheck import check_gradients

import oneflowlike as flow
from oneflowlike.ops import scalar


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_ops_match_numpy(dtype):
    x = np.random.default_rng(0).uniform(0.1, 2, size=(3, 4)).astype(dtype)
    t = flow.tensor(x)
    np.testing.assert_allclose(scalar.scalar_add(t, 1.5).numpy(), x + 1.5, rtol=1e-6)
    np.testing.assert_allclose(scalar.scalar_mul(t, -2.5).numpy(), x * -2.5, rtol=1e-6)
    np.testing.assert_allclose(scalar.scalar_rpow(t, 3.0).numpy(), 3.0**x, rtol=1e-6)
    for s in [2, 3, 1, 0.5, -1, 0, 1.7, -2.3]:
        out = scalar.scalar_pow(t, s)
        assert out.numpy().dtype == dtype
        np.testing.assert_allclose(out.numpy(), x.astype(np.float64) ** s, rtol=1e-5)


def test_pow_operators_and_function():
    x = np.random.default_rng(1).uniform(0.5, 2, size=(5,))
    t = flow.tensor(x)
    np.testing.assert_allclose((t**2).numpy(), x**2)
    np.testing.assert_allclose((2.0**t).numpy(), 2.0**x, rtol=1e-12)
    np.testing.assert_allclose(t.pow(0.5).numpy(), np.sqrt(x), rtol=1e-12)
    np.testing.assert_allclose(flow.pow(t, 3).numpy(), x**3, rtol=1e-12)
    np.testing.assert_allclose(flow.pow(10, t).numpy(), 10.0**x, rtol=1e-12)


def test_integer_tensors():
    t = flow.tensor(np.array([-3, 0, 7], dtype=np.int64))
    out = scalar.scalar_add(t, 2)
    assert out.dtype == flow.int64
    np.testing.assert_array_equal(out.numpy(), [-1, 2, 9])
    out = scalar.scalar_mul(t, -3)
    assert out.dtype == flow.int64
    np.testing.assert_array_equal(out.numpy(), [9, 0, -21])
    out = scalar.scalar_add(t, 2.0)  # a float number makes the result float, as in torch
    assert out.dtype == flow.float32
    np.testing.assert_allclose(out.numpy(), [-1, 2, 9])
    out = t**2
    assert out.dtype == flow.float32
    np.testing.assert_allclose(out.numpy(), [9, 0, 49])


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: scalar.scalar_add(t, 3.0),
        lambda t: scalar.scalar_mul(t, -1.5),
        lambda t: scalar.scalar_rpow(t, 2.5),
        lambda t: t**2,
        lambda t: t**3,
        lambda t: t**0.5,
        lambda t: t**-1.5,
        lambda t: t**0,
        lambda t: 3.0**t,
    ],
)
def test_gradients(fn):
    x = np.random.default_rng(2).uniform(0.2, 2, size=(2, 3))
    check_gradients(fn, x)


def test_tensor_pow_tensor_raises_type_error():
    t = flow.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\[pow\] .*tensor \*\* tensor is not supported"):
        t**t
    with pytest.raises(TypeError, match=r"\[pow\] expected a tensor and a number"):
        flow.pow(2, 3)


def test_scalar_pow_of_bool_raises_type_error():
    with pytest.raises(TypeError, match=r"\[scalar_add\] the input must have a number dtype"):
        scalar.scalar_add(flow.tensor([True, False]), 1)
