"""In-place writes and item assignment (issue 14): values against NumPy, autograd's refusal of
writes it cannot follow (Note [Versions]), and the same writes on global tensors."""

import numpy as np
import pytest

import oneflowlike as flow


def test_in_place_ops_write_the_storage_and_views_see_it():
    t = flow.zeros(2, 3)
    view = t.reshape(6)
    assert t.fill_(2.0) is t
    t.add_(flow.tensor([1.0, 2.0, 3.0]))              # broadcast
    t.mul_(2).sub_(1, alpha=2).div_(2.0)
    np.testing.assert_allclose(t.numpy(), [[2.0, 3.0, 4.0], [2.0, 3.0, 4.0]])
    np.testing.assert_allclose(view.numpy(), [2.0, 3.0, 4.0] * 2)
    t.copy_(flow.tensor([7, 8, 9]))                  # cast from int64, broadcast
    np.testing.assert_array_equal(t.numpy(), [[7, 8, 9], [7, 8, 9]])
    t.zero_()
    assert t.numpy().sum() == 0


def test_item_assignment_matches_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = flow.tensor(a)
    for index, value in (((0, 1), 5.0), ((1, slice(None), 2), [1.0, 2.0, 3.0]),
                         ((Ellipsis, slice(1, 4, 2)), -1.0), ((1,), 0.5), ((None, 0, 2, 3), 9.0)):
        a[index] = value
        t[index] = flow.tensor(value) if isinstance(value, list) else value
        np.testing.assert_array_equal(t.numpy(), a)
    a[a > 10] = 0
    t[t > 10] = 0
    np.testing.assert_array_equal(t.numpy(), a)
    rows = np.array([True, False])
    a[rows] = 3
    t[flow.tensor(rows)] = flow.tensor(3.0)
    np.testing.assert_array_equal(t.numpy(), a)


def test_writes_autograd_cannot_follow_are_refused():
    leaf = flow.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\[add_\] cannot write in place into a tensor that "
                                           r"requires grad"):
        leaf.add_(1)
    with flow.no_grad():
        leaf.add_(1)  # as an optimizer's step does
    np.testing.assert_array_equal(leaf.numpy(), [2, 2, 2])
    buffer = flow.zeros(3)
    with pytest.raises(RuntimeError, match=r"\[copy_\] cannot write a value that requires grad"):
        buffer.copy_(leaf * 2)


def test_backward_refuses_a_saved_tensor_written_since():
    w = flow.ones(3, requires_grad=True)
    x = flow.tensor([1.0, 2.0, 3.0])
    loss = (x * w).sum()  # mul saves x for w's gradient
    x[0] = 10.0
    with pytest.raises(RuntimeError, match=r"input 0 of op 'mul', which its gradient reads, was "
                                           r"modified by an in-place operation \(version 1, saved "
                                           r"at version 0\)"):
        loss.backward()
    fresh = (flow.tensor([1.0, 2.0, 3.0]) * w).sum()
    fresh.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3])


def test_optimizer_updates_count_as_writes():
    w = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    opt.step()  # writes w, which mul saved
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        loss.backward()


def test_in_place_errors():
    t = flow.zeros(3, dtype=flow.int64)
    with pytest.raises(TypeError, match=r"\[add_\] a oneflowlike.float32 result cannot be written "
                                        r"into a oneflowlike.int64 tensor"):
        t.add_(0.5)
    with pytest.raises(ValueError, match=r"\[add_\] the new value of shape \(2, 3\) must broadcast "
                                         r"to the tensor's shape \(3,\)"):
        flow.zeros(3).add_(flow.ones(2, 3))
    with pytest.raises(ValueError, match=r"t\[mask\] = v needs v to be a number or a one-element"):
        flow.zeros(3)[flow.tensor([True, False, True])] = flow.ones(2)
    with pytest.raises(TypeError, match=r"\[fill_\] value must be a number"):
        flow.zeros(3).fill_("x")


def test_in_place_inside_a_graph_is_refused():
    class Graph(flow.nn.Graph):
        def build(self, x):
            x.add_(1)
            return x

    # Only a module's buffers are written in a graph (Note [Buffers written in build]).
    with pytest.raises(ValueError, match=r"\[add_\] in-place ops inside nn.Graph.build\(\) may "
                                         r"change a module's buffers \(running statistics\) only. "
                                         r"However, got a traced value"):
        Graph()(flow.ones(2))


def test_global_tensors_are_written_piece_by_piece():
    placement = flow.placement("cpu", ranks=[0])
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = flow.tensor(a, placement=placement, sbp=flow.sbp.split(0))
    g[0, 1] = 9
    a[0, 1] = 9
    g.add_(1)
    a += 1
    g[g > 5] = 0
    a[a > 5] = 0
    np.testing.assert_array_equal(g.numpy(), a)
    assert g.sbp == (flow.sbp.split(0),)
    p = flow.tensor(a, placement=placement, sbp=flow.sbp.partial_sum)
    p.fill_(2.0)
    np.testing.assert_array_equal(p.numpy(), np.full((2, 3), 2.0))
    with pytest.raises(TypeError, match="got a global tensor and a local tensor"):
        g.copy_(flow.ones(2, 3))


def test_writes_into_a_copy_made_by_indexing_are_refused():
    t = flow.zeros(3, 4)
    for write in (lambda: t[0].fill_(1), lambda: t[:, 1].add_(5), lambda: t[1:].zero_(),
                  lambda: t[1].reshape(2, 2).copy_(flow.ones(2, 2))):
        with pytest.raises(ValueError, match=r"it is a copy that indexing or a view-like op made "
                                             r".*Write into that tensor \(item assignment"):
            write()
    row = t[0].clone()
    row.fill_(2)  # a copy the user asked for is theirs to write
    t[0] = row
    np.testing.assert_array_equal(t.numpy()[0], [2, 2, 2, 2])
    view = t[:]  # the whole tensor: a view, as torch
    view.add_(1)
    assert t.numpy()[1, 0] == 1


def test_the_version_check_reads_only_what_a_gradient_reads():
    w = flow.ones(3, requires_grad=True)
    x = flow.tensor([1.0, 2.0, 3.0])
    y = (w + x).sum()  # add's gradient reads neither input
    x.add_(1)
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1, 1, 1])


def test_copies_and_assignments_cast_while_arithmetic_refuses_floats_into_integers():
    t = flow.zeros(3, dtype=flow.int64)
    t.copy_(flow.tensor([1.7, 2.2, -0.5]))
    t[0] = 9.9
    np.testing.assert_array_equal(t.numpy(), [9, 2, 0])
    with pytest.raises(TypeError, match=r"\[mul_\] a oneflowlike.float32 result cannot be written"):
        t.mul_(1.5)


def test_in_place_on_a_global_tensor_inside_build_is_refused():
    placement = flow.placement("cpu", ranks=[0])
    g = flow.ones(2, placement=placement, sbp=flow.sbp.broadcast)

    class Graph(flow.nn.Graph):
        def build(self, x):
            g.add_(1)
            return x + g

    with pytest.raises(ValueError, match=r"\[add_\] in-place ops cannot change a value inside "
                                         r"nn.Graph.build\(\)"):
        Graph()(flow.ones(2, placement=placement, sbp=flow.sbp.broadcast))
