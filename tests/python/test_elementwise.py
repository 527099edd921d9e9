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


# ---- clamp, isclose, allclose (issue 14) --------------------------------------------------------
def test_clamp_matches_torch_including_bounds_and_nan():
    torch = pytest.importorskip("torch")
    a = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, np.nan], np.float32)
    t, ref = flow.tensor(a), torch.from_numpy(a)
    for lo, hi in ((-1.0, 1.0), (None, 0.25), (0.0, None), (1.0, -1.0)):
        np.testing.assert_array_equal(flow.clamp(t, lo, hi).numpy(),
                                      torch.clamp(ref, lo, hi).numpy())
    lo, hi = flow.tensor(np.full(6, -0.1, np.float32)), flow.tensor(np.full(6, 0.1, np.float32))
    np.testing.assert_array_equal(t.clamp(lo, hi).numpy(),
                                  torch.clamp(ref, torch.full((6,), -0.1), torch.full((6,), 0.1)))
    np.testing.assert_array_equal(flow.clip(flow.tensor([1, 5, 9]), 2, 6).numpy(), [2, 5, 6])
    assert flow.clamp(flow.tensor([1, 5]), 0.5).dtype == flow.float32  # promoted, as torch
    with pytest.raises(ValueError, match=r"\[clamp\] needs min or max"):
        flow.clamp(t)


def test_clamp_gradient_flows_where_kept():
    check_gradients(lambda x: flow.clamp(x, -0.5, 0.5),
                    np.array([-1.0, -0.3, 0.2, 0.9, 0.45]))


def test_isclose_and_allclose_match_torch():
    torch = pytest.importorskip("torch")
    a = np.array([1.0, 1.0 + 1e-7, np.inf, np.nan, 0.0, 1e-9], np.float32)
    b = np.array([1.0, 1.0, np.inf, np.nan, 1e-9, 0.0], np.float32)
    for equal_nan in (False, True):
        np.testing.assert_array_equal(
            flow.isclose(flow.tensor(a), flow.tensor(b), equal_nan=equal_nan).numpy(),
            torch.isclose(torch.from_numpy(a), torch.from_numpy(b), equal_nan=equal_nan).numpy())
    assert flow.allclose(flow.tensor(a[:3]), flow.tensor(b[:3])) is True
    assert flow.allclose(flow.tensor([1.0]), flow.tensor([1.1])) is False
    assert flow.allclose(flow.tensor([1.0]), flow.tensor([1.1]), atol=0.2) is True
    assert flow.tensor([2, 3]).allclose(flow.tensor([2, 3]))


def test_comparisons_with_nan_are_false_as_in_torch():
    n = flow.tensor([float("nan"), 1.0, 2.0])
    o = flow.tensor([float("nan"), 2.0, 2.0])
    assert (n <= o).numpy().tolist() == [False, True, True]
    assert (n >= o).numpy().tolist() == [False, False, True]
    assert (n < o).numpy().tolist() == [False, True, False]
    assert (n != o).numpy().tolist() == [True, True, False]


def test_isclose_of_infinities_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.array([1.0, 2.0, np.inf, np.inf, -np.inf], np.float32)
    b = np.array([np.inf, -np.inf, -np.inf, np.inf, -np.inf], np.float32)
    np.testing.assert_array_equal(flow.isclose(flow.tensor(a), flow.tensor(b)).numpy(),
                                  torch.isclose(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    assert not flow.allclose(flow.tensor([1.0]), flow.tensor([float("inf")]))
