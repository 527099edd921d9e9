"""Eager CUDA tensors and the CUDA kernels written so far (issue 15), against the CPU kernels.

Every test here needs a GPU and is skipped without one, with the driver's reason (CI has none;
scripts/test.sh prints it once). docs/cuda.md says which of these have run on a GPU.
"""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C
from gpus import NEEDS_GPU

pytestmark = NEEDS_GPU

# What a 16-bit result may differ by from float32 math on the same (rounded) inputs: one
# rounding of the output, plus float32 differences between the two devices' math libraries.
TOLERANCE = {flow.float32: 2e-6, flow.float16: 1e-3, flow.bfloat16: 8e-3}
LOW = [flow.float16, flow.bfloat16]


def reference_and_cuda(fn, arrays, dtype):
    """fn on CPU float32 tensors holding the dtype-rounded values, and on CUDA tensors of dtype."""
    cpu = [flow.tensor(a).to(dtype).to(flow.float32) if a.dtype.kind == "f" else flow.tensor(a)
           for a in arrays]
    gpu = [flow.tensor(a).to(dtype).cuda() if a.dtype.kind == "f" else flow.tensor(a).cuda()
           for a in arrays]
    want = fn(*cpu)
    if dtype in LOW and want.dtype == flow.float32:
        # One rounding to the dtype, as the kernel's own output (exp of 11 is inf in float16).
        want = want.to(dtype).to(flow.float32)
    got = fn(*gpu)
    assert str(got.device) == "cuda:0"
    return want.numpy(), got.to(flow.float32).numpy() if got.dtype in LOW else got.numpy()


def check(fn, arrays, dtype, rtol=None):
    want, got = reference_and_cuda(fn, arrays, dtype)
    tol = TOLERANCE[dtype] if rtol is None else rtol
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_tensors_go_to_the_gpu_and_back_unchanged():
    rng = np.random.default_rng(0)
    for dtype in [flow.float32, flow.float64, flow.float16, flow.bfloat16, flow.int64, flow.bool]:
        x = flow.tensor(rng.standard_normal((3, 5)) * 4).to(dtype)
        y = x.cuda()
        assert y.device.type == "cuda" and str(y.device) == "cuda:0" and y.dtype == dtype
        np.testing.assert_array_equal(y.cpu().numpy(), x.numpy())
        np.testing.assert_array_equal(y.numpy(), x.numpy())  # numpy() copies to the host itself
    z = flow.tensor([[1.5, 2.5]], device="cuda")
    assert str(z.device) == "cuda:0"
    np.testing.assert_array_equal(z.numpy(), [[1.5, 2.5]])


UNARY = {
    "neg": flow.neg, "abs": flow.abs, "exp": flow.exp, "tanh": flow.tanh, "relu": flow.relu,
    "sigmoid": flow.sigmoid, "gelu": _C.gelu,
    "gelu_tanh": lambda x: _C.gelu(x, approximate="tanh"),
}
POSITIVE = {"log": flow.log, "sqrt": flow.sqrt, "rsqrt": flow.rsqrt}


@pytest.mark.parametrize("dtype", [flow.float32] + LOW)
def test_unary_kernels_match_the_cpu(dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(1000) * 3).astype(np.float32)
    for name, fn in UNARY.items():
        check(fn, [x], dtype, rtol=None if dtype in LOW else 1e-5)
    for name, fn in POSITIVE.items():
        check(fn, [np.abs(x) + 0.1], dtype, rtol=None if dtype in LOW else 1e-5)


@pytest.mark.parametrize("dtype", [flow.float32] + LOW)
def test_unary_gradient_kernels_match_the_cpu(dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(777) * 2).astype(np.float32)
    dy = rng.standard_normal(777).astype(np.float32)
    for fn in [_C.relu_grad, _C.tanh_grad, _C.sigmoid_grad, _C.abs_grad, _C.gelu_grad,
               lambda a, b: _C.gelu_grad(a, b, approximate="tanh")]:
        check(fn, [np.tanh(x) if fn in (_C.tanh_grad, _C.sigmoid_grad) else x, dy], dtype,
              rtol=None if dtype in LOW else 1e-5)


@pytest.mark.parametrize("dtype", [flow.float32] + LOW)
def test_binary_kernels_broadcast_as_on_the_cpu(dtype):
    rng = np.random.default_rng(3)
    shapes = [((4, 5), (4, 5)), ((4, 5), (5,)), ((3, 1, 5), (4, 1)), ((1,), (2, 3, 4)), ((), (3,))]
    for sa, sb in shapes:
        a = rng.standard_normal(sa).astype(np.float32)
        b = (rng.standard_normal(sb) + 3).astype(np.float32)
        for fn in [lambda p, q: p + q, lambda p, q: p - q, lambda p, q: p * q,
                   lambda p, q: p / q]:
            check(fn, [a, b], dtype)
        for fn in [flow.eq, flow.gt, flow.lt]:
            want, got = reference_and_cuda(fn, [a, np.round(b - 3)], dtype)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [flow.float32] + LOW)
def test_scalar_kernels_and_casts_match_the_cpu(dtype):
    rng = np.random.default_rng(4)
    x = (np.abs(rng.standard_normal(500)) + 0.5).astype(np.float32)
    for fn in [lambda t: t + 2.5, lambda t: t * -3.0, lambda t: t ** 2.5, lambda t: 2.0 ** t]:
        check(fn, [x], dtype, rtol=None if dtype in LOW else 1e-5)
    for target in [flow.float32, flow.float64, flow.int64, flow.bool, flow.float16]:
        want, got = reference_and_cuda(lambda t: t.to(target), [x * 7 - 3], dtype)
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_bad_input_names_the_devices():
    a = flow.tensor([1.0, 2.0])
    with pytest.raises(Exception, match=r"\[add\] all inputs must be on one device. However, got "
                                        r"input 0 on cpu:0 and input 1 on cuda:0"):
        _C.add(a, a.cuda())
    with pytest.raises(RuntimeError, match=r"does not exist: this process sees"):
        flow.tensor([1.0], device=f"cuda:{flow.cuda.device_count()}")
    assert flow.placement("cuda", ranks=[0]).type == "cuda"  # graphs run there


def test_torch_imports_after_oneflowlike():
    # Note [NCCL loaded on first use] in oneflowlike/cuda/nccl.cpp: linking the toolkit's NCCL
    # made torch's CUDA build fail to load after oneflowlike (ncclCommResume missing).
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    result = subprocess.run([sys.executable, "-c", "import oneflowlike, torch"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
