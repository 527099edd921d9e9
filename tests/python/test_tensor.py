import numpy as np
import pytest

import oneflowlike as flow


def test_tensor_from_lists_uses_torch_default_dtypes():
    assert flow.tensor([1.5, 2]).dtype == flow.float32
    assert flow.tensor([1, 2]).dtype == flow.int64
    assert flow.tensor([True]).dtype == flow.bool
    assert flow.tensor(np.zeros(3)).dtype == flow.float64  # numpy keeps its dtype
    assert flow.tensor([1, 2], dtype=flow.float64).dtype == flow.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.int32,
                                   np.int64, np.bool_])
def test_numpy_round_trip_keeps_values_shape_and_dtype(dtype):
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    t = flow.tensor(a)
    assert t.shape == (3, 4)
    out = t.numpy()
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out, a)


def test_bfloat16_comes_back_as_float32():
    t = flow.tensor([1.0, 2.5], dtype=flow.bfloat16)
    assert t.dtype == flow.bfloat16
    np.testing.assert_array_equal(t.numpy(), np.array([1.0, 2.5], dtype=np.float32))


def test_repr_and_item():
    t = flow.tensor([[1.0, 2.0]])
    assert repr(t).startswith("tensor([[1., 2.]]")
    assert "dtype=oneflowlike.float32" in repr(t)
    assert flow.tensor([3.5]).item() == 3.5
    assert float(flow.tensor(2.0)) == 2.0
    with pytest.raises(ValueError, match="one-element"):
        flow.tensor([1.0, 2.0]).item()


def test_device_is_cpu_and_cuda_is_refused_clearly():
    assert flow.tensor([1.0]).device.type == "cpu"
    if not flow.cuda.is_available():  # with a GPU: tests/python/test_cuda.py
        with pytest.raises(RuntimeError, match=r"\[tensor\] device cuda needs a CUDA device. "
                                               r"However, there is none: "):
            flow.tensor([1.0], device="cuda")
        with pytest.raises(RuntimeError, match=r"\[to\] device cuda:1 needs a CUDA device"):
            flow.tensor([1.0]).cuda(1)
        with pytest.raises(RuntimeError, match=r"\[cuda\] no CUDA device 0: this process sees 0"):
            flow.cuda.set_device(0)
        with pytest.raises(RuntimeError, match=r"no CUDA device 0"):
            flow.cuda.memory_allocated()
        assert flow.cuda.current_device() == 0 and not flow.cuda.is_bf16_supported()
        with pytest.raises(RuntimeError, match=r"\[pin_memory\] page-locked memory is for "
                                               r"copies to a CUDA device. However, there is none"):
            flow.ones(2).pin_memory()
    with pytest.raises(ValueError, match=r"\[tensor\] device must be 'cpu' or 'cuda\[:index\]'"):
        flow.tensor([1.0], device="tpu")


def test_torch_tensor_helpers_for_devices_and_new_tensors():
    t = flow.ones(2, 3, dtype=flow.float64)
    assert not t.is_cuda and t.get_device() == -1 and not t.is_pinned()
    z = t.new_zeros(4, 5)
    assert z.dtype == flow.float64 and tuple(z.shape) == (4, 5) and not z.numpy().any()
    assert t.new_ones((2,), dtype=flow.int64).numpy().tolist() == [1, 1]
    assert t.new_full((3,), 7).numpy().tolist() == [7.0, 7.0, 7.0]
    assert t.new_full((3,), 7).dtype == flow.float64  # self's dtype, as torch
    assert t.new_tensor([1, 2]).dtype == flow.float64
    assert t.new_empty(0).numel() == 0
    assert t.new_zeros(2, requires_grad=True).requires_grad


def test_autograd_backward_no_grad_and_leaf_flags():
    x = flow.tensor([1.0, -2.0, 3.0], requires_grad=True)
    assert x.is_leaf and x.requires_grad
    y = (x * x + x * 2).sum()
    assert not y.is_leaf
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, -2.0, 8.0])
    with flow.no_grad():
        z = x * 2
    assert not z.requires_grad
    x.grad = None
    assert x.grad is None


def test_backward_twice_without_retain_graph_raises():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_integer_tensor_cannot_require_grad():
    with pytest.raises(TypeError, match="floating-point"):
        flow.tensor([1, 2]).requires_grad = True


def test_unsupported_numpy_dtype_is_type_error():
    with pytest.raises(TypeError, match="complex"):
        flow.from_numpy(np.zeros(2, dtype=np.complex64))


def test_memory_counters_track_live_bytes():
    before = flow._C.cpu_memory_live_bytes()
    t = flow.zeros(1024, dtype=flow.float32)
    assert flow._C.cpu_memory_live_bytes() == before + 4096
    del t
    assert flow._C.cpu_memory_live_bytes() == before


def test_zero_dim_tensors_keep_their_shape():
    import numpy as np

    assert flow.tensor(3.0).shape == ()
    assert flow.from_numpy(np.float64(2.0) * np.ones(())).shape == ()
    assert flow.tensor([1.0, 2.0]).sum().shape == ()


def test_a_bound_method_called_on_something_else_says_so():
    with pytest.raises(TypeError, match=r"\[numpy\] is a method of local tensors. However, it was "
                                        r"called on \[1, 2\]"):
        flow.Tensor.numpy([1, 2])
