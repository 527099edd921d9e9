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


def test_gradients():
    a = np.random.default_rng(1).standard_normal((3, 4))
    check_gradients(lambda x: x.sum(1), a)
    check_gradients(lambda x: x.mean((0, 1), keepdim=True), a)
    check_gradients(lambda x: flow.amax(x, 0), a)


def test_max_with_dim_says_what_to_use_instead():
    with pytest.raises(NotImplementedError, match="amax"):
        flow.max(flow.tensor([1.0]), 0)
    assert flow.max(flow.tensor([1.0, 5.0, 2.0])).item() == 5.0


def test_bad_dim_is_index_error():
    with pytest.raises(IndexError, match=r"\[reduce_sum\] dimension out of range"):
        flow.sum(flow.tensor([1.0, 2.0]), 2)
