import numpy as np
import pytest

import oneflowlike as flow


def test_zeros_ones_full_like():
    assert flow.zeros(2, 3).shape == (2, 3)
    assert flow.zeros((2, 3)).dtype == flow.float32
    np.testing.assert_array_equal(flow.ones(2, dtype=flow.int32).numpy(), [1, 1])
    np.testing.assert_array_equal(flow.full((2,), 7).numpy(), [7, 7])
    assert flow.full((2,), 7).dtype == flow.int64
    x = flow.tensor([[1.0, 2.0]])
    assert flow.zeros_like(x).shape == (1, 2)
    np.testing.assert_array_equal(flow.ones_like(x).numpy(), [[1, 1]])
    assert flow.zeros(2, requires_grad=True).requires_grad


def test_arange_like_torch():
    np.testing.assert_array_equal(flow.arange(5).numpy(), np.arange(5))
    assert flow.arange(5).dtype == flow.int64
    np.testing.assert_allclose(flow.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert flow.arange(0, 1, 0.25).dtype == flow.float32
    with pytest.raises(ValueError, match="step must be non-zero"):
        flow.arange(0, 1, 0)


def test_to_and_dtype_methods():
    x = flow.tensor([1.7, -2.2])
    assert x.to(flow.float64).dtype == flow.float64
    np.testing.assert_array_equal(x.long().numpy(), [1, -2])
    assert x.half().dtype == flow.float16
    np.testing.assert_allclose(x.to(flow.bfloat16).float().numpy(), [1.703125, -2.203125])
    if not flow.cuda.is_available():  # with a GPU: tests/python/test_cuda.py
        with pytest.raises(RuntimeError, match=r"\[to\] device cuda:0 needs a CUDA device. "
                                               r"However, there is none: "):
            x.to("cuda:0")


# ---- linspace (issue 14) -----------------------------------------------------------------------
@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-3.5, 2.25, 7), (2, 2, 3), (1, 0, 4),
                                             (0, 10, 1), (0, 10, 0)])
def test_linspace_matches_torch(start, end, steps):
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(flow.linspace(start, end, steps).numpy(),
                               torch.linspace(start, end, steps).numpy(), rtol=1e-6, atol=1e-6)
    assert flow.linspace(0, 4, 5, dtype=flow.int64).numpy().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match=r"\[linspace\] steps must be an int >= 0"):
        flow.linspace(0, 1, -1)
