"""Ops composed of others, against torch forward and backward: tril/triu, isnan/isinf/isfinite/
nan_to_num, norm/linalg.vector_norm, flip/roll/repeat/repeat_interleave, outer/addmm, square,
clamp_min/clamp_max, Tensor.mT; the logical ops and the &, |, ^, ~ of masks; format() of a 0-d
tensor and Tensor.stride(). Their SBP signatures and kernels are
their parts': each also runs on a global tensor (eagerly, one compiled graph) and in nn.Graph."""

import math

import numpy as np
import pytest

import oneflowlike as flow

torch = pytest.importorskip("torch")

CASES = {
    "tril": (lambda m, x: m.tril(x), (4, 5)),
    "tril k=1": (lambda m, x: m.tril(x, 1), (2, 4, 5)),
    "triu k=-2": (lambda m, x: m.triu(x, -2), (5, 4)),
    "triu": (lambda m, x: x.triu(), (3, 3)),
    "nan_to_num": (lambda m, x: m.nan_to_num(x, nan=1.5), (3, 4)),
    "nan_to_num bounds": (lambda m, x: x.nan_to_num(posinf=7.0, neginf=-8.0), (3, 4)),
    "norm": (lambda m, x: m.norm(x), (3, 4)),
    "norm dim": (lambda m, x: x.norm(dim=1, keepdim=True), (3, 4)),
    "norm p=1 dims": (lambda m, x: m.norm(x, p=1, dim=(0, 2)), (2, 3, 4)),
    "norm p=3": (lambda m, x: m.norm(x, p=3, dim=-1), (3, 4)),
    "vector_norm inf": (lambda m, x: m.linalg.vector_norm(x, math.inf, dim=0), (3, 4)),
    "vector_norm -inf": (lambda m, x: m.linalg.vector_norm(x, -math.inf), (3, 4)),
    "flip": (lambda m, x: m.flip(x, (0, 2)), (2, 3, 4)),
    "flip method": (lambda m, x: x.flip(-1), (3, 4)),
    "roll": (lambda m, x: m.roll(x, 2, 1), (3, 5)),
    "roll dims": (lambda m, x: m.roll(x, (1, -3), (0, 1)), (3, 5)),
    "roll flat": (lambda m, x: m.roll(x, 4), (3, 5)),
    "repeat": (lambda m, x: x.repeat(2, 3), (2, 3)),
    "repeat new dims": (lambda m, x: x.repeat(2, 1, 2), (3,)),
    "repeat_interleave": (lambda m, x: m.repeat_interleave(x, 3, dim=1), (2, 3, 4)),
    "repeat_interleave flat": (lambda m, x: x.repeat_interleave(2), (2, 3)),
    "repeat_interleave last": (lambda m, x: x.repeat_interleave(2, -1), (2, 3)),
    "square": (lambda m, x: m.square(x), (3, 4)),
    "clamp_min": (lambda m, x: x.clamp_min(0.1), (3, 4)),
    "clamp_max": (lambda m, x: m.clamp_max(x, -0.2), (3, 4)),
    "mT": (lambda m, x: x.mT, (2, 3, 4)),
}


def _values(shape, special=False):
    x = np.random.default_rng(sum(shape)).standard_normal(shape)
    if special:
        flat = x.reshape(-1)
        flat[::5] = np.nan
        flat[1::7] = np.inf
        flat[2::9] = -np.inf
    return x


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_composite_op_matches_torch_forward_and_backward(name, dtype):
    fn, shape = CASES[name]
    x = _values(shape, special="nan_to_num" in name).astype(dtype)
    xt = torch.tensor(x, requires_grad=True)
    want = fn(torch, xt)
    xf = flow.tensor(x, requires_grad=True)
    got = fn(flow, xf)
    assert tuple(got.shape) == tuple(want.shape) and got.dtype.name == dtype
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    seed = torch.tensor(_values(tuple(want.shape) or (1,)).reshape(want.shape).astype(dtype))
    (want * seed).sum().backward()
    (got * flow.tensor(seed.numpy())).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)


def test_the_2_norm_of_zeros_has_a_zero_gradient_as_torch():
    x = flow.zeros(3, requires_grad=True)
    n = flow.norm(x)
    n.backward()
    assert float(n.numpy()) == 0.0
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3, np.float32))


def test_nonfinite_checks_match_torch_on_every_dtype():
    x = _values((4, 5), special=True)
    for dtype in ("float32", "float64", "float16", "bfloat16", "int64"):
        t = torch.tensor(x).to(getattr(torch, dtype)) if dtype != "int64" else \
            torch.tensor(np.nan_to_num(x, nan=0, posinf=9, neginf=-9).astype(np.int64))
        f = flow.tensor(t.float().numpy() if dtype == "bfloat16" else t.numpy()).to(
            getattr(flow, dtype))
        for op in ("isnan", "isinf", "isfinite"):
            got, want = getattr(flow, op)(f), getattr(torch, op)(t)
            assert got.dtype == flow.bool, (op, dtype)
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{op} {dtype}")
        if dtype != "int64":
            got = flow.nan_to_num(f).to(flow.float64).numpy()
            want = torch.nan_to_num(t).double().numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"nan_to_num {dtype}")


def test_outer_and_addmm_match_torch():
    a, b = _values((3,)), _values((4,))
    np.testing.assert_allclose(flow.outer(flow.tensor(a), flow.tensor(b)).numpy(),
                               np.outer(a, b), rtol=1e-12)
    inp, m1, m2 = _values((1, 4)), _values((3, 5)), _values((5, 4))
    want = torch.addmm(*(torch.tensor(v) for v in (inp, m1, m2)), beta=0.5, alpha=2.0)
    got = flow.addmm(*(flow.tensor(v) for v in (inp, m1, m2)), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    nan = flow.tensor(np.full((3, 4), np.nan))
    assert not np.isnan(flow.addmm(nan, flow.tensor(m1), flow.tensor(m2), beta=0).numpy()).any()


def test_format_and_stride_as_torch():
    loss = flow.tensor(1.23456)
    assert f"{loss:.3f}" == "1.235" and f"{loss}" == f"{torch.tensor(1.23456).item()}"
    assert f"{flow.ones(2)}" == str(flow.ones(2))
    with pytest.raises(TypeError, match=r"shape \(2,\) takes no format spec"):
        f"{flow.ones(2):.2f}"
    assert flow.ones(2, 3, 4).stride() == torch.ones(2, 3, 4).stride()
    assert flow.ones(2, 3).stride(0) == 3 and flow.ones(2, 3).is_contiguous()


def test_bad_arguments_name_the_op():
    with pytest.raises(ValueError, match=r"\[tril\] needs a tensor of at least 2 dims"):
        flow.tril(flow.ones(3))
    with pytest.raises(ValueError, match=r"\[roll\] takes one shift per dim"):
        flow.roll(flow.ones(3, 3), (1, 2), 0)
    with pytest.raises(ValueError, match=r"\[repeat\] takes at least one size per dim"):
        flow.ones(2, 3).repeat(2)
    with pytest.raises(IndexError, match=r"\[flip\] dimension out of range"):
        flow.flip(flow.ones(2, 3), 2)
    with pytest.raises(NotImplementedError, match=r"\[norm\] p='nuc'"):
        flow.norm(flow.ones(2, 2), p="nuc")


def test_composite_ops_on_a_global_tensor_and_in_a_graph():
    p = flow.placement("cpu", ranks=[0])
    x = _values((4, 6)).astype(np.float32)
    g = flow.tensor(x, placement=p, sbp=flow.sbp.split(0))
    for name in ("tril k=1", "roll dims", "flip method", "norm dim", "nan_to_num", "repeat",
                 "repeat_interleave"):
        fn, _ = CASES[name]
        got = fn(flow, g)
        want = fn(torch, torch.tensor(x))
        assert got.is_global
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=name)

    class Graph(flow.nn.Graph):
        def build(self, t):
            return flow.tril(t, -1) + t.flip(0).roll(1, 1) + t.norm(dim=0)

    want = (torch.tril(torch.tensor(x), -1) + torch.tensor(x).flip(0).roll(1, 1)
            + torch.tensor(x).norm(dim=0))
    np.testing.assert_allclose(Graph()(flow.tensor(x)).numpy(), want.numpy(), rtol=1e-6)


def test_logical_ops_and_mask_operators_match_torch():
    rng = np.random.default_rng(3)
    a, b = rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5
    n = rng.integers(-2, 3, (3, 4))
    ours = {k: flow.tensor(v) for k, v in (("a", a), ("b", b), ("n", n))}
    theirs = {k: torch.tensor(v) for k, v in (("a", a), ("b", b), ("n", n))}
    cases = [lambda m, t: t["a"] & t["b"], lambda m, t: t["a"] | t["b"],
             lambda m, t: t["a"] ^ t["b"], lambda m, t: ~t["a"], lambda m, t: t["a"] & True,
             lambda m, t: False | t["b"], lambda m, t: m.logical_and(t["n"], t["b"]),
             lambda m, t: m.logical_or(t["n"], t["n"] * 0), lambda m, t: m.logical_xor(t["n"], t["a"]),
             lambda m, t: m.logical_not(t["n"]), lambda m, t: t["n"].logical_not()]
    for i, fn in enumerate(cases):
        got, want = fn(flow, ours), fn(torch, theirs)
        assert got.dtype == flow.bool, i
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=str(i))
    # Integer &, |, ^, ~ are torch's bitwise operations: refused, not run as logical ones.
    with pytest.raises(TypeError, match=r"\[__and__\] works on bool tensors \(masks\) only: "
                                        r"bitwise operations on other dtypes are not supported. "
                                        r"However, got oneflowlike.int64"):
        ours["n"] & ours["n"]
    with pytest.raises(TypeError, match=r"\[__or__\].*However, got int"):
        ours["a"] | 1
    with pytest.raises(TypeError, match=r"\[__invert__\] ~ works on bool tensors"):
        ~ours["n"]
    # On a global tensor, and in a graph.
    p = flow.placement("cpu", ranks=[0])
    g = flow.tensor(a, placement=p, sbp=flow.sbp.split(0))
    got = (g & flow.tensor(b, placement=p, sbp=flow.sbp.broadcast)) | ~g
    assert got.is_global
    np.testing.assert_array_equal(got.numpy(), (a & b) | ~a)

    class Graph(flow.nn.Graph):
        def build(self, x, y):
            return (x ^ y) | ~x

    np.testing.assert_array_equal(Graph()(flow.tensor(a), flow.tensor(b)).numpy(), (a ^ b) | ~a)


def test_repeat_interleave_refuses_what_it_does_not_do():
    with pytest.raises(TypeError, match=r"\[repeat_interleave\] repeats must be an int \(a tensor "
                                        r"of repeats per element is not supported\). However, "
                                        r"got Tensor"):
        flow.ones(3).repeat_interleave(flow.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"repeats must be non-negative. However, got -1"):
        flow.repeat_interleave(flow.ones(3), -1)


def _probabilities(shape, seed):
    return 1.0 / (1.0 + np.exp(-np.random.default_rng(seed).standard_normal(shape)))


LOSSES = {
    "l1_loss": (lambda F, x, y: F.l1_loss(x, y), "real"),
    "l1_loss sum": (lambda F, x, y: F.l1_loss(x, y, reduction="sum"), "real"),
    "smooth_l1_loss": (lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.5), "real"),
    "smooth_l1_loss beta 0": (lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.0), "real"),
    "huber_loss none": (lambda F, x, y: F.huber_loss(x, y, reduction="none", delta=0.7), "real"),
    "bce_with_logits": (lambda F, x, y: F.binary_cross_entropy_with_logits(x, y), "prob"),
    "bce_with_logits weights": (lambda F, x, y: F.binary_cross_entropy_with_logits(
        x, y, weight=y.detach() * 0 + 0.5, pos_weight=y[0].detach() * 0 + 3.0), "prob"),
    "bce": (lambda F, x, y: F.binary_cross_entropy(F.sigmoid(x), y), "prob"),
    "kl_div batchmean": (lambda F, x, y: F.kl_div(F.log_softmax(x, -1), y / y.sum(-1, keepdim=True),
                                                  reduction="batchmean"), "prob"),
    "kl_div log_target": (lambda F, x, y: F.kl_div(F.log_softmax(x, -1), F.log_softmax(y, -1),
                                                   reduction="sum", log_target=True), "real"),
    "normalize": (lambda F, x, y: F.normalize(x, dim=-1) + y, "real"),
    "cosine_similarity": (lambda F, x, y: F.cosine_similarity(x, y, dim=1), "real"),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_losses_and_similarities_match_torch_forward_and_backward(name):
    fn, kind = LOSSES[name]
    x = _values((4, 5)).astype(np.float64)
    y = _probabilities((4, 5), 3) if kind == "prob" else _values((4, 5)).astype(np.float64) * 0.7
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    want = fn(torch.nn.functional, xt, yt)
    xf, yf = flow.tensor(x, requires_grad=True), flow.tensor(y, requires_grad=True)
    got = fn(flow.nn.functional, xf, yf)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    if yt.grad is not None and name not in ("kl_div batchmean",):
        np.testing.assert_allclose(yf.grad.numpy(), yt.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"reduction": "none"},
                                    {"ignore_index": 2}, {"weight": True}])
def test_nll_loss_matches_torch_with_ignored_targets_and_weights(kwargs):
    x = np.log(_probabilities((6, 4, 3), 5))
    t = np.random.default_rng(6).integers(0, 4, (6, 3))
    t[1, 2] = -100
    w = np.array([0.5, 1.0, 2.0, 1.5])
    ours = {k: (flow.tensor(w) if k == "weight" else v) for k, v in kwargs.items()}
    theirs = {k: (torch.tensor(w) if k == "weight" else v) for k, v in kwargs.items()}
    if "ignore_index" in kwargs:
        t[1, 2] = 2
    xt = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.nll_loss(xt, torch.tensor(t), **theirs)
    xf = flow.tensor(x, requires_grad=True)
    got = flow.nn.functional.nll_loss(xf, flow.tensor(t), **ours)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    module = flow.nn.NLLLoss(**ours)
    np.testing.assert_allclose(module(flow.tensor(x), flow.tensor(t)).numpy(), got.numpy())


def test_loss_modules_take_torchs_arguments():
    x, y = flow.tensor(_values((3, 2))), flow.tensor(_probabilities((3, 2), 1))
    assert float(flow.nn.L1Loss(reduction="sum")(x, y).numpy()) == pytest.approx(
        float(flow.nn.functional.l1_loss(x, y, reduction="sum").numpy()))
    assert float(flow.nn.HuberLoss(delta=0.5)(x, y).numpy()) == pytest.approx(
        float(flow.nn.functional.huber_loss(x, y, delta=0.5).numpy()))
    assert flow.nn.BCEWithLogitsLoss(pos_weight=flow.tensor(2.0)).pos_weight is not None
    with pytest.raises(TypeError, match=r"\[L1Loss\] takes \['size_average', 'reduce', "
                                        r"'reduction'\]"):
        flow.nn.L1Loss(beta=1.0)
    with pytest.raises(ValueError, match=r"\[MSELoss\] size_average is deprecated in torch"):
        flow.nn.MSELoss(True)
    with pytest.raises(ValueError, match=r"\[NLLLoss\] reduction must be one of"):
        flow.nn.NLLLoss(reduction="avg")
    # torch's positions: (weight, size_average, ignore_index, ...); weight is a buffer.
    w = flow.tensor([0.5, 1.0])
    loss = flow.nn.CrossEntropyLoss(w, None, 1)
    assert loss.ignore_index == 1 and loss.weight is w
    assert list(loss.state_dict()) == ["weight"]
    holder = flow.nn.Sequential(flow.nn.Linear(2, 2))
    holder.loss = flow.nn.BCEWithLogitsLoss(pos_weight=flow.tensor([2.0, 3.0]))
    assert "loss.pos_weight" in holder.state_dict()
    assert holder.double().loss.pos_weight.dtype == flow.float64
    with pytest.raises(ValueError, match=r"\[l1_loss\] input and target must have one shape"):
        flow.nn.functional.l1_loss(x, y[:1])


def test_edges_from_a_review_behave_as_torch():
    # 16-bit norms are summed in float32 (300^2 overflowed float16).
    assert float(flow.norm(flow.full((4,), 300.0).to(flow.float16)).numpy()) == 600.0
    big = np.random.default_rng(0).standard_normal(20000).astype(np.float16) * 3
    np.testing.assert_allclose(float(flow.norm(flow.tensor(big)).numpy()),
                               float(torch.norm(torch.tensor(big)).item()), rtol=1e-3)
    # Copies where nothing moved: writes into the result leave the input alone.
    for fn in (lambda t: t.flip(0), lambda t: flow.roll(t, 0, 1), lambda t: flow.roll(t, 3, 1)):
        x = flow.ones(1, 3)
        fn(x).add_(1)
        np.testing.assert_array_equal(x.numpy(), np.ones((1, 3), np.float32))
    ints = flow.ones(2, dtype=flow.int64)
    assert flow.nan_to_num(ints) is not ints
    assert f"{flow.tensor(5):03d}" == "005" and f"{flow.tensor(True)}" == "True"
    with pytest.raises(IndexError, match=r"\[stride\] a 0-d tensor has no dim 0"):
        flow.tensor(1.0).stride(0)
    z = flow.ones(3, requires_grad=True)
    flow.norm(z, p=0).backward()  # a count: zero gradient, as torch's
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros(3, np.float32))
    assert tuple(flow.roll(flow.ones(2, 3), (1,)).shape) == (2, 3)
    assert tuple(flow.multinomial(flow.zeros(0, 3), 1).shape) == (0, 1)
