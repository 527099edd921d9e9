import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients


@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_amax_match_numpy(dim, keepdim):
    a = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    t = flow.tensor(a)
    np.testing.assert_allclose(flow.sum(t, dim, keepdim).numpy(),
                               a.sum(axis=dim, keepdims=keepdim), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.mean(dim, keepdim).numpy(), a.mean(axis=dim, keepdims=keepdim),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(flow.amax(t, dim, keepdim).numpy(),
                               a.max(axis=dim, keepdims=keepdim))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("length", [1, 7, 16, 37, 1024, 1040, 2500])
def test_amax_and_amin_over_rows_match_numpy_with_nan_anywhere(length, dtype):
    """amax and amin of rows (sixteen lanes and a NaN mask; 16-bit rows widened a block at a
    time) are numpy's on the same values: shorter than the lanes, exactly one vector, across
    block boundaries, with NaN first, last, in the middle or nowhere, infinities and ties."""
    rng = np.random.default_rng(length)
    a = np.round(rng.standard_normal((6, length)) * 4).astype(np.float32)  # many ties
    a[1, 0] = np.nan
    a[2, -1] = np.nan
    a[3, length // 2] = np.nan
    a[4, :] = -np.inf
    a[5, length // 3] = np.inf
    x = flow.tensor(a).to(getattr(flow, dtype))
    values = x.to(flow.float32).numpy()  # what the low-precision rows hold
    for fn, ref in ((flow.amax, np.max), (flow.amin, np.min)):
        got = fn(x, dim=1).to(flow.float32).numpy()
        np.testing.assert_array_equal(got, ref(values, axis=1))
    # A row of -0 between values beyond it gives -0, not a +0 the row does not hold.
    for fn, other in ((flow.amax, -1.0), (flow.amin, 1.0)):
        row = np.where(np.arange(length) % 2 == 0, -0.0, other).astype(np.float32)[None]
        got = fn(flow.tensor(row).to(getattr(flow, dtype)), dim=1).to(flow.float32).numpy()
        assert got[0] == 0 and np.signbit(got[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,dim", [((4099, 770), 0), ((3, 130, 300), 1), ((64, 5), 0),
                                       ((65, 5), 0)])
def test_reductions_over_columns_are_exact_and_the_same_on_any_thread_count(shape, dim, dtype):
    """A sum over a leading axis (a bias gradient) sums chunks of 64 rows apart and adds their
    double sums in an order set by the shape alone: float32's sum within an ulp of the float64
    one, and the same bits on one thread as on two (float64 keeps the double sums' own bits, so
    an order that followed the threads would show there). max and min over columns are numpy's
    in both dtypes (they are not chunked)."""
    a = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    x = flow.tensor(a)
    threads = flow.get_num_threads()
    try:
        flow.set_num_threads(1)
        one = flow.sum(x, dim).numpy()
        flow.set_num_threads(2)
        two = flow.sum(x, dim).numpy()
        extremes = flow.amax(x, dim).numpy(), flow.amin(x, dim).numpy()
    finally:
        flow.set_num_threads(threads)
    np.testing.assert_array_equal(one, two)
    exact = a.astype(np.float64).sum(axis=dim)
    np.testing.assert_allclose(one, exact, rtol=2**-23 if dtype == np.float32 else 1e-13,
                               atol=1e-6 if dtype == np.float32 else 1e-12)
    np.testing.assert_array_equal(extremes[0], a.max(axis=dim))
    np.testing.assert_array_equal(extremes[1], a.min(axis=dim))


def test_gradients():
    a = np.random.default_rng(1).standard_normal((3, 4))
    check_gradients(lambda x: x.sum(1), a)
    check_gradients(lambda x: x.mean((0, 1), keepdim=True), a)
    check_gradients(lambda x: flow.amax(x, 0), a)


def test_max_with_dim_gives_values_and_indices_and_without_reduces_everything():
    values, indices = flow.max(flow.tensor([1.0, 5.0, 2.0]), 0)
    assert values.item() == 5.0 and indices.item() == 1
    assert flow.max(flow.tensor([1.0, 5.0, 2.0])).item() == 5.0


def test_bad_dim_is_index_error():
    with pytest.raises(IndexError, match=r"\[reduce_sum\] dimension out of range"):
        flow.sum(flow.tensor([1.0, 2.0]), 2)


# ---- min, var, std, all, any (issue 14): against torch where it is installed, else NumPy --------
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_amin_var_std_match_numpy(dim, keepdim):
    a = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float64)
    t = flow.tensor(a)
    np.testing.assert_allclose(flow.amin(t, dim, keepdim).numpy(), a.min(axis=dim, keepdims=keepdim))
    for correction in (0, 1):
        np.testing.assert_allclose(t.var(dim, keepdim=keepdim, correction=correction).numpy(),
                                   a.var(axis=dim, ddof=correction, keepdims=keepdim), rtol=1e-10)
        np.testing.assert_allclose(flow.std(t, dim, keepdim=keepdim, correction=correction).numpy(),
                                   a.std(axis=dim, ddof=correction, keepdims=keepdim), rtol=1e-10)
    np.testing.assert_allclose(t.var(dim, unbiased=False, keepdim=keepdim).numpy(),
                               a.var(axis=dim, keepdims=keepdim), rtol=1e-10)


def test_min_forms_match_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((4, 5)).astype(np.float32)
    assert flow.min(flow.tensor(a)).item() == torch.min(torch.from_numpy(a)).item()
    np.testing.assert_array_equal(flow.min(flow.tensor(a), flow.tensor(b)).numpy(),
                                  torch.min(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    np.testing.assert_array_equal(flow.max(flow.tensor(a), flow.tensor(b)).numpy(),
                                  torch.max(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    np.testing.assert_allclose(flow.tensor(a).std().item(), torch.from_numpy(a).std().item(),
                               rtol=1e-6)
    assert flow.min(flow.tensor(a), 0).indices.dtype == flow.int64


def test_var_of_one_element_with_correction_is_nan_as_torch():
    assert np.isnan(flow.tensor([3.0]).var().item())
    assert flow.tensor([3.0]).var(unbiased=False).item() == 0.0
    with pytest.raises(TypeError, match=r"\[var\] needs a floating-point tensor"):
        flow.tensor([1, 2]).var()


def test_all_and_any():
    a = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0]], np.float32)
    t = flow.tensor(a)
    assert not flow.all(t).item() and flow.any(t).item()
    np.testing.assert_array_equal(t.all(1).numpy(), a.all(axis=1))
    np.testing.assert_array_equal(t.any(0, keepdim=True).numpy(), a.any(axis=0, keepdims=True))
    np.testing.assert_array_equal((t >= 0).all().numpy(), True)


def test_min_var_std_gradients():
    a = np.random.default_rng(5).standard_normal((3, 4))
    check_gradients(lambda x: flow.amin(x, 1), a)
    check_gradients(lambda x: flow.min(x), a)
    check_gradients(lambda x: x.var(0), a)
    check_gradients(lambda x: x.std(1, keepdim=True), a)
    check_gradients(lambda x, y: flow.min(x, y), a, a[::-1].copy() + 0.1)


def test_min_reaches_integer_lows_and_max_min_of_two_keep_nan_from_either_side():
    assert flow.amin(flow.tensor(np.array([-128, 0, 5], np.int8))).item() == -128
    low = np.iinfo(np.int64).min
    assert flow.min(flow.tensor(np.array([low, 0], np.int64))).item() == low
    a = flow.tensor([1.0, float("nan"), 3.0])
    b = flow.tensor([float("nan"), 2.0, 1.0])
    for fn in (flow.min, flow.max):
        got = fn(a, b).numpy()
        assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == (1.0 if fn is flow.min else 3.0)


def test_var_and_std_take_unbiased_in_the_dim_position_as_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[1.0, 2.0], [4.0, 7.0]], np.float32)
    np.testing.assert_allclose(flow.tensor(a).var(False).numpy(),
                               torch.from_numpy(a).var(False).numpy(), rtol=1e-6)
    np.testing.assert_allclose(flow.std(flow.tensor(a), True).numpy(),
                               torch.std(torch.from_numpy(a), True).numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match=r"\[reduce\] dim must be an int"):
        flow.sum(flow.tensor(a), True)
    assert flow.tensor(3.0).var(-1, unbiased=False).item() == 0.0


@pytest.mark.parametrize("dim", [1, (0, 2), -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp_matches_torch_without_overflow(dim, keepdim):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).standard_normal((3, 4, 5)).astype(np.float32) * 40
    out = flow.logsumexp(flow.tensor(x), dim, keepdim=keepdim)
    want = torch.logsumexp(torch.from_numpy(x), dim, keepdim=keepdim).numpy()
    assert out.shape == want.shape
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(flow.tensor(x).logsumexp(dim, keepdim).numpy(), want, rtol=1e-6)


def test_logsumexp_of_infinite_and_nan_slices_and_integers_as_torch():
    torch = pytest.importorskip("torch")
    y = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0], [3e38, 3e38]],
                 dtype=np.float32)
    np.testing.assert_array_equal(flow.logsumexp(flow.tensor(y), 1).numpy(),
                                  torch.logsumexp(torch.from_numpy(y), 1).numpy())
    ints = flow.logsumexp(flow.tensor([1, 2, 3]), 0)
    assert ints.dtype == flow.float32
    np.testing.assert_allclose(ints.numpy(), np.log(np.exp([1, 2, 3]).sum()), rtol=1e-6)


def test_logsumexp_gradient_is_softmax():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(8).standard_normal((3, 6)).astype(np.float64) * 5
    a = flow.tensor(x, requires_grad=True)
    dy = np.random.default_rng(9).standard_normal(3)
    flow.logsumexp(a, 1).backward(flow.tensor(dy))
    b = torch.from_numpy(x).requires_grad_()
    torch.logsumexp(b, 1).backward(torch.from_numpy(dy))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)
    check_gradients(lambda t: flow.logsumexp(t, (0, 1)), x)


def test_logsumexp_in_a_training_graph_equals_eager():
    from train_graph import eager_and_graph_losses, seeded_linear

    x = flow.tensor(np.random.default_rng(10).standard_normal((4, 6)).astype(np.float32))
    make = seeded_linear(6, 5, lr=0.1, seed=11)

    def z_loss(model, t):  # the router z-loss of ST-MoE
        return (flow.logsumexp(model(t), -1) ** 2).mean()

    eager, graph = eager_and_graph_losses(make, z_loss, (x,))
    np.testing.assert_allclose(graph, eager, rtol=1e-5)
