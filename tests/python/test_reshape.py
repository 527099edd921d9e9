import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients


def test_reshape_view_flatten_squeeze_unsqueeze():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = flow.tensor(a)
    np.testing.assert_array_equal(t.reshape(6, -1).numpy(), a.reshape(6, 4))
    np.testing.assert_array_equal(t.view((4, 6)).numpy(), a.reshape(4, 6))
    assert t.reshape(-1)._shares_storage_with(t)
    assert flow.flatten(t, 1).shape == (2, 12)
    assert t.unsqueeze(0).shape == (1, 2, 3, 4)
    assert t.unsqueeze(-1).shape == (2, 3, 4, 1)
    assert t.unsqueeze(1).squeeze(1).shape == (2, 3, 4)
    assert flow.squeeze(flow.zeros(1, 3, 1)).shape == (3,)
    np.testing.assert_array_equal(flow.tensor([[1.0], [2.0]]).expand(2, 3).numpy(),
                                  [[1, 1, 1], [2, 2, 2]])


def test_gradients():
    a = np.random.default_rng(0).standard_normal((2, 3))
    check_gradients(lambda x: x.reshape(3, 2) * flow.tensor([[1.0, 2.0]], dtype=flow.float64), a)
    check_gradients(lambda x: x.unsqueeze(0).expand(4, 2, 3), a)


def test_bad_reshape_is_value_error_naming_shapes():
    with pytest.raises(ValueError, match=r"\[reshape\].*\(4, -1\)"):
        flow.zeros(2, 3).reshape(4, -1)
    with pytest.raises(IndexError, match="unsqueeze"):
        flow.zeros(2).unsqueeze(3)
