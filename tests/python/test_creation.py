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


def test_empty_and_empty_like_as_torch_with_zeros_for_values():
    # torch leaves the values unspecified; here they are zeros, as new_empty's: no uninitialised
    # memory reaches users.
    e = flow.empty(2, 3)
    assert e.shape == (2, 3) and e.dtype == flow.float32
    np.testing.assert_array_equal(e.numpy(), np.zeros((2, 3)))
    assert flow.empty((4,), dtype=flow.int64).dtype == flow.int64
    assert flow.empty(2, requires_grad=True).requires_grad
    like = flow.empty_like(flow.tensor([[1, 2]]))
    assert like.shape == (1, 2) and like.dtype == flow.int64
    with flow.device("meta"):  # a layer's weights declared empty, then initialised
        assert flow.empty(3, 5).shape == (3, 5)
    one = flow.placement("cpu", ranks=[0])
    g = flow.empty(4, 2, placement=one, sbp=flow.sbp.split(0))
    assert g.is_global and g.shape == (4, 2) and g.sbp == (flow.sbp.split(0),)
    assert flow.empty_like(g).is_global


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
        with pytest.raises(RuntimeError, match=r"\[cuda\] no CUDA device 0"):
            flow.cuda.synchronize()


def test_to_takes_torchs_forms_and_refuses_what_it_does_not_know():
    """Tensor.to and Module.to share one parser (to_arguments): to(other) takes its dtype, no
    change returns the tensor itself unless copy=True, and a misspelt keyword or a stray value
    raises naming it instead of being dropped."""
    x = flow.tensor([1.5, -2.0])
    assert x.to(flow.float32) is x and x.to("cpu", flow.float32, non_blocking=True) is x
    copied = x.to(flow.float32, copy=True)
    assert copied is not x
    np.testing.assert_array_equal(copied.numpy(), x.numpy())
    assert x.to(flow.tensor([1], dtype=flow.float64)).dtype == flow.float64
    assert x.to(dtype=flow.float16).dtype == flow.float16
    with pytest.raises(TypeError, match=r"\[Tensor.to\] unexpected keyword arguments "
                                        r"\['dytpe'\]; it takes device, dtype, non_blocking"):
        x.to(dytpe=flow.float16)
    with pytest.raises(TypeError, match=r"\[Tensor.to\] expected a device, a dtype or a tensor. "
                                        r"However, got \[3\]"):
        x.to([3])
    if not flow.cuda.is_available():  # an index is a CUDA device, as in torch
        for index in ({"args": (3,)}, {"kwargs": {"device": 3}},
                      {"args": (np.int64(3),)}):
            with pytest.raises(RuntimeError, match=r"\[to\] device cuda:3 needs a CUDA device"):
                x.to(*index.get("args", ()), **index.get("kwargs", {}))
    with pytest.raises(TypeError, match=r"\[Tensor.to\] got multiple values for argument "
                                        r"'non_blocking'"):
        x.to("cpu", True, non_blocking=False)
    with pytest.raises(TypeError, match=r"\[Tensor.to\] the booleans non_blocking and copy "
                                        r"come after a device"):
        x.to(True)
    with pytest.raises(TypeError, match=r"\[Tensor.to\] memory_format="):
        x.to(flow.float32, memory_format="channels_last")
    assert x.to(flow.float32, memory_format=None) is x
    layer = flow.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"\[Module.to\] unexpected keyword arguments "
                                        r"\['devcie'\]"):
        layer.to(devcie="cpu")
    assert layer.to("cpu", non_blocking=True) is layer


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


# ---- device= (issue 15) ------------------------------------------------------------------------
# Every creation function takes device= as torch does: "cpu", "cuda", "cuda:1" or a flow.device,
# read by the one parser (_C.device); *_like default to the input's device. The CUDA side is
# tests/python/test_cuda_random_optim_fused.py.
def _creations(device):
    """name -> a tensor made on ``device`` (None: the default), with the generator reseeded so
    that two calls draw the same numbers."""
    x = flow.tensor([[1.0, 2.0, 3.0]])
    out = {}
    for name, make in {
        "zeros": lambda **kw: flow.zeros(2, 3, **kw),
        "ones": lambda **kw: flow.ones((4,), dtype=flow.int32, **kw),
        "full": lambda **kw: flow.full((2, 2), 7, **kw),
        "zeros_like": lambda **kw: flow.zeros_like(x, **kw),
        "ones_like": lambda **kw: flow.ones_like(x, dtype=flow.float64, **kw),
        "full_like": lambda **kw: flow.full_like(x, 2.5, **kw),
        "empty": lambda **kw: flow.empty(2, 3, **kw),
        "empty_like": lambda **kw: flow.empty_like(x, **kw),
        "arange": lambda **kw: flow.arange(1, 10, 2, **kw),
        "linspace": lambda **kw: flow.linspace(0, 1, 5, **kw),
        "randn": lambda **kw: flow.randn(3, 4, **kw),
        "rand": lambda **kw: flow.rand(5, dtype=flow.float64, **kw),
        "randint": lambda **kw: flow.randint(2, 10, (3, 4), **kw),
        "normal": lambda **kw: flow.normal(1.0, 2.0, (6,), **kw),
        "randn_like": lambda **kw: flow.randn_like(x, **kw),
        "rand_like": lambda **kw: flow.rand_like(x, **kw),
    }.items():
        flow.manual_seed(1234)
        out[name] = make() if device is None else make(device=device)
    return out


@pytest.mark.parametrize("device", ["cpu", "cpu:0", flow.device("cpu")])
def test_creation_functions_take_a_cpu_device_and_equal_the_default(device):
    default = _creations(None)
    placed = _creations(device)
    for name, t in placed.items():
        assert str(t.device) == "cpu:0", name
        assert t.dtype == default[name].dtype and t.shape == default[name].shape, name
        np.testing.assert_array_equal(t.numpy(), default[name].numpy(), err_msg=name)
    assert flow.zeros(2, device="cpu", requires_grad=True).requires_grad


def test_like_functions_keep_the_input_device():
    x = flow.tensor([1.0, 2.0])
    for fn in [flow.zeros_like, flow.ones_like, flow.randn_like, flow.rand_like,
               lambda t: flow.full_like(t, 3.0)]:
        assert str(fn(x).device) == str(x.device)
    if flow.cuda.is_available():
        y = x.cuda()
        for fn in [flow.zeros_like, flow.ones_like, flow.randn_like, flow.rand_like,
                   lambda t: flow.full_like(t, 3.0)]:
            assert str(fn(y).device) == "cuda:0"
        assert str(flow.zeros_like(y, device="cpu").device) == "cpu:0"


def test_a_cuda_device_without_a_gpu_raises_as_every_cuda_path_does():
    if flow.cuda.is_available():  # with a GPU: tests/python/test_cuda_random_optim_fused.py
        pytest.skip("a CUDA device is present")
    x = flow.tensor([1.0])
    for name, make in [("zeros", lambda d: flow.zeros(2, device=d)),
                       ("ones", lambda d: flow.ones(2, device=d)),
                       ("full", lambda d: flow.full((2,), 1.0, device=d)),
                       ("zeros_like", lambda d: flow.zeros_like(x, device=d)),
                       ("full_like", lambda d: flow.full_like(x, 1.0, device=d)),
                       ("empty", lambda d: flow.empty(2, device=d)),
                       ("empty_like", lambda d: flow.empty_like(x, device=d)),
                       ("arange", lambda d: flow.arange(3, device=d)),
                       ("linspace", lambda d: flow.linspace(0, 1, 3, device=d)),
                       ("randn", lambda d: flow.randn(2, device=d)),
                       ("rand", lambda d: flow.rand(2, device=d)),
                       ("randint", lambda d: flow.randint(5, (2,), device=d)),
                       ("normal", lambda d: flow.normal(0.0, 1.0, (2,), device=d)),
                       ("randn_like", lambda d: flow.randn_like(x, device=d))]:
        for device in ["cuda", "cuda:1", flow.device("cuda:0")]:
            with pytest.raises(RuntimeError, match=rf"\[{name}\] device {device} needs a CUDA "
                                                   r"device. However, there is none: "):
                make(device)
    with pytest.raises(ValueError, match=r"\[zeros\] device must be 'cpu' or 'cuda\[:index\]'. "
                                         r"However, got 'tpu'"):
        flow.zeros(2, device="tpu")


def test_every_device_is_an_instance_of_flow_device():
    # As isinstance(x, torch.device): made from a string, taken from a tensor, or the meta device.
    for d in (flow.device("cpu"), flow.device("cuda", 0), flow.ones(2).device, flow.device("meta")):
        assert isinstance(d, flow.device), d
    assert not isinstance("cpu", flow.device)
    assert flow.device(flow.device("cpu")) == flow.device("cpu")
    with pytest.raises(TypeError, match=r"\[device\] takes a device string"):
        flow.device(3)
