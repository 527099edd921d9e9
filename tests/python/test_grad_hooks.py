"""Tensor.register_hook, retain_grad and grad_fn on local tensors (Note [Gradient hooks] in
oneflowlike/autograd.h), against torch."""

import numpy as np
import pytest

import oneflowlike as flow

torch = pytest.importorskip("torch")


def _scenario(lib, calls):
    x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w = lib.tensor([0.5, 0.25, -1.0], requires_grad=True)
    x.register_hook(lambda g: calls.append(("x", g.numpy().copy())))  # summed once
    w.register_hook(lambda g: g * 2)  # replaces the leaf's gradient
    y = x * w

    def inner():
        h = y * 3  # goes out of scope: its hook stays with the node that made it
        h.register_hook(lambda g: g + 1)
        return h

    z = inner()
    y.retain_grad()
    loss = (z * z).sum() + (y * x).sum()
    loss.retain_grad()
    gone = y.register_hook(lambda g: calls.append(("removed", None)))
    gone.remove()
    loss.backward()
    return {"x": x.grad, "w": w.grad, "y": y.grad, "loss": loss.grad}


def test_hooks_and_retained_gradients_match_torch():
    ours_calls, theirs_calls = [], []
    ours = _scenario(flow, ours_calls)
    theirs = _scenario(torch, theirs_calls)
    for name in ours:
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-6,
                                   err_msg=name)
    assert [c[0] for c in ours_calls] == [c[0] for c in theirs_calls] == ["x"]
    np.testing.assert_allclose(ours_calls[0][1], theirs_calls[0][1], rtol=1e-6)


def test_a_leaf_hook_runs_once_per_backward_and_gradients_accumulate_after_it():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(1) or g * 0.5)
    for _ in range(2):
        (x * x + x).sum().backward()
    assert len(calls) == 2
    np.testing.assert_allclose(x.grad.numpy(), 2 * 0.5 * (2 * np.array([1.0, 2.0]) + 1))


def test_grad_fn_names_the_op_and_retains_grad_says_so():
    x = flow.ones(2, requires_grad=True)
    y = x * x
    assert x.grad_fn is None and y.grad_fn is not None
    assert y.grad_fn.name() == "MulBackward" and repr(flow.relu(x).grad_fn) == "<ReluBackward>"
    assert not y.retains_grad
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad
    assert flow.ones(2).grad_fn is None


def test_bad_hooks_are_refused_naming_what_was_wrong():
    x = flow.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[register_hook\] cannot register a hook on a "
                                           r"tensor that does not require grad"):
        flow.ones(2).register_hook(lambda g: g)
    with pytest.raises(TypeError, match=r"\[register_hook\] hook must be callable"):
        x.register_hook(3)
    handle = x.register_hook(lambda g: flow.ones(3))
    with pytest.raises(Exception, match=r"\[register_hook\] a hook must return None or a "
                                        r"gradient of the tensor's shape"):
        (x * 2).sum().backward()
    handle.remove()
    handle = x.register_hook(lambda g: "no")
    with pytest.raises(TypeError, match=r"a hook must return None or a tensor. However, got "
                                        r"str"):
        (x * 2).sum().backward()
    handle.remove()

    def fails(g):
        raise ValueError("from the hook")

    x.register_hook(fails)
    with pytest.raises(ValueError, match="from the hook"):
        (x * 2).sum().backward()


def test_register_hook_inside_a_graph_is_refused():
    class Graph(flow.nn.Graph):
        def build(self, x):
            x.register_hook(lambda g: g)
            return x

    with pytest.raises(RuntimeError, match=r"\[register_hook\] a value traced inside "
                                           r"nn.Graph.build"):
        Graph()(flow.ones(2))
