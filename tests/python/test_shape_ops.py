"""Shape ops against NumPy: transpose/permute, cat, split, chunk, narrow, stack, indexing."""

import itertools

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---- transpose / permute ----


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_permute_matches_numpy_for_every_permutation(perm):
    a = rand(2, 3, 4, 5)
    np.testing.assert_array_equal(flow.permute(flow.tensor(a), *perm).numpy(), a.transpose(perm))
    np.testing.assert_array_equal(flow.tensor(a).permute(perm).numpy(), a.transpose(perm))


def test_transpose_swaps_two_dims_including_negative_ones():
    a = rand(3, 40, 70)
    x = flow.tensor(a)
    np.testing.assert_array_equal(flow.transpose(x, 1, 2).numpy(), a.swapaxes(1, 2))
    np.testing.assert_array_equal(x.transpose(0, -1).numpy(), a.swapaxes(0, -1))
    b = rand(5, 7)
    np.testing.assert_array_equal(flow.tensor(b).t().numpy(), b.T)
    np.testing.assert_array_equal(flow.tensor(b).T.numpy(), b.T)


def test_large_transpose_matches_numpy():
    a = rand(513, 301)
    np.testing.assert_array_equal(flow.transpose(flow.tensor(a), 0, 1).numpy(), a.T)


def test_transpose_keeps_integer_and_bool_dtypes():
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    y = flow.permute(flow.tensor(a), 2, 0, 1)
    assert y.dtype == flow.int64
    np.testing.assert_array_equal(y.numpy(), a.transpose(2, 0, 1))
    m = a % 3 == 0
    np.testing.assert_array_equal(flow.tensor(m).permute(1, 2, 0).numpy(), m.transpose(1, 2, 0))


def test_permute_gradient():
    check_gradients(lambda x: flow.permute(x, 2, 0, 1), rand(2, 3, 4, dtype=np.float64))


def test_permute_rejects_repeated_dims():
    x = flow.tensor(rand(2, 3, 4))
    with pytest.raises(ValueError, match=r"perm must be a permutation.*\(2, 3, 4\)"):
        flow.permute(x, 0, 0, 1)
    with pytest.raises(ValueError, match="one entry per axis"):
        flow.permute(x, 0, 1)
    with pytest.raises(IndexError, match="perm entries must be axes"):
        flow.permute(x, 0, 1, 5)
    with pytest.raises(IndexError, match="dimension out of range"):
        flow.transpose(x, 0, 3)


# ---- cat / stack ----


def test_cat_matches_numpy():
    arrays = [rand(2, 3, 4), rand(2, 1, 4), rand(2, 5, 4)]
    tensors = [flow.tensor(a) for a in arrays]
    np.testing.assert_array_equal(flow.cat(tensors, dim=1).numpy(), np.concatenate(arrays, 1))
    np.testing.assert_array_equal(flow.concat(tensors, -2).numpy(), np.concatenate(arrays, 1))
    rows = [rand(1, 4), rand(3, 4)]
    np.testing.assert_array_equal(
        flow.cat([flow.tensor(r) for r in rows]).numpy(), np.concatenate(rows, 0)
    )


def test_cat_gradient():
    check_gradients(
        lambda a, b: flow.cat([a, b], dim=1),
        rand(2, 3, dtype=np.float64),
        rand(2, 2, dtype=np.float64),
    )


def test_cat_rejects_mismatched_shapes():
    a, b = flow.tensor(rand(2, 3)), flow.tensor(rand(3, 3))
    with pytest.raises(ValueError, match=r"inputs\[1\] \(3, 3\) and inputs\[0\] \(2, 3\)"):
        flow.cat([a, b], dim=1)
    with pytest.raises(ValueError, match="non-empty"):
        flow.cat([])


def test_stack_matches_numpy_and_has_gradient():
    arrays = [rand(3, 4) for _ in range(3)]
    tensors = [flow.tensor(a) for a in arrays]
    for dim in (0, 1, 2, -1):
        np.testing.assert_array_equal(
            flow.stack(tensors, dim=dim).numpy(), np.stack(arrays, axis=dim)
        )
    check_gradients(
        lambda a, b: flow.stack([a, b], dim=1),
        rand(2, 3, dtype=np.float64),
        rand(2, 3, dtype=np.float64),
    )
    with pytest.raises(ValueError, match=r"tensors\[1\] \(2, 3\)"):
        flow.stack([tensors[0], flow.tensor(rand(2, 3))])


# ---- split / chunk / narrow ----


def test_split_by_size_and_by_sections_like_torch():
    a = rand(7, 4)
    x = flow.tensor(a)
    parts = flow.split(x, 3)
    assert isinstance(parts, tuple)
    assert [p.shape for p in parts] == [(3, 4), (3, 4), (1, 4)]
    for p, e in zip(parts, np.split(a, [3, 6])):
        np.testing.assert_array_equal(p.numpy(), e)
    parts = x.split([1, 3], dim=1)
    np.testing.assert_array_equal(parts[0].numpy(), a[:, :1])
    np.testing.assert_array_equal(parts[1].numpy(), a[:, 1:])


def test_split_gradient_including_unused_pieces():
    check_gradients(lambda x: flow.split(x, [1, 2, 1], dim=1), rand(3, 4, dtype=np.float64))
    check_gradients(lambda x: flow.split(x, 2, dim=0)[1], rand(4, 3, dtype=np.float64))


def test_split_rejects_sections_that_do_not_sum_to_the_extent():
    x = flow.tensor(rand(3, 4))
    with pytest.raises(ValueError, match=r"sizes must sum to the extent of axis 1 \(4\)"):
        flow.split(x, [1, 2], dim=1)
    with pytest.raises(ValueError, match="split_size must be positive"):
        flow.split(x, 0)


def test_chunk_like_torch():
    a = rand(5, 6)
    parts = flow.chunk(flow.tensor(a), 3, dim=0)
    assert [p.shape for p in parts] == [(2, 6), (2, 6), (1, 6)]
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in parts]), a)
    parts = flow.tensor(a).chunk(4, 1)  # 6 / 4 -> pieces of 2: only 3 pieces, as in torch
    assert [p.shape for p in parts] == [(5, 2), (5, 2), (5, 2)]
    with pytest.raises(ValueError, match="chunks must be positive"):
        flow.chunk(flow.tensor(a), 0)


def test_narrow_matches_numpy_and_has_gradient():
    a = rand(4, 6)
    np.testing.assert_array_equal(flow.narrow(flow.tensor(a), 1, 2, 3).numpy(), a[:, 2:5])
    np.testing.assert_array_equal(flow.tensor(a).narrow(0, -2, 2).numpy(), a[2:4])
    check_gradients(lambda x: flow.narrow(x, 1, 1, 2), rand(3, 4, dtype=np.float64))
    with pytest.raises(ValueError, match="start \\+ length must lie within dim 1 of size 6"):
        flow.narrow(flow.tensor(a), 1, 4, 3)
    with pytest.raises(IndexError, match="start must be in"):
        flow.narrow(flow.tensor(a), 1, 7, 0)


# ---- __getitem__ ----

INDICES = [
    1,
    -1,
    (slice(None), 2),
    (slice(1, None, 2), slice(None, None, 3)),
    (Ellipsis, -2),
    (None, 0, Ellipsis, None),
    (0, None, slice(2, 4), Ellipsis),
    (slice(-3, -1), slice(None), 1),
    (slice(5, 1),),  # empty
    (slice(None, 100),),
    Ellipsis,
    (slice(None), None),
    (1, 2, 3),
    np.int64(2),
]


@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem_matches_numpy(index):
    a = rand(4, 5, 6)
    got = flow.tensor(a)[index]
    np.testing.assert_array_equal(got.numpy(), a[index])
    assert got.shape == a[index].shape


def test_getitem_gradient():
    check_gradients(lambda x: x[1:, None, ::2, -1], rand(3, 5, 4, dtype=np.float64))


def test_getitem_errors():
    x = flow.tensor(rand(4, 5))
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 1 with size 5"):
        x[0, 5]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 0 with size 4"):
        x[-5]
    with pytest.raises(ValueError, match="step must be positive"):
        x[::-1]
    with pytest.raises(TypeError, match="advanced indexing .* not supported"):
        x[flow.tensor([0, 1])]
    with pytest.raises(TypeError, match="advanced indexing .* not supported"):
        x[[0, 1]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
