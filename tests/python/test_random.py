import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gradcheck import check_gradients

M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """Reference Philox4x32-10 on Python ints (Salmon et al. 2011)."""
    c = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return c


def reference_uniform32(seed, offset, index):
    counter = (offset + index) & ((1 << 64) - 1)
    block = philox4x32_10([counter & M32, counter >> 32, 0, 0], [seed & M32, seed >> 32])
    return (block[0] >> 8) * 2.0**-24


def reference_uniform64(seed, offset, index):
    counter = (offset + index) & ((1 << 64) - 1)
    block = philox4x32_10([counter & M32, counter >> 32, 0, 0], [seed & M32, seed >> 32])
    return ((block[0] << 21) | (block[1] >> 11)) * 2.0**-53


def test_reference_philox_matches_known_answer():
    assert philox4x32_10([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_random_uniform_op_matches_reference_philox():
    y = _C.random_uniform((2, 5), flow.float32, 0.0, 1.0, 77, 1000).numpy()
    expected = np.array([reference_uniform32(77, 1000, i) for i in range(10)]).reshape(2, 5)
    np.testing.assert_array_equal(y, expected.astype(np.float32))
    y64 = _C.random_uniform((7,), flow.float64, -1.0, 1.0, 5, 3).numpy()
    expected64 = np.array([-1.0 + 2.0 * reference_uniform64(5, 3, i) for i in range(7)])
    np.testing.assert_allclose(y64, expected64, rtol=0, atol=1e-15)


def test_manual_seed_makes_draws_reproducible():
    flow.manual_seed(2024)
    assert flow.initial_seed() == 2024
    a = flow.randn(3, 4).numpy()
    b = flow.rand(5, dtype=flow.float64).numpy()
    flow.manual_seed(2024)
    np.testing.assert_array_equal(flow.randn((3, 4)).numpy(), a)
    np.testing.assert_array_equal(flow.rand(5, dtype=flow.float64).numpy(), b)
    assert not np.array_equal(flow.randn(3, 4).numpy(), a)  # fresh counters


def test_manual_seed_accepts_torch_range_and_rejects_others():
    flow.manual_seed(-1)
    assert flow.initial_seed() == 2**64 - 1
    flow.manual_seed(2**64 - 1)
    with pytest.raises(TypeError, match="seed must be an int"):
        flow.manual_seed(1.5)
    with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*64\)"):
        flow.manual_seed(2**64)


def test_shapes_dtypes_and_requires_grad():
    assert flow.randn(2, 3).shape == (2, 3)
    assert flow.randn((2, 3)).shape == (2, 3)
    assert flow.rand([4]).shape == (4,)
    assert flow.randn(2, 3).dtype == flow.float32
    assert flow.rand(2, dtype=flow.float64).dtype == flow.float64
    assert flow.randn().shape == ()
    t = flow.randn(2, 2, requires_grad=True)
    assert t.requires_grad and t.is_leaf
    like = flow.randn_like(flow.zeros(3, 2, dtype=flow.float64))
    assert like.shape == (3, 2) and like.dtype == flow.float64
    assert flow.rand_like(like).shape == (3, 2)


def test_randn_has_standard_normal_statistics():
    flow.manual_seed(0)
    for dtype in (flow.float32, flow.float64):
        x = flow.randn(200000, dtype=dtype).numpy().astype(np.float64)
        assert np.all(np.isfinite(x))
        assert abs(x.mean()) < 0.015  # 5 standard errors
        assert abs(x.std() - 1.0) < 0.01
        assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.01
        assert abs(np.mean(x > 1.96) - 0.025) < 0.003


def test_normal_uses_mean_and_std():
    flow.manual_seed(1)
    x = flow.normal(3.0, 0.5, (100000,)).numpy().astype(np.float64)
    assert abs(x.mean() - 3.0) < 0.01
    assert abs(x.std() - 0.5) < 0.01
    assert flow.normal(0.0, 1.0, 4).shape == (4,)


def test_rand_lies_in_unit_interval_and_is_uniform():
    flow.manual_seed(3)
    for dtype in (flow.float32, flow.float64):
        x = flow.rand(100000, dtype=dtype).numpy().astype(np.float64)
        assert x.min() >= 0.0 and x.max() < 1.0
        assert x.min() < 0.001 and x.max() > 0.999
        assert abs(x.mean() - 0.5) < 0.005
        hist, _ = np.histogram(x, bins=10, range=(0.0, 1.0))
        assert np.all(np.abs(hist / len(x) - 0.1) < 0.005)


def test_dropout_keeps_expected_fraction_and_scales():
    flow.manual_seed(4)
    p = 0.3
    x = flow.tensor(np.full((200, 500), 2.0, dtype=np.float32))
    y = flow.nn.functional.dropout(x, p=p).numpy()
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(y[kept], 2.0 / (1 - p), rtol=1e-6)


def test_dropout_mask_matches_reference_philox():
    x = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    y = _C.dropout_with_seed(flow.tensor(x), 0.5, 9, 40).numpy()
    mask = np.array([reference_uniform64(9, 40, i) >= 0.5 for i in range(12)]).reshape(3, 4)
    np.testing.assert_allclose(y, np.where(mask, x / 0.5, 0.0), rtol=1e-15)


def test_dropout_identity_cases_and_p_one():
    x = flow.randn(4, 5)
    np.testing.assert_array_equal(flow.nn.functional.dropout(x, 0.5, training=False).numpy(),
                                  x.numpy())
    np.testing.assert_array_equal(flow.nn.functional.dropout(x, 0.0).numpy(), x.numpy())
    np.testing.assert_array_equal(flow.nn.functional.dropout(x, 1.0).numpy(), np.zeros((4, 5)))


def test_dropout_gradient_is_mask_over_keep_probability():
    p = 0.4
    x = flow.tensor(np.random.default_rng(0).uniform(0.5, 1.5, (6, 7)), requires_grad=True)
    y = flow.nn.functional.dropout(x, p)
    y.backward(flow.tensor(np.ones((6, 7))))
    expected = np.where(y.numpy() != 0, 1.0 / (1 - p), 0.0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_dropout_gradcheck_with_fixed_seed():
    x = np.random.default_rng(1).standard_normal((3, 5))
    check_gradients(lambda t: _C.dropout_with_seed(t, 0.35, 17, 5), x)


def test_dropout_rejects_bad_probability_and_integer_input():
    x = flow.randn(2, 3)
    with pytest.raises(ValueError, match=r"\[dropout\] p must be a probability in \[0, 1\]"):
        flow.nn.functional.dropout(x, 1.5)
    with pytest.raises(ValueError, match="However, got p=-0.1"):
        flow.nn.functional.dropout(x, -0.1, training=False)
    with pytest.raises(TypeError, match=r"x must have a floating dtype\. However, got x \(3,\) int64"):
        flow.nn.functional.dropout(flow.tensor([1, 2, 3]), 0.5)


def test_random_ops_reject_bad_arguments():
    with pytest.raises(TypeError, match="dtype must be floating"):
        flow.randn(2, dtype=flow.int64)
    with pytest.raises(TypeError, match=r"\[random_normal\] dtype must be floating"):
        _C.random_normal((2,), flow.int32, 0.0, 1.0, 0, 0)
    with pytest.raises(ValueError, match="std finite and non-negative"):
        flow.normal(0.0, -1.0, (3,))
    with pytest.raises(ValueError, match="non-negative extents"):
        flow.randn(2, -3)
    with pytest.raises(ValueError, match="low <= high"):
        _C.uniform(1.0, 0.0, (2,))
    with pytest.raises(TypeError, match="tensor mean is not supported"):
        flow.normal(flow.zeros(2), 1.0, (2,))


# Note [16-bit random values]: the float32 draw rounded to nearest, as torch draws in float and
# rounds; a uniform value that rounds up to high becomes the largest 16-bit value below it.
@pytest.mark.parametrize("dtype", [flow.bfloat16, flow.float16])
def test_16_bit_draws_are_the_float32_draws_rounded(dtype):
    flow.manual_seed(3)
    got = flow.randn(64, 1000, dtype=dtype)
    flow.manual_seed(3)
    want = flow.randn(64, 1000).to(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    for low, high in [(0.0, 1.0), (-2.0, 3.0)]:
        flow.manual_seed(4)
        u = _C.uniform(low, high, (200000,), dtype).float().numpy()
        flow.manual_seed(4)
        w = _C.uniform(low, high, (200000,)).to(dtype).float().numpy()
        rounded_up = w >= high
        assert rounded_up.any()  # some float32 draws round up to high in 16 bits
        assert u.max() < high and u.min() >= low
        np.testing.assert_array_equal(u[~rounded_up], w[~rounded_up])
        assert len(set(u[rounded_up].tolist())) == 1  # all the largest value below high


# ---- randint (issue 14) ------------------------------------------------------------------------
def test_randint_is_uniform_in_its_range_and_reproducible():
    flow.manual_seed(11)
    a = flow.randint(3, 10, (20000,))
    assert a.dtype == flow.int64 and a.shape == (20000,)
    values = a.numpy()
    assert values.min() == 3 and values.max() == 9
    counts = np.bincount(values - 3, minlength=7)
    assert np.all(np.abs(counts / 20000 - 1 / 7) < 0.01), counts
    flow.manual_seed(11)
    np.testing.assert_array_equal(flow.randint(3, 10, (20000,)).numpy(), values)
    assert flow.randint(5, (2, 3)).shape == (2, 3)
    assert flow.randint(5, 7, (4,), dtype=flow.int32).dtype == flow.int32


def test_randint_gives_each_rank_its_piece_of_the_same_values():
    placement = flow.placement("cpu", ranks=[0])
    flow.manual_seed(2)
    whole = flow.randint(0, 100, (6, 4)).numpy()
    flow.manual_seed(2)
    split = flow.randint(0, 100, (6, 4), placement=placement, sbp=flow.sbp.split(1))
    np.testing.assert_array_equal(split.numpy(), whole)


def test_randint_errors():
    with pytest.raises(ValueError, match=r"\[randint\] needs low < high"):
        flow.randint(5, 5, (2,))
    with pytest.raises(TypeError, match=r"\[randint\] needs high and size"):
        flow.randint(5)
    with pytest.raises(TypeError, match=r"\[randint\] low must be an int"):
        flow.randint(0.5, 3, (2,))


def test_randint_forms_and_bounds():
    assert flow.randint(10, size=(3,)).shape == (3,)
    assert flow.randint(3, (2,)).shape == (2,)
    with pytest.raises(ValueError, match=r"\[randint\] values in \[0, 300\) do not fit "
                                         r"oneflowlike.int8"):
        flow.randint(0, 300, (2,), dtype=flow.int8)
    with pytest.raises(ValueError, match=r"must lie within \[-2\*\*53, 2\*\*53\]"):
        flow.randint(2 ** 60, 2 ** 60 + 5, (2,))


# ---- multinomial (Note [Gumbel sampling] in ops/sampling.py) -----------------------------------


def test_multinomial_draws_follow_the_weights():
    flow.manual_seed(0)
    weights = np.array([1.0, 2.0, 0.0, 5.0, 2.0])
    n = 40000
    draws = flow.multinomial(flow.tensor(np.tile(weights, (n, 1))), 1).numpy()
    assert draws.shape == (n, 1) and draws.dtype == np.int64
    freq = np.bincount(draws.ravel(), minlength=5) / n
    p = weights / weights.sum()
    # Four standard deviations of each frequency; a zero weight is never drawn.
    np.testing.assert_array_less(np.abs(freq - p), 4 * np.sqrt(p * (1 - p) / n) + 1e-12)
    assert freq[2] == 0


def test_multinomial_without_replacement_draws_distinct_indices_in_weight_order():
    flow.manual_seed(1)
    weights = flow.tensor(np.tile([4.0, 1.0, 0.0, 2.0], (5000, 1)))
    draws = flow.multinomial(weights, 3).numpy()
    assert all(sorted(row) == [0, 1, 3] for row in draws)  # every positive weight, once
    first = np.bincount(draws[:, 0], minlength=4) / len(draws)
    np.testing.assert_allclose(first, [4 / 7, 1 / 7, 0, 2 / 7], atol=0.03)
    flow.manual_seed(1)
    np.testing.assert_array_equal(flow.multinomial(weights, 3).numpy(), draws)
    with_replacement = flow.multinomial(flow.tensor([0.0, 1.0]), 6, replacement=True)
    np.testing.assert_array_equal(with_replacement.numpy(), [1] * 6)


def test_multinomial_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match=r"finite and non-negative"):
        flow.multinomial(flow.tensor([0.5, -0.1]), 1)
    with pytest.raises(ValueError, match=r"finite and non-negative"):
        flow.multinomial(flow.tensor([0.5, float("nan")]), 1)
    with pytest.raises(ValueError, match=r"every row needs a positive weight"):
        flow.multinomial(flow.tensor([[1.0, 0.0], [0.0, 0.0]]), 1)
    with pytest.raises(ValueError, match=r"only 1 positive weights"):
        flow.multinomial(flow.tensor([1.0, 0.0, 0.0]), 2)
    with pytest.raises(ValueError, match=r"cannot draw 4 of 3 categories"):
        flow.multinomial(flow.tensor([1.0, 1.0, 1.0]), 4)
    with pytest.raises(TypeError, match=r"takes floating weights"):
        flow.multinomial(flow.tensor([1, 2]), 1)
    with pytest.raises(ValueError, match=r"shape \(C,\) or \(N, C\)"):
        flow.multinomial(flow.ones(2, 2, 2), 1)
