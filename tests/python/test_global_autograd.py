"""Autograd of eager global tensors in one process (Note [Eager global autograd] in
framework/global_autograd.py); across processes see test_distributed_frontend.py's eager
training tests."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn

P = flow.placement("cpu", ranks=[0])
S0, B = flow.sbp.split(0), flow.sbp.broadcast
F = nn.functional


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal((3, 2)).astype(np.float32))


def test_matmul_under_split_data_gives_the_local_gradient():
    # The report: x split, w broadcast with requires_grad, loss.backward().
    xs, ws = _arrays()
    x = flow.tensor(xs, placement=P, sbp=S0)
    w = flow.tensor(ws, placement=P, sbp=B)
    w.requires_grad = True
    loss = (x @ w).tanh().sum()
    assert not loss.is_leaf and loss.grad_fn is not None and w.is_leaf
    loss.backward()
    xl, wl = flow.tensor(xs), flow.tensor(ws, requires_grad=True)
    (xl @ wl).tanh().sum().backward()
    assert w.grad.sbp == w.sbp and w.grad.placement == P
    np.testing.assert_allclose(w.grad.numpy(), wl.grad.numpy(), rtol=1e-6)


def test_gradients_accumulate_flow_through_to_global_and_respect_no_grad():
    xs, ws = _arrays(1)
    w = flow.tensor(ws, placement=P, sbp=B)
    w.requires_grad = True
    x = flow.tensor(xs, placement=P, sbp=B)
    for _ in range(2):
        y = (x @ w.to_global(sbp=flow.sbp.split(1))).to_global(sbp=B)
        (y * y).sum().backward()
    expected = 2 * (2 * xs.T @ (xs @ ws))
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-5)
    with flow.no_grad():
        z = (x @ w).sum()
    assert z.grad_fn is None and not z.requires_grad
    assert (x @ w.detach()).grad_fn is None


def test_sgd_and_clipping_step_global_parameters_as_local_ones():
    xs, ws = _arrays(2)
    results = []
    for make in (lambda a, s: flow.tensor(a, placement=P, sbp=s), lambda a, s: flow.tensor(a)):
        flow.manual_seed(3)
        model = nn.Linear(3, 2)
        if make(xs, B).is_global:
            model.to_global(P, B)
        opt = flow.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = F.mse_loss(model(make(xs, S0)), make(np.ones((4, 2), np.float32), S0))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            losses.append(float(loss.numpy()))
        results.append((losses, model.weight.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5)


def test_misuses_are_refused_naming_the_problem():
    xs, ws = _arrays(3)
    x = flow.tensor(xs, placement=P, sbp=B)
    with pytest.raises(RuntimeError, match=r"\[backward\] the tensor does not require grad"):
        (x * 2.0).sum().backward()
    w = flow.tensor(ws, placement=P, sbp=B)
    w.requires_grad = True
    with pytest.raises(RuntimeError, match=r"implicitly created only for a tensor of one"):
        (x @ w).backward()
    # A random op compiled into an op's graph would redraw its mask in the backward (no public
    # function compiles one any more: dropout and attention's dropout_p draw as F.dropout's
    # eager global form).
    from oneflowlike.framework import global_tensor
    from oneflowlike.ops import random

    y = global_tensor.apply(random.dropout, (x @ w,), {"p": 0.5}, name="dropout")
    with pytest.raises(RuntimeError, match=r"draws random numbers in a compiled graph"):
        y.sum().backward()
    with pytest.raises(ValueError, match=r"\[grad\] must have the tensor's shape \(3, 2\)"):
        w.grad = flow.zeros(2, 2, placement=P, sbp=B)


# Note [Eager global dropout]: the one-device masks and values, bit for bit, under every SBP
# (a partial sum too), and the gradient of that mask.
@pytest.mark.parametrize("sbp", [S0, B, flow.sbp.partial_sum], ids=["S0", "B", "P"])
def test_dropout_on_global_tensors_drops_what_one_device_drops(sbp):
    xs, ws = _arrays(5)
    results = []
    for make in (lambda a, s: flow.tensor(a, placement=P, sbp=s), lambda a, s: flow.tensor(a)):
        flow.manual_seed(11)
        x, w = make(xs, sbp), make(ws, B)
        w.requires_grad = True
        ys = [F.dropout(x @ w, p=0.4) for _ in range(2)]  # each call draws its own mask
        (ys[0] * ys[0] + ys[1]).sum().backward()
        results.append(([y.numpy() for y in ys], w.grad.numpy()))
    (global_ys, global_grad), (local_ys, local_grad) = results
    for g, l in zip(global_ys, local_ys):
        np.testing.assert_array_equal(g, l)
        assert 0 < (l == 0).sum() < l.size
    assert not np.array_equal(local_ys[0] == 0, local_ys[1] == 0)
    np.testing.assert_allclose(global_grad, local_grad, rtol=1e-6)


# Attention with dropout_p on global tensors runs op by op, its dropout drawn as F.dropout's
# eager global form: the one-device values and gradients (and TP's head split, S(1)).
@pytest.mark.parametrize("sbp", [S0, flow.sbp.split(1), B], ids=["S0", "S1", "B"])
def test_attention_dropout_on_global_tensors_trains_as_on_one_device(sbp):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((2, 4, 6, 8)).astype(np.float32) for _ in range(3)]
    mask = rng.random((6, 6)) > 0.3
    results = []
    for make in (lambda a, s: flow.tensor(a, placement=P, sbp=s), lambda a, s: flow.tensor(a)):
        outs = []
        for kwargs in ({"is_causal": True}, {"attn_mask": make(mask, B)}):
            flow.manual_seed(5)
            q, k, v = (make(a, sbp) for a in arrays)
            for t in (q, k, v):
                t.requires_grad = True
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, **kwargs)
            (y * y).sum().backward()
            outs.append([y.numpy()] + [t.grad.numpy() for t in (q, k, v)])
        results.append(outs)
    for global_out, local_out in zip(*results):
        np.testing.assert_allclose(global_out[0], local_out[0], rtol=1e-5, atol=1e-6)
        for g, l in zip(global_out[1:], local_out[1:]):
            np.testing.assert_allclose(g, l, rtol=1e-4, atol=1e-5)
    # The weights were dropped: without dropout the output differs.
    flow.manual_seed(5)
    plain = F.scaled_dot_product_attention(*(flow.tensor(a) for a in arrays), is_causal=True)
    assert not np.allclose(plain.numpy(), results[1][0][0])


def test_dropout_on_global_tensors_keeps_the_functional_contract():
    xs, _ = _arrays(6)
    x = flow.tensor(xs, placement=P, sbp=S0)
    x.requires_grad = True
    assert F.dropout(x, p=0.0) is x and F.dropout(x, p=0.9, training=False) is x
    y = F.dropout(x, p=1.0)
    y.sum().backward()
    assert not y.numpy().any() and not x.grad.numpy().any()
    with pytest.raises(ValueError, match=r"\[dropout\] p must be a probability in \[0, 1\]"):
        F.dropout(x, p=1.5)
    with pytest.raises(NotImplementedError, match=r"inplace=True"):
        F.dropout(x, p=0.5, inplace=True)
    with pytest.raises(TypeError, match=r"\[dropout\] x must have a floating dtype"):
        F.dropout(flow.ones(4, 3, dtype=flow.int64, placement=P, sbp=S0), p=0.5)
    module = nn.Dropout(0.5)
    y = module(x)
    assert y.sbp == x.sbp and module.eval()(x) is x
    x.grad = None
    (y * y).sum().backward()  # the one-op dropout graph refused this
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 2 * y.numpy() * 2.0, 0.0),
                               rtol=1e-6)


def test_optimizer_state_of_global_parameters_moves_to_another_layout():
    xs, _ = _arrays(4)
    x = flow.tensor(xs, placement=P, sbp=S0)

    def make(split):
        flow.manual_seed(5)
        model = nn.Linear(3, 2).to_global(P, B)
        if split:
            model.weight = model.weight.to_global(sbp=S0)
        return model, flow.optim.AdamW(model.parameters(), lr=0.1)

    def step(model, opt):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()

    model, opt = make(False)
    step(model, opt)
    state = opt.state_dict()
    exp_avg = state["state"][0]["exp_avg"]
    assert exp_avg.is_global and exp_avg.sbp == model.weight.sbp
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    step(model, opt)
    # The same state on a model whose weight is split: the same next step.
    other, other_opt = make(True)
    for name, value in weights.items():
        getattr(other, name).copy_(flow.tensor(value, placement=P, sbp=getattr(other, name).sbp))
    other_opt.load_state_dict(state)
    step(other, other_opt)
    np.testing.assert_allclose(other.weight.numpy(), model.weight.numpy(), rtol=1e-6)
    local_model = nn.Linear(3, 2)
    local_opt = flow.optim.AdamW(local_model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"the saved state is of a global parameter"):
        local_opt.load_state_dict(state)


def test_an_input_written_in_place_before_backward_is_refused():
    xs, ws = _arrays(5)
    x = flow.tensor(xs, placement=P, sbp=S0)
    w = flow.tensor(ws, placement=P, sbp=B)
    w.requires_grad = True
    loss = (x @ w).sum()
    with flow.no_grad():
        w.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"was modified in place after the op used it"):
        loss.backward()


def test_create_graph_on_a_global_tensor_is_refused():
    w = flow.tensor(_arrays(4)[1], placement=P, sbp=B)
    w.requires_grad = True
    with pytest.raises(NotImplementedError, match=r"\[backward\] create_graph=True"):
        (w * w).sum().backward(create_graph=True)
    assert w.grad is None


# Note [Eager autocast]: an op on global tensors traced under flow.autocast is another graph
# than the same op outside it (the one cached first was reused before, either way), and its
# backward is traced under the forward's dtype, not the one backward() runs under.
def test_autocast_on_global_tensors_follows_the_scope_and_the_backward_the_forward():
    xs, ws = _arrays(9)
    results = []
    for make in (lambda a, s: flow.tensor(a, placement=P, sbp=s), lambda a, s: flow.tensor(a)):
        x, w = make(xs, S0), make(ws, B)
        w.requires_grad = True
        assert (x @ w).dtype == flow.float32
        with flow.autocast("cpu", dtype=flow.float16):
            y = x @ w
        assert y.dtype == flow.float16
        assert (x @ w).dtype == flow.float32
        (y.float() ** 2).sum().backward()
        assert w.grad.dtype == flow.float32
        results.append((y.numpy(), w.grad.numpy()))
    (gy, gg), (ly, lg) = results
    np.testing.assert_array_equal(gy, ly)
    np.testing.assert_allclose(gg, lg, rtol=1e-6)


# Note [Saved forward values] in compiler/passes/autograd.cpp: after an op signature's first
# backward, its forward also fetches what its backward reads (softmax's output, layer norm's
# mean and rstd) and the backward takes those instead of computing the op again: the gradients
# stay the one-device ones.
def test_backward_reads_the_values_its_forward_saved():
    from oneflowlike.framework import global_autograd

    rng = np.random.default_rng(12)
    for step in range(3):
        xs = rng.standard_normal((4, 6)).astype(np.float32)
        grads = []
        for make in (lambda a: flow.tensor(a, placement=P, sbp=S0), flow.tensor):
            x = make(xs)
            x.requires_grad = True
            y = F.layer_norm(F.softmax(x, dim=-1), (6,))
            (y * y).sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)
        saved = [k for k in global_autograd._saves if k[1] in ("F.softmax", "F.layer_norm")]
        assert len(saved) == 2, list(global_autograd._saves)


# The saved values learnt from one backward serve the next ones whatever needs a gradient (x
# alone, then the weight too, then the weight alone).
def test_saved_values_serve_backwards_of_other_inputs():
    rng = np.random.default_rng(13)
    xs, ws = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    for gx, gw in [(True, False), (True, True), (False, True), (True, True)]:
        outs = []
        for make in (lambda a, s: flow.tensor(a, placement=P, sbp=s), lambda a, s: flow.tensor(a)):
            x, w = make(xs, S0), make(ws, B)
            x.requires_grad, w.requires_grad = gx, gw
            (F.layer_norm(x, (6,), weight=w) ** 3).sum().backward()
            outs.append([None if t.grad is None else t.grad.numpy() for t in (x, w)])
        for g, l in zip(*outs):
            assert (g is None) == (l is None)
            if g is not None:
                np.testing.assert_allclose(g, l, rtol=1e-4, atol=1e-5)


# A function of several ops whose forward leaves a dead op in the VJP graph (3-d attention:
# unsqueeze, attention, squeeze) learns what to save too (dead-code elimination keeps the list).
def test_a_composite_function_saves_what_its_backward_reads():
    from oneflowlike.framework import global_autograd

    rng = np.random.default_rng(14)
    for _ in range(2):
        arrays = [rng.standard_normal((2, 5, 4)).astype(np.float32) for _ in range(3)]
        grads = []
        for make in (lambda a: flow.tensor(a, placement=P, sbp=B), flow.tensor):
            q, k, v = (make(a) for a in arrays)
            for t in (q, k, v):
                t.requires_grad = True
            (F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2).sum().backward()
            grads.append([t.grad.numpy() for t in (q, k, v)])
        for g, l in zip(*grads):
            np.testing.assert_allclose(g, l, rtol=1e-4, atol=1e-5)
    assert any(k[1] == "F.scaled_dot_product_attention" for k in global_autograd._saves)


def test_an_eager_op_whose_run_failed_runs_again():
    """A failed run leaves its runtime unusable (and would have left the op's cached graph so for
    the life of the process): the next call compiles the op again."""
    w = flow.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), placement=P, sbp=B)
    with pytest.raises(IndexError, match=r"\[embedding\] every index must be in \[0, "
                                         r"num_embeddings\) with num_embeddings = 4"):
        F.embedding(flow.tensor(np.array([0, 7]), placement=P, sbp=B), w)
    got = F.embedding(flow.tensor(np.array([0, 3]), placement=P, sbp=B), w)
    np.testing.assert_array_equal(got.numpy(), [[0, 1, 2], [9, 10, 11]])
