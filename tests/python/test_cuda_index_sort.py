"""The CUDA kernels of the index ops (kernels/cuda/index_ops.cu, embedding's slice kernels in
index_slices.cuh), of the orders (kernels/cuda/sort.cu) and of the running sums
(kernels/cuda/scan.cu) against the CPU kernels.

Every test here needs a GPU and is skipped without one (CI has none). Gathers and orders move
values, so they must be equal bit for bit (ties and NaN included: Note [Orders and ties]); the
scatter-adds sum in index order on both devices (float32 for the 16-bit dtypes), so they are
equal too, and so are the running sums (double on both, Note [Running sums]). Line
lengths straddle the warp/block limit of the max/min reductions (1024).
"""

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gpus import NEEDS_GPU

pytestmark = NEEDS_GPU

DTYPES = [flow.float32, flow.float64, flow.float16, flow.bfloat16, flow.int64]


def values(shape, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 4
    x = np.round(x)  # ties
    x.flat[::7] = np.nan
    if dtype == flow.int64:
        x = np.nan_to_num(x, nan=9.0)
    return flow.tensor(x).to(dtype)


def same(fn, *tensors):
    want = fn(*tensors)
    got = fn(*[t.cuda() for t in tensors])
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    for w, g in zip(want, got):
        assert str(g.device) == "cuda:0" and g.dtype == w.dtype
        a = w.to(flow.float64) if w.dtype in (flow.float16, flow.bfloat16) else w
        b = g.cpu().to(flow.float64) if g.dtype in (flow.float16, flow.bfloat16) else g.cpu()
        np.testing.assert_array_equal(b.numpy(), a.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [1, 33, 1000, 1025, 3000])
def test_max_min_topk_sort_equal_the_cpu(dtype, length):
    x = values((3, length, 2), dtype)
    for dim in (1, -1, 0):
        same(lambda t: flow.max(t, dim), x)
        same(lambda t: flow.min(t, dim, keepdim=True), x)
        same(lambda t: flow.sort(t, dim, descending=True), x)
        same(lambda t: flow.sort(t, dim), x)
        same(lambda t: flow.topk(t, 1, dim, largest=False), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_index_select_and_their_gradients_equal_the_cpu(dtype):
    x = values((4, 300, 5), dtype, seed=1)
    index = flow.tensor(np.random.default_rng(2).integers(0, 300, size=(3, 700, 5)))
    select = flow.tensor(np.random.default_rng(3).integers(0, 300, size=(900,)))
    same(lambda t, i: flow.gather(t, 1, i), x, index)
    same(lambda t, i: flow.index_select(t, 1, i), x, select)
    if dtype == flow.int64:
        return
    dy = values((3, 700, 5), dtype, seed=4)
    same(lambda d, i: _C.gather_grad(d, i, 1, (4, 300, 5)), dy, index)
    dz = values((4, 900, 5), dtype, seed=5)
    same(lambda d, i: _C.index_select_grad(d, i, 1, (4, 300, 5)), dz, select)


@pytest.mark.parametrize("dtype", DTYPES + [flow.int32])
def test_cumsum_both_ways_equals_the_cpu(dtype):
    x = values((3, 1500, 4), dtype, seed=4)
    if dtype == flow.int32:
        x = flow.tensor(np.random.default_rng(5).integers(-9, 9, size=(3, 1500, 4))).to(dtype)
    for dim in (1, -1, 0):
        same(lambda t: _C.cumsum(t, dim), x)
        same(lambda t: _C.cumsum(t, dim, True), x)  # the gradient's direction
