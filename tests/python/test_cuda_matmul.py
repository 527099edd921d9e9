"""The CUDA kernels of matmul and batch_matmul (kernels/cuda/matmul.cu), against the CPU kernels.

Every test here needs a GPU and is skipped without one, with the driver's reason (CI has none).
The CPU has matmul kernels for float32, float64, int32 and int64; float16 and bfloat16 (CUDA
only) are compared with float32 products of the same rounded values, as test_cuda.py does.
"""

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gpus import NEEDS_GPU

pytestmark = NEEDS_GPU

LOW = [flow.float16, flow.bfloat16]
FLOATS = [flow.float32, flow.float64] + LOW
# Inputs are scaled so that outputs are about N(0, 1). A 16-bit result may differ from float32
# math on the same inputs by one rounding of the output (plus a flipped rounding where the two
# devices' float32 sums differ in the last bit); float32 sums in another order differ by a few
# ulps of the terms.
TOLERANCE = {flow.float32: 1e-5, flow.float64: 1e-12, flow.float16: 1e-3, flow.bfloat16: 8e-3}

# (m, k, n): size 1 axes, odd sizes below and above the 16-wide tiles, and a large product.
SIZES = [(1, 1, 1), (1, 3, 17), (3, 17, 1), (17, 1, 3), (17, 129, 3), (129, 17, 129),
         (129, 129, 1), (1, 129, 129), (257, 300, 513)]


def operand(rng, shape, k):
    return (rng.standard_normal(shape) / np.sqrt(max(k, 1))).astype(np.float32)


def reference_and_cuda(fn, arrays, dtype):
    """fn on CPU tensors (float32 holding the dtype-rounded values for the 16-bit dtypes) and on
    CUDA tensors of dtype, both as numpy arrays."""
    reference_dtype = flow.float32 if dtype in LOW else dtype
    cpu = [flow.tensor(a).to(dtype).to(reference_dtype) for a in arrays]
    gpu = [flow.tensor(a).to(dtype).cuda() for a in arrays]
    want = fn(*cpu)
    got = fn(*gpu)
    assert str(got.device) == "cuda:0" and got.dtype == dtype
    return want.numpy(), (got.to(flow.float32) if dtype in LOW else got).numpy()


def check(fn, arrays, dtype):
    want, got = reference_and_cuda(fn, arrays, dtype)
    assert got.shape == want.shape
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_matches_the_cpu_for_every_transpose_flag(dtype):
    rng = np.random.default_rng(0)
    for index, (m, k, n) in enumerate(SIZES):
        for ta in (False, True):
            for tb in (False, True):
                a = operand(rng, (k, m) if ta else (m, k), k)
                b = operand(rng, (n, k) if tb else (k, n), 1)
                alpha = 1.0 if index % 2 == 0 else -0.75
                check(lambda x, y: _C.matmul(x, y, transpose_a=ta, transpose_b=tb, alpha=alpha),
                      [a, b], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_folds_the_leading_axes_of_a_into_rows(dtype):
    rng = np.random.default_rng(1)
    a = operand(rng, (2, 3, 17), 17)
    check(lambda x, y: _C.matmul(x, y), [a, operand(rng, (17, 5), 1)], dtype)
    check(lambda x, y: _C.matmul(x, y, transpose_b=True), [a, operand(rng, (5, 17), 1)], dtype)
    check(lambda x, y: x @ y, [operand(rng, (4, 1, 129, 3), 3), operand(rng, (3, 129), 1)], dtype)


# (batch dims, m, k, n): one batch, size 1 batch axes, many small products, a few large ones.
BATCHES = [((1,), 3, 17, 5), ((3,), 1, 1, 1), ((2, 3), 17, 3, 1), ((5, 1), 1, 129, 17),
           ((300,), 3, 5, 2), ((2,), 129, 257, 130)]


@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_matmul_matches_the_cpu_for_every_transpose_flag(dtype):
    rng = np.random.default_rng(2)
    for index, (batch, m, k, n) in enumerate(BATCHES):
        for ta in (False, True):
            for tb in (False, True):
                a = operand(rng, batch + ((k, m) if ta else (m, k)), k)
                b = operand(rng, batch + ((n, k) if tb else (k, n)), 1)
                alpha = 1.0 if index % 2 == 0 else 2.5
                check(lambda x, y: _C.batch_matmul(x, y, transpose_a=ta, transpose_b=tb,
                                                   alpha=alpha), [a, b], dtype)
    check(lambda x, y: flow.bmm(x, y), [operand(rng, (4, 3, 17), 17), operand(rng, (4, 17, 2), 1)],
          dtype)


@pytest.mark.parametrize("dtype", [flow.int32, flow.int64])
def test_integer_products_are_exact(dtype):
    # The CPU's integer loop casts alpha to the integer type (2.5 -> 2); so must the GPU.
    rng = np.random.default_rng(3)
    for m, k, n in [(1, 1, 1), (3, 17, 5), (17, 33, 129), (130, 20, 70)]:
        for ta in (False, True):
            for tb in (False, True):
                for alpha in (1.0, 2.5):
                    a = rng.integers(-5, 6, (k, m) if ta else (m, k))
                    b = rng.integers(-5, 6, (n, k) if tb else (k, n))
                    want, got = reference_and_cuda(
                        lambda x, y: _C.matmul(x, y, transpose_a=ta, transpose_b=tb, alpha=alpha),
                        [a, b], dtype)
                    np.testing.assert_array_equal(got, want)
                    a3 = rng.integers(-5, 6, (3,) + a.shape)
                    b3 = rng.integers(-5, 6, (3,) + b.shape)
                    want, got = reference_and_cuda(
                        lambda x, y: _C.batch_matmul(x, y, transpose_a=ta, transpose_b=tb,
                                                     alpha=alpha),
                        [a3, b3], dtype)
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64, flow.float16, flow.int64])
def test_empty_products(dtype):
    # K = 0 sums nothing: zeros, written into fresh memory. M, N or the batch = 0: empty results.
    cases = [((3, 0), (0, 2), _C.matmul), ((2, 3, 0), (2, 0, 4), _C.batch_matmul),
             ((0, 3), (3, 2), _C.matmul), ((3, 4), (4, 0), _C.matmul),
             ((0, 3, 4), (0, 4, 2), _C.batch_matmul)]
    for shape_a, shape_b, fn in cases:
        want, got = reference_and_cuda(
            fn, [np.ones(shape_a, np.float32), np.ones(shape_b, np.float32)], dtype)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, np.zeros_like(want))


def test_repeated_products_of_one_shape_give_identical_results():
    # The second call of a shape reuses its cached cuBLASLt plan.
    rng = np.random.default_rng(4)
    a = flow.tensor(operand(rng, (65, 33), 33)).to(flow.float16).cuda()
    b = flow.tensor(operand(rng, (33, 17), 1)).to(flow.float16).cuda()
    first = _C.matmul(a, b).to(flow.float32).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(_C.matmul(a, b).to(flow.float32).numpy(), first)


def test_bad_operands_are_refused_before_any_kernel():
    a = flow.tensor(np.ones((2, 3, 4), np.float32), device="cuda")
    b = flow.tensor(np.ones((3, 4, 5), np.float32), device="cuda")
    with pytest.raises(ValueError, match=r"\[batch_matmul\] a and b must have identical batch"):
        _C.batch_matmul(a, b)
    with pytest.raises(ValueError, match=r"\[matmul\] batched operands must have identical batch"):
        flow.matmul(a, b)
    with pytest.raises(ValueError, match=r"\[matmul\] the contracted extents of a and b"):
        _C.matmul(a, flow.tensor(np.ones((5, 2), np.float32), device="cuda"))
    with pytest.raises(TypeError, match=r"\[matmul\] both operands must have one dtype"):
        _C.matmul(a, flow.tensor(np.ones((4, 2)), device="cuda"))


def gradients(fn, arrays, dy, device):
    """The gradients of every input of fn(*inputs) . dy, with the tensors on `device`."""
    inputs = [flow.tensor(a, device=device, requires_grad=True) for a in arrays]
    y = fn(*inputs)
    y.backward(flow.tensor(dy, device=device))
    return [t.grad.numpy() for t in inputs]


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gradients_through_autograd_match_the_cpu(ta, tb):
    # Tensors made on the GPU with requires_grad (moving one that requires grad is refused).
    rng = np.random.default_rng(5)
    m, k, n = 17, 33, 5
    cases = [
        (lambda x, y: _C.matmul(x, y, transpose_a=ta, transpose_b=tb, alpha=0.5),
         [operand(rng, (k, m) if ta else (m, k), k), operand(rng, (n, k) if tb else (k, n), 1)],
         rng.standard_normal((m, n)).astype(np.float32)),
        (lambda x, y: _C.batch_matmul(x, y, transpose_a=ta, transpose_b=tb),
         [operand(rng, (3, k, m) if ta else (3, m, k), k),
          operand(rng, (3, n, k) if tb else (3, k, n), 1)],
         rng.standard_normal((3, m, n)).astype(np.float32)),
    ]
    if not ta:  # an N-d a folds into rows, and its b gradient reshapes a and dy (views)
        cases.append((lambda x, y: _C.matmul(x, y, transpose_b=tb),
                      [operand(rng, (2, 3, k), k), operand(rng, (n, k) if tb else (k, n), 1)],
                      rng.standard_normal((2, 3, n)).astype(np.float32)))
    for fn, arrays, dy in cases:
        want = gradients(fn, arrays, dy, "cpu")
        got = gradients(fn, arrays, dy, "cuda")
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
