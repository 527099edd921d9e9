import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((), (2, 3)), ((5, 1), (1, 6))]


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_arithmetic_matches_numpy_with_broadcasting(sa, sb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.uniform(0.5, 2, sb).astype(np.float32)
    ta, tb = flow.tensor(a), flow.tensor(b)
    np.testing.assert_allclose((ta + tb).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((ta - tb).numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose((ta * tb).numpy(), a * b, rtol=1e-6)
    np.testing.assert_allclose((ta / tb).numpy(), a / b, rtol=1e-6)
    np.testing.assert_array_equal((ta > tb).numpy(), a > b)
    np.testing.assert_array_equal((ta == ta).numpy(), np.ones(a.shape, bool))


def test_number_operands_on_either_side():
    x = flow.tensor([1.0, 2.0, 4.0])
    np.testing.assert_allclose((x + 1).numpy(), [2, 3, 5])
    np.testing.assert_allclose((1 - x).numpy(), [0, -1, -3])
    np.testing.assert_allclose((x * 3).numpy(), [3, 6, 12])
    np.testing.assert_allclose((2 / x).numpy(), [2, 1, 0.5])
    np.testing.assert_allclose((x / 2).numpy(), [0.5, 1, 2])
    np.testing.assert_array_equal((x >= 2).numpy(), [False, True, True])
    np.testing.assert_array_equal((x != 2).numpy(), [True, False, True])
    i = flow.tensor([1, 2])
    assert (i + 1).dtype == flow.int64
    assert (i + 0.5).dtype == flow.float32
    assert (i / 2).dtype == flow.float32


def test_mixed_tensor_dtypes_promote():
    out = flow.tensor([1, 2]) + flow.tensor([0.5, 0.5])
    assert out.dtype == flow.float32
    np.testing.assert_allclose(out.numpy(), [1.5, 2.5])


@pytest.mark.parametrize("op", [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
                                lambda a, b: a / b])
def test_gradients_with_broadcasting(op):
    rng = np.random.default_rng(1)
    check_gradients(op, rng.standard_normal((2, 3)), rng.uniform(0.5, 1.5, (3,)))
    check_gradients(op, rng.uniform(0.5, 1.5, (2, 1)), rng.uniform(0.5, 1.5, (1, 3)))


def test_shape_mismatch_raises_value_error_naming_shapes():
    with pytest.raises(ValueError, match=r"\[add\] shapes must broadcast.*\(3,\) and \(2,\)"):
        flow.tensor([1.0, 2, 3]) + flow.tensor([1.0, 2])
