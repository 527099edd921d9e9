"""The CUDA kernels of the reduction-shaped families (kernels/cuda/reduce.cu, softmax.cu,
layer_norm.cu, rms_norm.cu, rotary.cu, silu in unary.cu, cross_entropy.cu, attention.cu), against
the CPU kernels.

Every test here needs a GPU and is skipped without one, with the driver's reason (CI has none).
The CPU has these kernels for float32 and float64 (and integers for the reduce ops); float16
and bfloat16 (CUDA only) are compared with the CPU's float32 results on the same rounded
values, as test_cuda.py does. Row lengths straddle the kernels' limits: one warp per row up to
1024 elements (1, 31, 32, 33, 1000), one block per row above (1025, 5000), and long rows or
columns cut into pieces and folded in a second pass.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gpus import NEEDS_GPU

pytestmark = NEEDS_GPU

LOW = [flow.float16, flow.bfloat16]
FLOATS = [flow.float32] + LOW
# A 16-bit result may differ from the CPU's float32 result on the same rounded inputs by one
# rounding of the output; float32 by the CPU's float64 accumulation against the GPU's float32
# one (tree-shaped, so a few ulps) and by the two devices' exp and log.
TOLERANCE = {flow.float32: 1e-5, flow.float64: 1e-12, flow.float16: 1e-3, flow.bfloat16: 8e-3}
LENGTHS = [1, 31, 32, 33, 1000, 1025, 5000]


def to_numpy(t):
    return (t.to(flow.float32) if t.dtype in LOW else t).numpy()


def reference_and_cuda(fn, arrays, dtype):
    """fn on CPU tensors and on CUDA tensors, as lists of numpy arrays. Float arrays become
    dtype on the GPU and, on the CPU, float32 holding the dtype-rounded values for the 16-bit
    dtypes; other arrays (labels, integers) go as they are."""
    reference_dtype = flow.float32 if dtype in LOW else dtype

    def cpu(a):
        return flow.tensor(a).to(dtype).to(reference_dtype) if a.dtype.kind == "f" else \
            flow.tensor(a)

    def gpu(a):
        return flow.tensor(a).to(dtype).cuda() if a.dtype.kind == "f" else flow.tensor(a).cuda()

    want = fn(*[cpu(a) for a in arrays])
    got = fn(*[gpu(a) for a in arrays])
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    for g in got:
        assert str(g.device) == "cuda:0" and g.dtype == dtype
    return [w.numpy() for w in want], [to_numpy(g) for g in got]


def check(fn, arrays, dtype, rtol=None, atol=None):
    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype]
    for w, g in zip(want, got):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol if rtol is None else rtol,
                                   atol=tol if atol is None else atol)


# --- reduce_sum, reduce_mean, reduce_max, reduce_min ------------------------------------------

REDUCE = {"sum": _C.reduce_sum, "mean": _C.reduce_mean, "max": _C.reduce_max,
          "min": _C.reduce_min}
# (shape, axes): trailing axes (rows), leading and middle axes (columns), several separate
# groups (the general walk), size-1 axes, a scalar, and all axes.
PATTERNS = ([((5, n), [-1]) for n in LENGTHS] + [((n, 3), [0]) for n in LENGTHS] +
            [((n,), []) for n in LENGTHS] +
            [((3, 1000, 5), [1]), ((4, 33, 2, 31), [1, 3]), ((4, 33, 2, 31), [0, 2]),
             ((2, 3, 4, 5), [0, 1, 3]), ((2, 3, 4, 5), [2, 0]), ((4, 1, 6), [1]),
             ((4, 1, 6), [0, 1]), ((1, 1, 7), [0, 1]), ((), []), ((), [0]), ((6, 7, 8), []),
             ((37, 1), [0]), ((1, 37), [0])])


def integer_valued(rng, shape):
    """Small integers as float32: exact in every dtype and in any order of float32 sums, so a
    misplaced element cannot hide inside the tolerance."""
    return rng.integers(-8, 9, size=shape).astype(np.float32)


def exact_tolerance(dtype):
    """(rtol, atol) for reductions of integer values: sums are exact, a mean is one division
    (rounded once in float32 here, in float64 and then to float32 on the CPU), an extremum is
    one of the inputs; a 16-bit result is the exact one rounded, float16's below 6e-5 to a
    multiple of 6e-8."""
    if dtype == flow.float32:
        return 2e-7, 0
    return TOLERANCE[dtype], 1e-7 if dtype == flow.float16 else 0


def reduced_count(shape, axes):
    if not axes:
        return int(np.prod(shape, dtype=np.int64))
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(REDUCE))
def test_reduce_kernels_match_the_cpu_on_every_axis_pattern(name, dtype):
    rng = np.random.default_rng(0)
    for shape, axes in PATTERNS:
        x = integer_valued(rng, shape)
        for keepdims in (False, True):
            rtol, atol = exact_tolerance(dtype)
            check(lambda t: REDUCE[name](t, axes, keepdims), [x], dtype, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_reduce_kernels_of_random_values_match_the_cpu(dtype):
    rng = np.random.default_rng(1)
    for shape, axes in [((7, 5000), [1]), ((5000, 7), [0]), ((3, 1025, 4), [0, 2]),
                        ((64, 33), [])]:
        x = rng.standard_normal(shape).astype(np.float32)
        count = reduced_count(shape, axes)
        # Sums of N(0, 1) values are about sqrt(count); float32 ones are off by a few ulps.
        scale = np.sqrt(count) * TOLERANCE[dtype]
        check(lambda t: _C.reduce_sum(t, axes, False), [x], dtype, atol=scale)
        check(lambda t: _C.reduce_mean(t, axes, False), [x], dtype, atol=scale / count)
        for fn in (_C.reduce_max, _C.reduce_min):
            check(lambda t: fn(t, axes, False), [x], dtype, rtol=0, atol=0)


def test_long_rows_and_columns_are_cut_into_pieces_and_still_match():
    rng = np.random.default_rng(2)
    # 300000 elements per output (pieces of rows), few columns of many rows (pieces of
    # columns), and the general walk over few outputs (pieces of walked rows).
    for shape, axes in [((1, 300000), [1]), ((3, 100000), [-1]), ((200000, 3), [0]),
                        ((2, 100000, 3), [1]), ((64, 2, 4096), [0, 2]), ((300000,), [])]:
        x = integer_valued(rng, shape)
        for dtype in FLOATS:
            rtol, atol = exact_tolerance(dtype)
            for name, fn in REDUCE.items():
                check(lambda t: fn(t, axes, True), [x], dtype, rtol=rtol, atol=atol)


def test_integer_and_bool_reductions_are_exact():
    rng = np.random.default_rng(3)
    for shape, axes in [((5, 33), [1]), ((1000, 3), [0]), ((4, 33, 2, 31), [1, 3]),
                        ((1, 70000), [])]:
        for np_dtype in (np.int8, np.int32, np.int64):
            x = rng.integers(-100, 100, size=shape).astype(np_dtype)
            for fn in (_C.reduce_sum, _C.reduce_max, _C.reduce_min):
                want = fn(flow.tensor(x), axes, False).numpy()
                got = fn(flow.tensor(x).cuda(), axes, False)
                assert got.dtype == flow.tensor(x).dtype
                np.testing.assert_array_equal(got.numpy(), want)  # int8 sums wrap as on the CPU
        b = rng.random(shape) < 0.02
        for fn in (_C.reduce_max, _C.reduce_min):
            np.testing.assert_array_equal(fn(flow.tensor(b).cuda(), axes, False).numpy(),
                                          fn(flow.tensor(b), axes, False).numpy())
    big = np.full(5000, 2**31 - 7, dtype=np.int64)
    np.testing.assert_array_equal(_C.reduce_sum(flow.tensor(big).cuda(), [], False).numpy(),
                                  big.sum())


def test_nan_wins_extrema_and_empty_reductions_match_the_cpu():
    x = np.arange(2 * 40 * 3, dtype=np.float32).reshape(2, 40, 3)
    x[1, 17, 2] = np.nan
    x[0, 39, 0] = np.nan
    for axes in ([1], [0, 1], [], [2]):
        for fn in (_C.reduce_max, _C.reduce_min):
            np.testing.assert_array_equal(fn(flow.tensor(x).cuda(), axes, False).numpy(),
                                          fn(flow.tensor(x), axes, False).numpy())
    empty = np.zeros((3, 0, 2), dtype=np.float32)
    for fn in (_C.reduce_sum, _C.reduce_mean):
        for axes in ([1], [0, 1]):
            np.testing.assert_array_equal(fn(flow.tensor(empty).cuda(), axes, False).numpy(),
                                          fn(flow.tensor(empty), axes, False).numpy())


def test_reductions_give_the_same_bits_every_run():
    x = flow.tensor(np.random.default_rng(4).standard_normal((3, 70000)).astype(np.float32))
    g = x.cuda()
    for axes in ([1], [0], []):
        first = _C.reduce_sum(g, axes, False).numpy()
        for _ in range(3):
            np.testing.assert_array_equal(_C.reduce_sum(g, axes, False).numpy(), first)


# --- softmax, log_softmax and their gradients -------------------------------------------------

def softmax_cases(rng):
    """(x, axis): rows of every length on the last axis, and lines along other axes."""
    for n in LENGTHS:
        yield rng.standard_normal((4, n)).astype(np.float32) * 3, -1
    yield rng.standard_normal((2, 3, 33)).astype(np.float32), 1
    yield rng.standard_normal((33, 70)).astype(np.float32), 0
    yield rng.standard_normal((5, 1000, 3)).astype(np.float32), 1
    yield rng.standard_normal((2, 1, 5)).astype(np.float32), 1
    yield rng.standard_normal((2, 40, 1)).astype(np.float32), 1
    yield np.array([[1000.0, 1001.0, 1002.0, -1000.0]], dtype=np.float32), -1


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_softmax_and_log_softmax_match_the_cpu(dtype):
    rng = np.random.default_rng(5)
    tol = TOLERANCE[dtype]
    for x, axis in softmax_cases(rng):
        # Probabilities of long rows are small: compare them relative to their size.
        check(lambda t: _C.softmax(t, axis), [x], dtype, rtol=tol, atol=tol * 1e-3)
        check(lambda t: _C.log_softmax(t, axis), [x], dtype, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_softmax_gradients_match_the_cpu(dtype):
    rng = np.random.default_rng(6)
    tol = TOLERANCE[dtype]
    for x, axis in softmax_cases(rng):
        y = _C.softmax(flow.tensor(x), axis).numpy()
        log_y = _C.log_softmax(flow.tensor(x), axis).numpy()
        dy = rng.standard_normal(x.shape).astype(np.float32)
        # y * (dy - sum(dy * y)): the float32 sum's last-bit error, times y, where dy - sum
        # cancels.
        check(lambda a, b: _C.softmax_grad(a, b, axis), [y, dy], dtype, rtol=tol,
              atol=tol * 0.1)
        check(lambda a, b: _C.log_softmax_grad(a, b, axis), [log_y, dy], dtype, rtol=tol,
              atol=tol * np.sqrt(x.shape[axis]))


# --- layer_norm and its gradients -------------------------------------------------------------

def layer_norm_cases(rng):
    """(x, weight, bias, begin_norm_axis)."""
    for n in LENGTHS:
        x = rng.standard_normal((6, n)).astype(np.float32) * 2 + 3
        yield x, rng.standard_normal(n).astype(np.float32), \
            rng.standard_normal(n).astype(np.float32), -1
    x = rng.standard_normal((2, 3, 4, 40)).astype(np.float32)
    yield x, rng.standard_normal((4, 40)).astype(np.float32), \
        rng.standard_normal((4, 40)).astype(np.float32), 2
    x = rng.standard_normal((3000, 37)).astype(np.float32)  # parameter grads in pieces
    yield x, rng.standard_normal(37).astype(np.float32), \
        rng.standard_normal(37).astype(np.float32), 1


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_layer_norm_outputs_and_statistics_match_the_cpu(dtype):
    rng = np.random.default_rng(7)
    for x, w, b, axis in layer_norm_cases(rng):
        check(lambda t, u, v: _C.layer_norm(t, u, v, axis, 1e-5), [x, w, b], dtype)


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_layer_norm_gradients_match_the_cpu(dtype):
    rng = np.random.default_rng(8)
    tol = TOLERANCE[dtype]
    for x, w, b, axis in layer_norm_cases(rng):
        _, mean, inv_std = [t.numpy() for t in _C.layer_norm(flow.tensor(x), flow.tensor(w),
                                                             flow.tensor(b), axis, 1e-5)]
        dy = rng.standard_normal(x.shape).astype(np.float32)
        # dx = inv_std * (...): rows of one element have inv_std = 1/sqrt(eps), which scales up
        # the last-bit differences (a fused multiply-add or not) inside the bracket.
        check(lambda d, t, m, s, u: _C.layer_norm_grad(d, t, m, s, u, axis, 1e-5),
              [dy, x, mean, inv_std, w], dtype, atol=tol * max(1.0, float(inv_std.max())))
        rows = mean.size  # dweight and dbias are sums over the rows: about sqrt(rows)
        check(lambda d, t, m, s: _C.layer_norm_param_grad(d, t, m, s, axis, 1e-5),
              [dy, x, mean, inv_std], dtype, atol=tol * np.sqrt(rows))


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_rms_norm_and_its_gradients_match_the_cpu(dtype):
    rng = np.random.default_rng(10)
    tol = TOLERANCE[dtype]
    for x, w, _, axis in layer_norm_cases(rng):
        check(lambda t, u: _C.rms_norm(t, u, axis, 1e-6), [x, w], dtype)
        _, inv_rms = [t.numpy() for t in _C.rms_norm(flow.tensor(x), flow.tensor(w), axis, 1e-6)]
        dy = rng.standard_normal(x.shape).astype(np.float32)
        check(lambda d, t, r, u: _C.rms_norm_grad(d, t, r, u, axis, 1e-6),
              [dy, x, inv_rms, w], dtype, atol=tol * max(1.0, float(inv_rms.max())))
        check(lambda d, t, r: _C.rms_norm_param_grad(d, t, r, axis, 1e-6), [dy, x, inv_rms],
              dtype, atol=tol * np.sqrt(inv_rms.size))


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_and_silu_match_the_cpu(dtype, interleaved):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 37, 64)).astype(np.float32)
    angles = np.outer(np.arange(37), 10000.0 ** (-np.arange(0, 64, 2) / 64))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    for inverse in (False, True):
        check(lambda t, c, s_: _C.rotary_embedding(t, c, s_, -2, interleaved, inverse),
              [x, cos, sin], dtype)
    check(lambda t: _C.silu(t), [x], dtype)
    check(lambda t, d: _C.silu_grad(t, d), [x, rng.standard_normal(x.shape).astype(np.float32)],
          dtype)


def test_layer_norm_parameter_gradients_give_the_same_bits_every_run():
    rng = np.random.default_rng(9)
    dy, x = [flow.tensor(rng.standard_normal((4096, 96)).astype(np.float32)).cuda()
             for _ in range(2)]
    _, mean, inv_std = _C.layer_norm(x, flow.ones(96).cuda(), flow.zeros(96).cuda(), 1, 1e-5)
    first = [t.numpy() for t in _C.layer_norm_param_grad(dy, x, mean, inv_std, 1, 1e-5)]
    for _ in range(3):
        again = [t.numpy() for t in _C.layer_norm_param_grad(dy, x, mean, inv_std, 1, 1e-5)]
        for a, f in zip(again, first):
            np.testing.assert_array_equal(a, f)


# --- sparse_softmax_cross_entropy and its gradient --------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + [flow.float64])
def test_cross_entropy_and_its_gradient_match_the_cpu(dtype):
    rng = np.random.default_rng(10)
    tol = TOLERANCE[dtype]
    for classes in LENGTHS:
        for sample_shape in [(7,), (2, 3), (1,)]:
            x = (rng.standard_normal(sample_shape + (classes,)) * 3).astype(np.float32)
            dloss = rng.standard_normal(sample_shape).astype(np.float32)
            for label_dtype in (np.int32, np.int64):
                labels = rng.integers(0, classes, size=sample_shape).astype(label_dtype)
                check(_C.sparse_softmax_cross_entropy, [x, labels], dtype)
                check(_C.sparse_softmax_cross_entropy_grad, [x, labels, dloss], dtype, rtol=tol,
                      atol=tol * 1e-2)


def test_out_of_range_label_prints_and_fails_the_device():
    # The kernel traps (Note [Labels checked on the device] in kernels/cuda/cross_entropy.cu),
    # which leaves the device unusable for the process: run it in a process of its own.
    script = textwrap.dedent("""
        import numpy as np
        import oneflowlike as flow
        from oneflowlike import _C
        x = flow.tensor(np.zeros((4, 10), dtype=np.float32)).cuda()
        labels = flow.tensor(np.array([1, 2, 10, 3], dtype=np.int64)).cuda()
        try:
            _C.sparse_softmax_cross_entropy(x, labels).numpy()
        except Exception as e:
            print("RAISED", type(e).__name__, e)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    out = run.stdout + run.stderr
    assert "RAISED" in out, out
    assert ("[sparse_softmax_cross_entropy] every label must be in [0, C) with C = 10 classes. "
            "However, got label 10 at position 2.") in out, out


# --- fused attention (kernels/cuda/attention.cu) -------------------------------------------------

ATTENTION_CASES = [  # (q shape, kv shape, causal, mask shape)
    ((2, 3, 17, 8), (2, 3, 17, 8), True, None),
    ((1, 2, 70, 64), (1, 2, 150, 64), False, None),
    ((2, 4, 9, 16), (2, 2, 9, 16), True, None),  # grouped-query heads
    ((2, 3, 5, 8), (2, 3, 7, 8), False, (2, 1, 1, 7)),
]


@pytest.mark.parametrize("dtype", FLOATS + [flow.float64], ids=str)
@pytest.mark.parametrize("q_shape,kv_shape,causal,mask_shape", ATTENTION_CASES)
def test_attention_forward_and_backward_match_the_cpu(dtype, q_shape, kv_shape, causal,
                                                       mask_shape):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (q_shape, kv_shape, kv_shape)]
    arrays.append(rng.standard_normal(q_shape[:3] + (kv_shape[3],)).astype(np.float32))
    if mask_shape is not None:
        arrays.append(rng.standard_normal(mask_shape).astype(np.float32))
    if dtype == flow.float64:
        arrays = [a.astype(np.float64) for a in arrays]

    def fn(q, k, v, dout, *mask):
        m = mask[0] if mask else None
        out, lse = _C.scaled_dot_product_attention(q, k, v, m, 0.3, causal)
        # lse is float32 for the 16-bit dtypes; compared in the inputs' dtype like the rest.
        return [out, lse.to(out.dtype),
                *_C.scaled_dot_product_attention_grad(dout, q, k, v, out, lse, m, 0.3, causal)]

    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype] * (4 if dtype in LOW else 10)  # sums over keys and queries
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# Note [Sequence-first attention]: (B, L, H, E) operands, staged through (B, H, L, E) scratch
# on the GPU, against the CPU kernels reading them at their strides.
@pytest.mark.parametrize("dtype", [flow.float32, flow.bfloat16], ids=str)
@pytest.mark.parametrize("q_shape,kv_shape,causal,mask_shape", ATTENTION_CASES)
def test_sequence_first_attention_matches_the_cpu(dtype, q_shape, kv_shape, causal, mask_shape):
    def swapped(shape):
        return (shape[0], shape[2], shape[1], shape[3])

    rng = np.random.default_rng(4)
    shapes = [swapped(q_shape), swapped(kv_shape), swapped(kv_shape),
              swapped(q_shape[:3] + (kv_shape[3],))]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if mask_shape is not None:
        arrays.append(rng.standard_normal(mask_shape).astype(np.float32))

    def fn(q, k, v, dout, *mask):
        m = mask[0] if mask else None
        out, lse = _C.scaled_dot_product_attention(q, k, v, m, 0.3, causal, True)
        return [out, lse.to(out.dtype),
                *_C.scaled_dot_product_attention_grad(dout, q, k, v, out, lse, m, 0.3, causal,
                                                      True)]

    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype] * (4 if dtype in LOW else 10)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# Note [Zigzag order]: q, k and v stored in the zigzag order over 2 and 3 pieces; the CUDA
# kernel hides key j from query i by both rows' positions, the CPU's walks the keys in the
# sequence's order. With a window of 20 keys too (Note [Sliding window]), and the window in the
# sequence's order (zigzag 1).
@pytest.mark.parametrize("dtype", [flow.float32, flow.bfloat16], ids=str)
@pytest.mark.parametrize("zigzag", [1, 2, 3])
@pytest.mark.parametrize("window", [0, 20], ids=lambda w: f"window{w}")
def test_zigzag_attention_matches_the_cpu(dtype, zigzag, window):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((2, 4, 72, 16), (2, 2, 72, 16), (2, 2, 72, 16), (2, 4, 72, 16))]

    def fn(q, k, v, dout):
        out, lse = _C.scaled_dot_product_attention(q, k, v, None, 0.3, True, zigzag=zigzag,
                                                   window=window)
        return [out, lse.to(out.dtype),
                *_C.scaled_dot_product_attention_grad(dout, q, k, v, out, lse, None, 0.3, True,
                                                      zigzag=zigzag, window=window)]

    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype] * (4 if dtype in LOW else 10)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# Note [Packed documents]: document ids (int64 and int32, packed and repeating), causal in the
# zigzag order with and without a window, and not causal; the CUDA kernel hides the keys of
# other documents by both rows' ids, the CPU's also skip the tiles whose ids do not meet.
@pytest.mark.parametrize("dtype", [flow.float32, flow.bfloat16], ids=str)
@pytest.mark.parametrize("kind", ["causal", "window", "not_causal", "int32"])
def test_document_attention_matches_the_cpu(dtype, kind):
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((2, 4, 72, 16), (2, 2, 72, 16), (2, 2, 72, 16), (2, 4, 72, 16))]
    packed = np.repeat([0, 1, 2, 3], [20, 3, 30, 19])
    ids = np.stack([packed, (np.arange(72) // 9) % 2])
    arrays.append(ids.astype(np.int32 if kind == "int32" else np.int64))
    causal, window, zigzag = kind != "not_causal", 7 if kind == "window" else 0, 0
    if causal:
        zigzag = 2  # the rows stored in that order: the ids too, as they come

    def fn(q, k, v, dout, docs):
        args = {"zigzag": zigzag, "window": window, "document_ids": docs}
        out, lse = _C.scaled_dot_product_attention(q, k, v, None, 0.3, causal, **args)
        return [out, lse.to(out.dtype),
                *_C.scaled_dot_product_attention_grad(dout, q, k, v, out, lse, None, 0.3, causal,
                                                      **args)]

    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype] * (4 if dtype in LOW else 10)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
