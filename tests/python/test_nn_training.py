"""flow.nn: parameter initialisation (nn.init), a small training run, and clip_grad_norm_."""

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import nn
from numpy_helpers import _np, _softmax


# ---- nn.init (issue 14) ------------------------------------------------------------------------
def test_init_functions_follow_torchs_formulas():
    torch = pytest.importorskip("torch")
    for name, args in (("linear", ()), ("tanh", ()), ("relu", ()), ("leaky_relu", (0.2,)),
                       ("selu", ())):
        assert nn.init.calculate_gain(name, *args) == pytest.approx(
            torch.nn.init.calculate_gain(name, *args))
    flow.manual_seed(0)
    w = nn.Parameter(flow.zeros(300, 200))
    nn.init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * np.sqrt(6.0 / 500)
    values = w.numpy()
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.98 * bound
    assert values.std() == pytest.approx(bound / np.sqrt(3), rel=0.02)
    nn.init.kaiming_uniform_(w, a=np.sqrt(5))  # what torch's nn.Linear uses
    bound = np.sqrt(3.0) * np.sqrt(2.0 / (1 + 5)) / np.sqrt(200)
    assert np.abs(w.numpy()).max() <= bound and w.numpy().std() == pytest.approx(
        bound / np.sqrt(3), rel=0.02)
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert w.numpy().std() == pytest.approx(np.sqrt(2.0 / 300), rel=0.02)
    nn.init.xavier_normal_(w)
    assert w.numpy().std() == pytest.approx(np.sqrt(2.0 / 500), rel=0.02)
    assert w.requires_grad and w.grad is None
    with pytest.raises(ValueError, match=r"\[kaiming_uniform_\] needs a tensor with at least 2"):
        nn.init.kaiming_uniform_(nn.Parameter(flow.zeros(3)))


def test_init_of_a_global_parameter_gives_each_rank_its_piece_of_the_same_values():
    placement = flow.placement("cpu", ranks=[0])
    flow.manual_seed(4)
    whole = nn.Parameter(flow.zeros(6, 4))
    nn.init.xavier_uniform_(whole)
    layer = nn.Linear(4, 6, bias=False)
    layer.to_global(placement, flow.sbp.split(0))
    flow.manual_seed(4)
    nn.init.xavier_uniform_(layer.weight)
    np.testing.assert_array_equal(layer.weight.numpy(), whole.numpy())


# ---- training ----------------------------------------------------------------------------------


def _mlp_reference_losses(params, x, y, lr, steps):
    """The MLP of test_tiny_mlp_trains_like_numpy, trained with plain SGD in NumPy."""
    w1, b1, w2, b2 = (p.copy() for p in params)
    n = len(y)
    losses = []
    for _ in range(steps):
        h_pre = x @ w1.T + b1
        h = np.maximum(h_pre, 0)
        logits = h @ w2.T + b2
        probs = _softmax(logits)
        losses.append(-np.log(probs[np.arange(n), y]).mean())
        dlogits = (probs - np.eye(logits.shape[1])[y]) / n
        dw2, db2 = dlogits.T @ h, dlogits.sum(0)
        dh_pre = (dlogits @ w2) * (h_pre > 0)
        dw1, db1 = dh_pre.T @ x, dh_pre.sum(0)
        w1, b1, w2, b2 = w1 - lr * dw1, b1 - lr * db1, w2 - lr * dw2, b2 - lr * db2
    return losses, [w1, b1, w2, b2]


def test_tiny_mlp_trains_like_numpy():
    flow.manual_seed(21)
    model = nn.Sequential(nn.Linear(4, 16, dtype=flow.float64), nn.ReLU(),
                          nn.Linear(16, 3, dtype=flow.float64))
    rng = np.random.default_rng(12)
    x = rng.standard_normal((32, 4))
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    initial = [_np(p) for p in model.parameters()]
    optimizer = flow.optim.SGD(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    xt, yt = flow.tensor(x), flow.tensor(y)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = criterion(model(xt), yt)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    expected, final = _mlp_reference_losses(initial, x, y, lr=0.5, steps=20)
    np.testing.assert_allclose(losses, expected, rtol=1e-9)
    for p, e in zip(model.parameters(), final):
        np.testing.assert_allclose(_np(p), e, rtol=1e-8, atol=1e-10)
    assert losses[-1] < 0.6 * losses[0]


# ---- clip_grad_norm_ ---------------------------------------------------------------------------


def _params_with_grads(grads):
    params = []
    for g in grads:
        p = nn.Parameter(flow.zeros(*g.shape, dtype=flow.float64))
        p.grad = flow.tensor(g)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_matches_numpy(norm_type):
    rng = np.random.default_rng(13)
    grads = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    flat = np.concatenate([g.ravel() for g in grads])
    expected_norm = np.linalg.norm(flat, ord=norm_type)
    params = _params_with_grads(grads)
    total = nn.utils.clip_grad_norm_(params, max_norm=0.5, norm_type=norm_type)
    assert isinstance(total, flow.Tensor) and total.ndim == 0
    np.testing.assert_allclose(total.item(), expected_norm, rtol=1e-12)
    coef = 0.5 / (expected_norm + 1e-6)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(_np(p.grad), g * coef, rtol=1e-12)


def test_clip_grad_norm_leaves_small_gradients_unchanged():
    grads = [np.array([0.3, -0.4])]
    params = _params_with_grads(grads)
    params.append(nn.Parameter(flow.zeros(2)))  # no gradient: skipped
    total = nn.utils.clip_grad_norm_(iter(params), max_norm=1.0)
    np.testing.assert_allclose(total.item(), 0.5, rtol=1e-12)
    np.testing.assert_array_equal(params[0].grad.numpy(), grads[0])
    assert params[1].grad is None
    assert nn.utils.clip_grad_norm_([params[1]], 1.0).item() == 0.0
    single = _params_with_grads([np.array([3.0, 4.0])])[0]
    np.testing.assert_allclose(nn.utils.clip_grad_norm_(single, 1.0).item(), 5.0)
    np.testing.assert_allclose(single.grad.numpy(), [0.6, 0.8], rtol=1e-6)


def test_clip_grad_norm_errors():
    params = _params_with_grads([np.array([np.inf, 1.0])])
    with pytest.raises(RuntimeError, match="must be finite. However, got inf"):
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type must be positive or inf"):
        nn.utils.clip_grad_norm_(params, 1.0, norm_type=0)


def test_detach_in_a_graph_stops_the_gradient_as_in_eager():
    # Note [Detach in a graph]: a traced tensor's detach() is a value the gradient does not flow
    # through (it raised "a value of another graph's build()"): y * y.detach() trains with
    # gradient y, where y * y would with 2y.
    from train_graph import eager_and_graph_losses, seeded_linear

    x = flow.tensor(np.random.default_rng(12).standard_normal((5, 4)).astype(np.float32))
    make = seeded_linear(4, 3, lr=0.5, seed=13)

    def detached(model, t):
        y = model(t)
        return (y * y.detach()).mean()

    eager, graph = eager_and_graph_losses(make, detached, (x,))
    np.testing.assert_allclose(graph, eager, rtol=1e-6)
    _, undetached = eager_and_graph_losses(make, lambda m, t: (m(t) * m(t)).mean(), (x,))
    assert undetached[0] == pytest.approx(graph[0]) and undetached[1] != pytest.approx(graph[1])


def test_no_grad_in_a_graph_stops_the_gradient_as_in_eager():
    # Note [No grad in a trace]: a teacher run under no_grad inside build() is not trained
    # through its output, as eagerly (the graph used to differentiate it: the teacher's
    # weights moved, silently).
    from train_graph import eager_and_graph_losses, seeded_linear

    x = flow.tensor(np.random.default_rng(14).standard_normal((5, 4)).astype(np.float32))
    make = seeded_linear(4, 3, lr=0.5, seed=15)

    def distilled(model, t):
        with flow.no_grad():
            target = model(t) * 0.5  # the model as its own teacher: no gradient through it
        return ((model(t) - target) ** 2).mean()

    eager, graph = eager_and_graph_losses(make, distilled, (x,))
    np.testing.assert_allclose(graph, eager, rtol=1e-6)
    _, through = eager_and_graph_losses(make, lambda m, t: ((m(t) - m(t) * 0.5) ** 2).mean(),
                                        (x,))
    assert through[0] == pytest.approx(graph[0]) and through[1] != pytest.approx(graph[1])
