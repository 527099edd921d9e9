"""CUDA kernels of the random, optimizer and fused families against their CPU kernels, and
creation functions with device="cuda" (issue 15).

Every test here needs a GPU and is skipped without one (CI has none). The CPU side of device= is
tests/python/test_creation.py; the CUDA random kernels on regions of a split tensor are
tests/cpp/ops/random_test.cpp (RandomCuda).
"""

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gpus import NEEDS_GPU

pytestmark = NEEDS_GPU

LOW = [flow.float16, flow.bfloat16]
# Sizes around the 256-thread blocks, a size-1 axis, a scalar, and a large tensor.
SHAPES = [(), (1,), (255,), (257,), (4, 1, 33), (1000, 300)]


def cuda_device():
    return _C.device("cuda:0")


def host(t):
    """t's values as a numpy array, 16-bit dtypes widened to float32 on the CPU (exactly)."""
    t = t.cpu()
    return (t.to(flow.float32) if t.dtype in LOW else t).numpy()


# ---- random ------------------------------------------------------------------------------------
# Note [Random values on every device] in oneflowlike/philox.h: the bits and uniforms are exact,
# so uniform and dropout are bit-identical, and so is a float32 normal (Note [Box-Muller in float
# arithmetic]); a float64 normal goes through log and cos, whose last ulp differs between the
# host's libm and CUDA's.
NORMAL_RTOL = {flow.float32: 0.0, flow.float64: 1e-13}
DRAWS = [(0, 0), (42, 12345), (2**63 - 1, 2**62), (-7, 3)]  # (seed, offset)


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_random_uniform_is_bit_identical_to_the_cpu(dtype, shape):
    # (1, 1 + 1e-7) rounds to one float32 ulp, so values round up to high and take below_high.
    for low, high in [(0.0, 1.0), (-3.0, 5.5), (2.5, 2.5), (1.0, 1.0 + 1e-7)]:
        for seed, offset in DRAWS:
            want = _C.random_uniform(shape, dtype, low, high, seed, offset)
            got = _C.random_uniform(shape, dtype, low, high, seed, offset, cuda_device())
            assert str(got.device) == "cuda:0" and got.dtype == dtype
            assert tuple(got.shape) == tuple(shape)
            np.testing.assert_array_equal(host(got), want.numpy())


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_random_normal_matches_the_cpu(dtype, shape):
    tol = NORMAL_RTOL[dtype]
    for mean, std in [(0.0, 1.0), (0.25, 1.5), (-100.0, 0.01)]:
        for seed, offset in DRAWS:
            want = _C.random_normal(shape, dtype, mean, std, seed, offset).numpy()
            got = _C.random_normal(shape, dtype, mean, std, seed, offset, cuda_device())
            assert str(got.device) == "cuda:0" and got.dtype == dtype
            got = host(got)
            assert np.all(np.isfinite(got))
            if tol == 0:
                np.testing.assert_array_equal(got, want)
            else:  # error <= tol * std * |z| <= tol * (|y| + |mean|)
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (abs(mean) + std))


# Note [16-bit random values]: the float32 draw rounded, the same on both devices.
@pytest.mark.parametrize("dtype", LOW)
def test_16_bit_draws_equal_the_cpu(dtype):
    for seed, offset in DRAWS:
        want = _C.random_uniform((1000, 300), dtype, 0.0, 1.0, seed, offset)
        got = _C.random_uniform((1000, 300), dtype, 0.0, 1.0, seed, offset, cuda_device())
        assert got.dtype == dtype
        np.testing.assert_array_equal(host(got), host(want))
        want = host(_C.random_normal((1000, 300), dtype, 0.0, 1.0, seed, offset))
        got = host(_C.random_normal((1000, 300), dtype, 0.0, 1.0, seed, offset, cuda_device()))
        np.testing.assert_array_equal(got, want)


def test_the_global_generator_draws_the_same_numbers_on_either_device():
    for device in ["cuda", "cuda:0", flow.device("cuda:0")]:
        flow.manual_seed(3)
        a = flow.randn(64, 3, device=device)
        b = flow.rand(100, dtype=flow.float64, device=device)
        c = flow.randint(-5, 10, (50,), device=device)
        d = flow.normal(2.0, 0.5, (7,), device=device)
        flow.manual_seed(3)
        a2, b2 = flow.randn(64, 3), flow.rand(100, dtype=flow.float64)
        c2, d2 = flow.randint(-5, 10, (50,)), flow.normal(2.0, 0.5, (7,))
        for t in [a, b, c, d]:
            assert str(t.device) == "cuda:0"
        np.testing.assert_array_equal(host(a), a2.numpy())
        np.testing.assert_array_equal(host(b), b2.numpy())
        np.testing.assert_array_equal(host(c), c2.numpy())
        assert c.dtype == flow.int64
        np.testing.assert_array_equal(host(d), d2.numpy())


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64] + LOW)
def test_dropout_masks_and_values_equal_the_cpu(dtype):
    rng = np.random.default_rng(5)
    for shape in [(1,), (257,), (1000, 37), (3, 1, 5)]:
        x = flow.tensor(rng.uniform(0.5, 1.5, shape).astype(np.float32)).to(dtype)
        for p in [0.0, 0.1, 0.5, 0.999, 1.0]:
            for seed, offset in DRAWS:
                want = host(_C.dropout_with_seed(x, p, seed, offset))
                got = _C.dropout_with_seed(x.cuda(), p, seed, offset)
                assert str(got.device) == "cuda:0" and got.dtype == dtype
                got = host(got)
                np.testing.assert_array_equal(got != 0, want != 0)  # the mask
                np.testing.assert_array_equal(got, want)


def test_dropout_through_the_functional_api_on_cuda():
    x = flow.tensor(np.ones((64, 64), np.float32))
    flow.manual_seed(9)
    want = flow.nn.functional.dropout(x, 0.25).numpy()
    flow.manual_seed(9)
    got = flow.nn.functional.dropout(x.cuda(), 0.25)
    assert str(got.device) == "cuda:0"
    np.testing.assert_array_equal(host(got), want)


# ---- creation on a device ----------------------------------------------------------------------
def test_creation_functions_make_their_tensor_on_the_device():
    x = flow.tensor([[1.0, 2.0, 3.0]])
    made = {
        "zeros": lambda **kw: flow.zeros(2, 3, **kw),
        "ones": lambda **kw: flow.ones((4,), dtype=flow.int32, **kw),
        "full": lambda **kw: flow.full((2, 2), 7, **kw),
        "zeros_like": lambda **kw: flow.zeros_like(x, **kw),
        "ones_like": lambda **kw: flow.ones_like(x, dtype=flow.float64, **kw),
        "full_like": lambda **kw: flow.full_like(x, 2.5, **kw),
        "empty": lambda **kw: flow.empty(2, 3, **kw),
        "empty_like": lambda **kw: flow.empty_like(x, **kw),
        "arange": lambda **kw: flow.arange(1, 10, 2, **kw),
        "arange_float": lambda **kw: flow.arange(0, 1, 0.125, **kw),
        "linspace": lambda **kw: flow.linspace(-1, 1, 9, **kw),
        "rand_like": lambda **kw: flow.rand_like(x, **kw),
    }
    for device in ["cuda", "cuda:0", flow.device("cuda:0")]:
        for name, make in made.items():
            flow.manual_seed(17)
            want = make()
            flow.manual_seed(17)
            got = make(device=device)
            assert str(got.device) == "cuda:0", name
            assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), name
            if name in ("arange_float", "linspace"):  # h3's arange and scalar ops: float math
                np.testing.assert_allclose(host(got), want.numpy(), rtol=1e-6, atol=1e-7,
                                           err_msg=name)
            else:
                np.testing.assert_array_equal(host(got), want.numpy(), err_msg=name)
    assert flow.zeros(3, device="cuda", requires_grad=True).requires_grad
    with pytest.raises(RuntimeError, match=r"\[zeros\] device cuda:\d+ does not exist: this "
                                           r"process sees"):
        flow.zeros(2, device=f"cuda:{flow.cuda.device_count()}")


# ---- optimizer updates -------------------------------------------------------------------------
# The per-element math is shared (oneflowlike/kernels/optimizer_update.h); the devices may fuse
# multiply-adds differently, so results agree to a few ulp per step.
UPDATE_RTOL = {flow.float32: 1e-5, flow.float64: 1e-12}
SGD_CONFIGS = [  # momentum, dampening, weight_decay, nesterov
    (0.0, 0.0, 0.0, False), (0.0, 0.0, 0.01, False), (0.9, 0.0, 0.0, False),
    (0.9, 0.1, 0.001, False), (0.9, 0.0, 0.01, True)]
ADAM_CONFIGS = [  # beta1, beta2, eps, weight_decay, decoupled
    (0.9, 0.999, 1e-8, 0.0, False), (0.8, 0.99, 1e-6, 0.01, False),
    (0.9, 0.999, 1e-8, 0.05, True), (0.0, 0.5, 1e-3, 0.0, False)]


def scalar(value, dtype, device):
    return flow.tensor(value, dtype=dtype, device=device)


def run_sgd(device, dtype, shape, config, steps=4):
    momentum, dampening, weight_decay, nesterov = config
    rng = np.random.default_rng(11)
    param = flow.tensor(rng.standard_normal(shape), dtype=dtype, device=device)
    buffer = flow.zeros(shape, dtype=dtype, device=device)
    for step in range(steps):
        grad = flow.tensor(rng.standard_normal(shape), dtype=dtype, device=device)
        # As flow.optim.SGD: grad stands in for the unused buffer without momentum, and the
        # first step has no dampening (Note [SGD first step]).
        _C.sgd_update(param, grad, buffer if momentum else grad, scalar(0.05, dtype, device),
                      momentum, 0.0 if step == 0 else dampening, weight_decay, nesterov)
    return host(param), host(buffer)


def run_adam(device, dtype, shape, config, steps=4):
    beta1, beta2, eps, weight_decay, decoupled = config
    rng = np.random.default_rng(12)
    param = flow.tensor(rng.standard_normal(shape), dtype=dtype, device=device)
    exp_avg = flow.zeros(shape, dtype=dtype, device=device)
    exp_avg_sq = flow.zeros(shape, dtype=dtype, device=device)
    for step in range(1, steps + 1):
        grad = flow.tensor(rng.standard_normal(shape), dtype=dtype, device=device)
        _C.adam_update(param, grad, exp_avg, exp_avg_sq, scalar(0.01, dtype, device),
                       scalar(float(step), dtype, device), beta1, beta2, eps, weight_decay,
                       decoupled)
    return host(param), host(exp_avg), host(exp_avg_sq)


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("shape", [(1,), (257,), (1000, 300)])
def test_sgd_update_matches_the_cpu_over_several_steps(dtype, shape):
    tol = UPDATE_RTOL[dtype]
    for config in SGD_CONFIGS:
        for want, got in zip(run_sgd("cpu", dtype, shape, config),
                             run_sgd("cuda", dtype, shape, config)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(config))


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("shape", [(1,), (257,), (1000, 300)])
def test_adam_update_matches_the_cpu_over_several_steps(dtype, shape):
    tol = UPDATE_RTOL[dtype]
    for config in ADAM_CONFIGS:
        for want, got in zip(run_adam("cpu", dtype, shape, config),
                             run_adam("cuda", dtype, shape, config)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(config))


@pytest.mark.parametrize("make", [lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9),
                                  lambda p: flow.optim.SGD(p, lr=0.1),
                                  lambda p: flow.optim.Adam(p, lr=0.01),
                                  lambda p: flow.optim.AdamW(p, lr=0.01, weight_decay=0.1)])
def test_optimizers_step_parameters_on_cuda_as_on_the_cpu(make):
    rng = np.random.default_rng(13)
    data = rng.standard_normal((33, 7)).astype(np.float32)
    grads = [rng.standard_normal((33, 7)).astype(np.float32) for _ in range(3)]
    results = []
    for device in ["cpu", "cuda"]:
        w = flow.tensor(data, device=device, requires_grad=True)
        opt = make([w])
        for g in grads:
            w.grad = flow.tensor(g, device=device)
            opt.step()
        assert str(w.device).startswith(device)
        results.append(host(w.detach()))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)


# ---- fused_elementwise -------------------------------------------------------------------------
# Each step is the CUDA unary op's function; the CPU's are vectorised polynomials, so values
# agree to a few ulp per step (as the unary ops in tests/python/test_cuda.py).
FUSED_RTOL = {flow.float32: 1e-5, flow.float64: 1e-12}
CHAINS = [
    "tanh",
    "scalar_mul(0.5),tanh,scalar_add(1)",
    "neg,relu,sigmoid,gelu,gelu_tanh,exp",
    "scalar_pow(2),scalar_add(0.5),sqrt,log,scalar_add(1),rsqrt,scalar_pow(1.5),scalar_pow(3)",
    # 20 steps: three launches of at most 8 steps, the later ones in place.
    ",".join(["scalar_mul(0.9),scalar_add(0.1)"] * 9 + ["sigmoid", "tanh"]),
]


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("shape", [(), (1,), (255,), (257,), (3, 1, 129), (1000, 300)])
def test_fused_elementwise_matches_the_cpu(dtype, shape):
    rng = np.random.default_rng(14)
    x = flow.tensor(rng.standard_normal(shape) * 2, dtype=dtype)
    tol = FUSED_RTOL[dtype]
    for chain in CHAINS:
        want = _C.fused_elementwise(x, chain).numpy()
        got = _C.fused_elementwise(x.cuda(), chain)
        assert str(got.device) == "cuda:0" and got.dtype == dtype
        np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol, err_msg=chain)


def test_fused_elementwise_equals_the_cuda_ops_one_by_one():
    x = flow.tensor(np.linspace(-4, 4, 1001, dtype=np.float32)).cuda()
    fused = _C.fused_elementwise(x, "scalar_mul(0.5),tanh,scalar_add(1),relu")
    one_by_one = flow.relu(flow.tanh(x * 0.5) + 1.0)
    np.testing.assert_array_equal(host(fused), host(one_by_one))
