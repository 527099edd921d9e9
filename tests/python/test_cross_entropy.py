import numpy as np
import pytest

import gradcheck
import oneflowlike as flow
from train_graph import eager_and_graph_losses

F = flow.nn.functional


def _reference_loss(logits, labels):
    """-log softmax(logits)[label] over the last axis, per sample."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None].astype(np.int64), axis=-1)[..., 0]


@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_softmax_cross_entropy_matches_numpy(dtype, label_dtype):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 6)).astype(dtype) * 3
    labels = rng.integers(0, 6, size=(2, 3)).astype(label_dtype)
    loss = F.sparse_softmax_cross_entropy(flow.tensor(logits), flow.tensor(labels))
    assert loss.shape == (2, 3)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(loss.numpy(), _reference_loss(logits.astype(np.float64), labels),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_reductions_match_numpy(reduction):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((8, 5))
    labels = rng.integers(0, 5, size=8)
    loss = F.cross_entropy(flow.tensor(logits), flow.tensor(labels), reduction=reduction)
    per_sample = _reference_loss(logits, labels)
    expected = {"mean": per_sample.mean(), "sum": per_sample.sum(), "none": per_sample}[reduction]
    assert loss.shape == np.shape(expected)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)


def test_cross_entropy_moves_class_axis_one_last():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((2, 4, 3, 5))  # (N, C, d1, d2)
    labels = rng.integers(0, 4, size=(2, 3, 5))
    loss = F.cross_entropy(flow.tensor(logits), flow.tensor(labels), reduction="none")
    expected = _reference_loss(np.moveaxis(logits, 1, -1), labels)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)


def test_cross_entropy_unbatched_input():
    logits = np.array([1.0, 2.0, 0.5])
    target = flow._C.from_numpy(np.array(1))  # 0-d (flow.tensor gives (1,))
    loss = F.cross_entropy(flow.tensor(logits), target)
    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), _reference_loss(logits, np.array(1)), rtol=1e-12)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1000.0, -1000.0, 0.0]], dtype=np.float32)
    loss = F.cross_entropy(flow.tensor(logits), flow.tensor([1]))
    np.testing.assert_allclose(loss.numpy(), 2000.0, rtol=1e-6)


def test_cross_entropy_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 5))
    labels = rng.integers(0, 5, size=4)
    for reduction in ["mean", "sum", "none"]:
        # (1,) rather than (): gradcheck builds its output weights with flow.tensor.
        gradcheck.check_gradients(
            lambda x, t, r=reduction: flow.reshape(F.cross_entropy(x, t, reduction=r), (-1,)),
            logits, labels)


def test_sparse_softmax_cross_entropy_gradient_over_extra_axes():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((2, 3, 4))
    labels = rng.integers(0, 4, size=(2, 3))
    gradcheck.check_gradients(F.sparse_softmax_cross_entropy, logits, labels)


def test_cross_entropy_mean_gradient_is_softmax_minus_onehot_over_n():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((6, 4))
    labels = rng.integers(0, 4, size=6)
    x = flow.tensor(logits, requires_grad=True)
    F.cross_entropy(x, flow.tensor(labels)).backward()
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    probs[np.arange(6), labels] -= 1
    np.testing.assert_allclose(x.grad.numpy(), probs / 6, rtol=1e-10, atol=1e-12)


def test_label_out_of_range_raises_index_error():
    logits = flow.tensor(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(IndexError, match="got label 3 at position 1"):
        F.cross_entropy(logits, flow.tensor([0, 3]))
    with pytest.raises(IndexError, match="C = 3 classes"):
        F.cross_entropy(logits, flow.tensor([-100, 0]), ignore_index=None)
    with pytest.raises(IndexError, match="got label -1 at position 0"):
        F.cross_entropy(logits, flow.tensor([-1, 0]))  # only ignore_index is ignored


def test_bad_shapes_and_arguments_raise():
    logits = flow.tensor(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"labels must have the shape of logits without the last"):
        F.cross_entropy(logits, flow.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"target must have shape \(2, 5\)"):
        F.cross_entropy(flow.tensor(np.zeros((2, 3, 5))), flow.tensor(np.zeros((2, 3), np.int64)))
    with pytest.raises(TypeError, match="labels must be int32 or int64"):
        F.cross_entropy(logits, flow.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(logits, flow.tensor([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]. However, got 1.5"):
        F.cross_entropy(logits, flow.tensor([0, 1]), label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"weight must have shape \(3,\).*got \(4,\)"):
        F.cross_entropy(logits, flow.tensor([0, 1]), flow.ones(4))


@pytest.mark.parametrize("kwargs", [
    {}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.1},
    {"weight": True}, {"weight": True, "label_smoothing": 0.2},
    {"weight": True, "label_smoothing": 0.3, "reduction": "none"},
    {"weight": True, "label_smoothing": 0.3, "reduction": "sum"},
    {"ignore_index": 4}, {"ignore_index": 4, "label_smoothing": 0.5}, {"ignore_index": None},
])
def test_ignore_index_weights_and_label_smoothing_match_torch(kwargs):
    """Note [Ignored targets]: torch's default ignore_index (-100), another one, class weights
    and label smoothing, alone and together, forward and backward, over (N, C, d) too."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5, 3)).astype(np.float32)
    t = rng.integers(0, 5, (6, 3))
    if kwargs.get("ignore_index", -100) == -100:
        t[[1, 4], [0, 2]] = -100
    w = rng.random(5).astype(np.float32) + 0.5
    ours = {k: (flow.tensor(w) if k == "weight" else v) for k, v in kwargs.items()}
    theirs = {k: (torch.tensor(w) if k == "weight" else v) for k, v in kwargs.items()}
    if theirs.get("ignore_index", 0) is None:
        del theirs["ignore_index"]
    xt = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.cross_entropy(xt, torch.tensor(t), **theirs)
    want.sum().backward()
    xf = flow.tensor(x, requires_grad=True)
    got = F.cross_entropy(xf, flow.tensor(t), **ours)
    got.sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-7)
    module = flow.nn.CrossEntropyLoss(**ours)
    np.testing.assert_array_equal(module(flow.tensor(x), flow.tensor(t)).numpy(), got.numpy())


def test_every_target_ignored_gives_nan_mean_as_torch_and_no_gradient():
    x = flow.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    loss = F.cross_entropy(x, flow.tensor([-100, -100]))
    assert np.isnan(loss.numpy())
    F.cross_entropy(x, flow.tensor([-100, -100]), reduction="sum").backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3), np.float32))


def test_ignored_targets_weights_and_smoothing_train_alike_in_a_graph_and_eagerly():
    rng = np.random.default_rng(1)
    x = flow.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    t = rng.integers(0, 3, 8)
    t[[2, 5]] = -100
    t = flow.tensor(t)
    w = flow.tensor(np.array([0.5, 1.0, 2.0], np.float32))

    def make():
        flow.manual_seed(0)
        model = flow.nn.Linear(4, 3)
        return model, flow.optim.SGD(model.parameters(), lr=0.5)

    loss_fn = flow.nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)
    eager_losses, graph_losses = eager_and_graph_losses(
        make, lambda model, x, t: loss_fn(model(x), t), (x, t))
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-6)
    assert graph_losses[2] < graph_losses[0]
