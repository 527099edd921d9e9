"""where and masked_fill against NumPy, with gradient checks in float64."""

import numpy as np
import pytest
from gradcheck import check_gradients

import oneflowlike as flow


@pytest.mark.parametrize(
    "cshape,xshape,yshape",
    [((2, 3), (2, 3), (2, 3)), ((3, 1), (4,), ()), ((1, 4), (3, 1), (3, 4)), ((5,), (2, 5), (5,))],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_where_matches_numpy(cshape, xshape, yshape, dtype):
    rng = np.random.default_rng(0)
    c = rng.uniform(size=cshape) > 0.5
    x = (rng.uniform(-5, 5, size=xshape)).astype(dtype)
    y = (rng.uniform(-5, 5, size=yshape)).astype(dtype)
    out = flow.where(flow.tensor(c), flow.tensor(x), flow.tensor(y))
    assert out.numpy().dtype == dtype
    np.testing.assert_array_equal(out.numpy(), np.where(c, x, y))


def test_where_with_numbers_and_method():
    c = np.array([True, False, True])
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(flow.where(flow.tensor(c), flow.tensor(x), 0).numpy(), [1, 0, 3])
    np.testing.assert_array_equal(flow.where(flow.tensor(c), -1.5, flow.tensor(x)).numpy(),
                                  [-1.5, 2, -1.5])
    out = flow.where(flow.tensor(c), 1.0, 0.0)
    assert out.dtype == flow.float32
    np.testing.assert_array_equal(out.numpy(), [1, 0, 1])
    out = flow.where(flow.tensor(c), flow.tensor([1, 2, 3]), 0.5)  # int tensor, float number
    assert out.dtype == flow.float32
    np.testing.assert_array_equal(out.numpy(), [1, 0.5, 3])
    np.testing.assert_array_equal(flow.tensor(x).where(flow.tensor(c), flow.tensor(-x)).numpy(),
                                  [1, -2, 3])


def test_where_gradients_with_broadcasting():
    c = np.array([[True, False, True], [False, False, True]])
    rng = np.random.default_rng(1)
    check_gradients(lambda cond, a, b: flow.where(cond, a, b), c, rng.uniform(size=(3,)),
                    rng.uniform(size=(2, 1)))


def test_where_rejects_non_bool_condition():
    t = flow.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\[where\] condition must have dtype bool"):
        flow.where(t, t, t)


def test_where_rejects_shapes_that_do_not_broadcast():
    c = flow.tensor([True, False, True])
    t = flow.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"\[where\] the inputs must broadcast to one shape"):
        flow.where(c, t, t)


def test_masked_fill_matches_numpy():
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(3, 4)).astype(np.float32)
    for mshape in [(3, 4), (4,), (3, 1), ()]:
        m = rng.uniform(size=mshape) > 0.5
        expected = np.where(m, np.float32(-7.0), x)
        np.testing.assert_array_equal(
            flow.tensor(x).masked_fill(flow.tensor(m), -7.0).numpy(), expected)
        np.testing.assert_array_equal(
            flow.masked_fill(flow.tensor(x), flow.tensor(m), flow.tensor(-7.0)).numpy(), expected)


def test_masked_fill_with_negative_infinity_for_attention_masks():
    x = flow.tensor(np.zeros((2, 2), dtype=np.float32))
    m = flow.tensor(np.triu(np.ones((2, 2), dtype=bool), k=1))
    out = x.masked_fill(m, float("-inf")).numpy()
    assert out[0, 1] == -np.inf and out[1, 0] == 0 and out[1, 1] == 0


def test_masked_fill_gradient():
    m = np.array([True, False, False])
    check_gradients(lambda x, mask: x.masked_fill(mask, 2.5),
                    np.random.default_rng(3).uniform(size=(2, 3)), m)


def test_masked_fill_rejects_mask_larger_than_input():
    x = flow.tensor([1.0, 2.0, 3.0])
    m = flow.tensor(np.ones((2, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"\[masked_fill\] mask must broadcast to the shape of x"):
        x.masked_fill(m, 0.0)


def test_masked_fill_rejects_non_bool_mask():
    x = flow.tensor([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match=r"\[masked_fill\] mask must have dtype bool"):
        x.masked_fill(flow.tensor([1, 0, 1]), 0.0)
