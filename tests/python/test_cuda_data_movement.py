"""The CUDA kernels that move elements (shape ops, expand, where, masked_fill, embedding, fill,
arange) and the vectorised paths of the elementwise ones (issue 15), against the CPU kernels.

Moving elements is exact, so these compare bit for bit in every registered dtype; embedding_grad
sums in the CPU's order and is exact in float32 too. Every test needs a GPU and is skipped without
one (CI has none). docs/cuda.md says which of these have run on a GPU.
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
# Every dtype the shape ops, expand, where and masked_fill have kernels for.
ALL = [flow.float32, flow.float64, flow.float16, flow.bfloat16, flow.int8, flow.int32,
       flow.int64, flow.bool]
# What a 16-bit result may differ by from float32 math on the same rounded inputs (test_cuda.py).
TOLERANCE = {flow.float32: 2e-6, flow.float16: 1e-3, flow.bfloat16: 8e-3}


def values(shape, dtype, seed=0):
    """A CPU tensor of `dtype` with distinct-looking values (small integers for int8, both
    values for bool)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 50
    if dtype == flow.bool:
        return flow.tensor(a > 0)
    if dtype == flow.int8:
        return flow.tensor(np.clip(a, -128, 127).astype(np.int8))
    if dtype in (flow.int32, flow.int64):
        return flow.tensor(a.astype(np.int64)).to(dtype)
    return flow.tensor(a.astype(np.float32)).to(dtype)


def as_numpy(t):
    return t.to(flow.float32).numpy() if t.dtype in LOW else t.numpy()


def same_on_both(fn, *tensors):
    """fn on the CPU tensors and on their CUDA copies gives the same dtype, shape and bits."""
    want = fn(*tensors)
    got = fn(*[t.cuda() for t in tensors])
    want_list = list(want) if isinstance(want, (tuple, list)) else [want]
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got_list) == len(want_list)
    for w, g in zip(want_list, got_list):
        assert str(g.device) == "cuda:0"
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(as_numpy(g), as_numpy(w))


# ---- transpose ----

@pytest.mark.parametrize("dtype", ALL)
def test_transpose_matches_the_cpu_for_every_kind_of_permutation(dtype):
    cases = [
        ((5, 7), (1, 0)),              # a 2-d swap: the tiled kernel
        ((33, 65), (1, 0)),            # tiles with ragged edges
        ((1, 1), (1, 0)),
        ((1, 9), (1, 0)),              # a size-1 axis: coalesces to a plain copy
        ((257, 1031), (1, 0)),         # many tiles
        ((2, 3, 40, 33), (0, 1, 3, 2)),  # batched last-two swap
        ((3, 1, 4, 5), (0, 2, 1, 3)),  # contiguous rows: the strided gather
        ((2, 3, 4), (2, 1, 0)),        # stride-1 axis first, a middle axis between
        ((2, 3, 4), (1, 2, 0)),
        ((2, 3, 4), (2, 0, 1)),
        ((2, 3, 4), (0, 1, 2)),        # identity
        ((4, 1000, 3), (0, 2, 1)),
        ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
        ((0, 3), (1, 0)),              # empty
        ((), ()),                      # 0-d
    ]
    for shape, perm in cases:
        x = values(shape, dtype)
        same_on_both(lambda t: _C.transpose(t, list(perm)), x)


# ---- slice and slice_grad ----

SLICES = [  # shape, start, stop, step
    ((10,), [0], [10], [1]),
    ((10,), [3], [10], [3]),
    ((10,), [4], [4], [1]),                      # empty
    ((7, 9), [1, 0], [6, 9], [2, 1]),
    ((7, 9), [0, 2], [7, 8], [1, 3]),
    ((4, 5, 6), [1, 1, 1], [4, 5, 6], [1, 2, 5]),
    ((3, 1, 1000), [0, 0, 13], [3, 1, 1000], [1, 1, 1]),
    ((2, 3, 4, 5), [1, 0, 2, 0], [2, 3, 3, 5], [1, 2, 1, 4]),
]


@pytest.mark.parametrize("dtype", ALL)
def test_slice_and_slice_grad_match_the_cpu(dtype):
    for shape, start, stop, step in SLICES:
        x = values(shape, dtype)
        same_on_both(lambda t: _C.slice(t, start, stop, step), x)
        dy = _C.slice(values(shape, dtype, seed=1), start, stop, step)
        same_on_both(lambda t: _C.slice_grad(t, shape, start, stop, step), dy)


def test_basic_indexing_on_a_cuda_tensor_matches_the_cpu():
    x = values((6, 7, 8), flow.float32)
    same_on_both(lambda t: t[1:5:2, ::3, -1], x)
    same_on_both(lambda t: t[..., 2:7], x)


# ---- concat and split ----

@pytest.mark.parametrize("dtype", ALL)
def test_concat_matches_the_cpu_along_every_axis(dtype):
    for shapes, axis in [
        ([(2, 3), (4, 3), (1, 3)], 0),
        ([(2, 3), (2, 1), (2, 5)], 1),
        ([(2, 3), (2, 0), (2, 5)], -1),           # an empty piece
        ([(3, 2, 5), (3, 7, 5)], 1),
        ([(1,), (1,), (1,)], 0),
        ([(4, 8), (4, 16)], 1),                   # 16-byte rows for 4-byte types
        ([(2, 3, 1)] * 40, 2),                    # more pieces than one launch takes
    ]:
        pieces = [values(s, dtype, seed=k) for k, s in enumerate(shapes)]
        same_on_both(lambda *ts: _C.concat(list(ts), axis), *pieces)


@pytest.mark.parametrize("dtype", ALL)
def test_split_matches_the_cpu_along_every_axis(dtype):
    for shape, axis, sizes in [
        ((7, 3), 0, [2, 4, 1]),
        ((2, 9), 1, [3, 0, 6]),
        ((3, 5, 4), 1, [1, 1, 1, 1, 1]),
        ((4, 32), 1, [8, 24]),
        ((2, 40), 1, [1] * 40),                   # more pieces than one launch takes
    ]:
        x = values(shape, dtype)
        same_on_both(lambda t: _C.split(t, axis, sizes), x)


def test_cat_and_split_through_the_python_api():
    a, b = values((3, 5), flow.float32), values((3, 2), flow.float32, seed=1)
    same_on_both(lambda p, q: flow.cat([p, q], dim=1), a, b)
    same_on_both(lambda t: flow.split(t, 2, dim=1), a)
    same_on_both(lambda t: flow.chunk(t, 3, dim=0), a)


# ---- expand ----

@pytest.mark.parametrize("dtype", ALL)
def test_expand_matches_the_cpu(dtype):
    for shape, target in [((3, 1), (3, 4)), ((1,), (5,)), ((2, 1, 3), (4, 2, 5, 3)), ((), (2, 3)),
                          ((4,), (4,)), ((1, 1), (1, 1)), ((3, 1, 1), (3, 257, 2))]:
        x = values(shape, dtype)
        same_on_both(lambda t: _C.expand(t, target), x)


# ---- where and masked_fill ----

@pytest.mark.parametrize("dtype", ALL)
def test_where_matches_the_cpu_with_and_without_broadcasting(dtype):
    for sc, sx, sy in [((4, 5), (4, 5), (4, 5)), ((1001,), (1001,), (1001,)),
                       ((4, 1), (1, 5), (4, 5)), ((), (3,), (2, 3)), ((2, 1, 3), (4, 1), (3,)),
                       ((7,), (7,), ())]:
        c = values(sc, flow.bool, seed=1)
        x, y = values(sx, dtype, seed=2), values(sy, dtype, seed=3)
        same_on_both(_C.where, c, x, y)


@pytest.mark.parametrize("dtype", ALL)
def test_masked_fill_matches_the_cpu_with_and_without_broadcasting(dtype):
    value = 1.0 if dtype == flow.bool else -7.0
    for sx, sm in [((4, 5), (4, 5)), ((1001,), (1001,)), ((4, 5), (5,)), ((4, 5), (4, 1)),
                   ((2, 3, 4), ()), ((3,), (1,))]:
        x, m = values(sx, dtype), values(sm, flow.bool, seed=1)
        same_on_both(lambda t, u: _C.masked_fill(t, u, value), x, m)


# ---- embedding ----

@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("index_dtype", [flow.int32, flow.int64])
def test_embedding_gathers_the_cpus_rows(dtype, index_dtype):
    rng = np.random.default_rng(5)
    for vocab, dim, index_shape in [(10, 4, (5,)), (10, 3, (2, 3)), (7, 1, ()), (50, 768, (4, 9)),
                                    (5, 33, (6,)), (3, 0, (2,))]:
        weight = values((vocab, dim), dtype)
        indices = flow.tensor(rng.integers(0, vocab, index_shape)).to(index_dtype)
        same_on_both(_C.embedding, weight, indices)


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("index_dtype", [flow.int32, flow.int64])
def test_embedding_grad_sums_like_the_cpu_and_the_same_every_run(dtype, index_dtype):
    rng = np.random.default_rng(6)
    for vocab, dim, n in [(10, 4, 30), (3, 1, 7), (1000, 768, 2000), (5, 300, 1), (7, 5, 0),
                          (70000, 2, 3000)]:
        # Many repeats of a few rows, so that the order of the sums shows in float32.
        indices = flow.tensor(rng.integers(0, min(vocab, 20), (n,))).to(index_dtype)
        dy = values((n, dim), dtype, seed=7)
        same_on_both(lambda g, i: _C.embedding_grad(g, i, vocab), dy, indices)
        first = _C.embedding_grad(dy.cuda(), indices.cuda(), vocab)
        again = _C.embedding_grad(dy.cuda(), indices.cuda(), vocab)
        np.testing.assert_array_equal(again.numpy(), first.numpy())


@pytest.mark.parametrize("op", ["embedding", "embedding_grad"])
@pytest.mark.parametrize("dim", [4, 0])
def test_an_out_of_range_index_on_the_gpu_says_which_and_stops_the_device(op, dim):
    # The kernel traps (Note [Device index errors] in kernels/cuda/index_slices.cuh), which
    # spoils the device for the process: run it in a child process. With rows of 0 elements the
    # result is empty, and the indices are checked all the same, as on the CPU.
    with pytest.raises(IndexError, match="got index 7 at position 1"):
        i = flow.tensor(np.array([1, 7, 2]))
        if op == "embedding":
            _C.embedding(flow.tensor(np.ones((5, dim), np.float32)), i)
        else:
            _C.embedding_grad(flow.tensor(np.ones((3, dim), np.float32)), i, 5)
    call = ("_C.embedding(w, i)" if op == "embedding"
            else f"_C.embedding_grad(flow.tensor(np.ones((3, {dim}), np.float32)).cuda(), i, 5)")
    # The device's printf reaches the C library's stdout buffer: flush it before the process
    # can die in teardown on the spoiled device.
    script = textwrap.dedent(f"""
        import ctypes
        import numpy as np
        import oneflowlike as flow
        from oneflowlike import _C
        w = flow.tensor(np.ones((5, {dim}), np.float32)).cuda()
        i = flow.tensor(np.array([1, 7, 2])).cuda()
        try:
            {call}.numpy()
        except Exception as e:
            print("raised:", type(e).__name__, e, flush=True)
        else:
            print("no error", flush=True)
        ctypes.CDLL(None).fflush(None)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    out = done.stdout + done.stderr
    assert f"[{op}] every index must be in [0, num_embeddings) with num_embeddings = 5. " \
           "However, got index 7 at position 1." in out, out
    assert "no error" not in out, out


# ---- creation ----

@pytest.mark.parametrize("dtype", [flow.float32, flow.float64, flow.float16, flow.bfloat16,
                                   flow.int8, flow.int32, flow.int64])
def test_arange_on_the_gpu_matches_the_cpu(dtype):
    for start, end, step in [(0, 10, 1), (-3, 4, 0.5), (1, 0, -0.125), (0, 1, 0.1),
                             (5, 5, 1), (0, 100000, 7)]:
        if dtype == flow.int8 and abs(end) > 127:
            continue
        want = flow.arange(start, end, step, dtype=dtype)
        got = flow.arange(start, end, step, dtype=dtype, device="cuda")
        assert str(got.device) == "cuda:0" and got.dtype == dtype
        np.testing.assert_array_equal(as_numpy(got), as_numpy(want))


@pytest.mark.parametrize("dtype", ALL)
def test_fill_on_the_gpu_matches_the_cpu(dtype):
    for shape, value in [((3, 5), 2.5), ((1001,), -1.0), ((), 0.0), ((2, 0), 1.0)]:
        want = flow.full(shape, value, dtype=dtype)
        got = flow.full(shape, value, dtype=dtype, device="cuda")
        assert str(got.device) == "cuda:0"
        np.testing.assert_array_equal(as_numpy(got), as_numpy(want))


# ---- the vectorised elementwise paths ----

# Lengths around the 16-byte packs (16 int8, 8 float16, 4 float32, 2 float64 elements): a tail
# only, whole packs only, both, and more than one pack per thread of the grid.
LENGTHS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 1000, 4099, 3_000_001]


def low_precision_pair(a, dtype):
    """The CPU float32 reference on dtype-rounded values and the CUDA tensor of dtype."""
    return flow.tensor(a).to(dtype).to(flow.float32), flow.tensor(a).to(dtype).cuda()


@pytest.mark.parametrize("dtype", [flow.float32, flow.float16, flow.bfloat16])
def test_vectorised_unary_scalar_and_binary_kernels_cover_every_tail(dtype):
    rng = np.random.default_rng(8)
    tol = TOLERANCE[dtype] if dtype in LOW else 1e-5
    for n in LENGTHS:
        a = (rng.standard_normal(n) * 2).astype(np.float32)
        b = (np.abs(rng.standard_normal(n)) + 0.5).astype(np.float32)  # no division by ~0
        (ca, ga), (cb, gb) = low_precision_pair(a, dtype), low_precision_pair(b, dtype)
        for fn in [flow.tanh, flow.relu, flow.sigmoid, lambda t: _C.gelu(t, approximate="tanh"),
                   lambda t: t * 1.5, lambda t: t + 2.0]:
            np.testing.assert_allclose(as_numpy(fn(ga)), fn(ca).numpy(), rtol=tol, atol=tol)
        for fn in [lambda p, q: p + q, lambda p, q: p * q, lambda p, q: p / q, _C.tanh_grad]:
            np.testing.assert_allclose(as_numpy(fn(ga, gb)), fn(ca, cb).numpy(), rtol=tol,
                                       atol=tol)
        np.testing.assert_array_equal(flow.gt(ga, gb).numpy(), flow.gt(ca, cb).numpy())


@pytest.mark.parametrize("dtype", [flow.int8, flow.int32, flow.int64, flow.float64])
def test_vectorised_kernels_of_other_widths_match_the_cpu_exactly(dtype):
    for n in LENGTHS[:-1]:
        a, b = values((n,), dtype, seed=1), values((n,), dtype, seed=2)
        same_on_both(lambda p, q: p + q, a, b)
        same_on_both(lambda p, q: p * q, a, b)
        same_on_both(flow.neg, a)
        same_on_both(flow.abs, a)
        same_on_both(lambda t: t * 3, a)
        same_on_both(flow.eq, a, b)
        same_on_both(flow.lt, a, b)


def test_equal_on_bool_tensors_matches_the_cpu():
    for n in [1, 17, 1000]:
        same_on_both(flow.eq, values((n,), flow.bool, seed=1), values((n,), flow.bool, seed=2))
