"""flow.autograd.Function (Note [Custom backward]), flow.utils.checkpoint.checkpoint (Note
[Eager checkpoints]) and get_rng_state/set_rng_state, against torch and against the
unchecked run."""

import numpy as np
import pytest

import oneflowlike as flow

torch = pytest.importorskip("torch")


def _scaled_exp(lib):
    class ScaledExp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, k):
            y = (x * w).exp()
            ctx.save_for_backward(y, x, w)
            ctx.k = k
            return y * k, y, (x * 0).sum()  # the last output reaches no loss

        @staticmethod
        def backward(ctx, dy, dy2, unused):
            y, x, w = ctx.saved_tensors
            assert float(unused.sum()) == 0.0  # materialised zeros, as torch's
            g = (dy * ctx.k + dy2) * y
            return g * w, g * x, None

    return ScaledExp


def test_a_function_with_several_outputs_and_a_number_matches_torch():
    results = []
    for lib in (flow, torch):
        x = lib.tensor([0.1, 0.2, -0.3], requires_grad=True)
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        a, b, _ = _scaled_exp(lib).apply(x, w, 3.0)
        (a.sum() + (b * b).sum()).backward()
        results.append((a.detach().numpy(), x.grad.numpy(), w.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_a_function_names_its_node_and_records_nothing_without_grad():
    fn = _scaled_exp(flow)
    x = flow.ones(2, requires_grad=True)
    a, _, _ = fn.apply(x, flow.ones(2), 1.0)
    assert a.grad_fn.name() == "ScaledExpBackward"
    plain, _, _ = fn.apply(flow.ones(2), flow.ones(2), 1.0)
    assert plain.grad_fn is None and not plain.requires_grad
    with flow.no_grad():
        assert fn.apply(x, flow.ones(2), 1.0)[0].grad_fn is None


def test_bad_functions_are_refused_naming_them():
    class Identity(flow.autograd.Function):  # an input returned as it is: torch's view
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = flow.ones(2, requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn.name() == "IdentityBackward"
    y.sum().backward()
    assert x.grad.numpy().tolist() == [5.0, 5.0]

    class WrongCount(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(ValueError, match=r"WrongCount.backward returned 1 gradients; forward "
                                         r"took 2"):
        WrongCount.apply(flow.ones(2, requires_grad=True), flow.ones(2)).sum().backward()

    class WrongShape(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    with pytest.raises(Exception, match=r"WrongShape.backward returned .* as the gradient of "
                                        r"input 0"):
        WrongShape.apply(flow.ones(2, requires_grad=True)).sum().backward()

    class Doubles(flow.nn.Graph):
        def build(self, x):
            return WrongShape.apply(x)

    with pytest.raises(NotImplementedError, match=r"WrongShape runs on local tensors eagerly"):
        Doubles()(flow.ones(2))


def test_rng_state_round_trips():
    flow.manual_seed(7)
    state = flow.get_rng_state()
    first = flow.rand(5).numpy()
    flow.set_rng_state(state)
    np.testing.assert_array_equal(flow.rand(5).numpy(), first)
    with pytest.raises(ValueError, match=r"\[set_rng_state\] takes the state get_rng_state "
                                         r"returns"):
        flow.set_rng_state(flow.ones(3))


def test_checkpoint_gives_the_unchecked_gradients_with_dropout_and_keeps_no_intermediates():
    nn = flow.nn
    flow.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.3), nn.Linear(16, 8))
    x0 = flow.randn(4, 8)

    def run(checkpointed):
        for p in block.parameters():
            p.grad = None
        x = x0.clone()
        x.requires_grad = True
        flow.manual_seed(5)
        h = x * 2
        if checkpointed:
            y = flow.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        else:
            y = block(h)
        (y * y).sum().backward()
        return [x.grad.numpy()] + [p.grad.numpy() for p in block.parameters()], y

    plain, _ = run(False)
    checked, y = run(True)
    for a, b in zip(plain, checked):
        np.testing.assert_array_equal(a, b)
    # The output's node is the checkpoint's: the block's ops recorded nothing in forward.
    assert y.grad_fn.name() == "CheckpointFunctionBackward"
    with pytest.raises(TypeError, match=r"\[checkpoint\] function must be callable"):
        flow.utils.checkpoint.checkpoint(3, x0)


def test_autograd_grad_matches_torch_and_leaves_dot_grad_alone():
    results = []
    for lib in (flow, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = x * w
        y.register_hook(lambda g: g * 2)  # hooks run under autograd.grad too: a computed
        x.register_hook(lambda g: g * 3)  # input's gradient comes before them, a leaf's after
        z = (y * y).sum() + x.sum()
        gx, gy = lib.autograd.grad(z, [x, y], retain_graph=True)
        (gw,) = lib.autograd.grad([z], [w], grad_outputs=[lib.tensor(2.0)])
        assert x.grad is None and w.grad is None
        results.append([gx.numpy(), gy.numpy(), gw.numpy()])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_autograd_grad_refuses_unreached_inputs_unless_allowed():
    x = flow.ones(2, requires_grad=True)
    unused = flow.ones(3, requires_grad=True)
    z = (x * 2).sum()
    with pytest.raises(RuntimeError, match=r"\[autograd.grad\] input 1 \(shape \(3,\)\) is not "
                                           r"reached"):
        flow.autograd.grad(z, [x, unused], retain_graph=True)
    gx, gu = flow.autograd.grad(z, [x, unused], allow_unused=True, retain_graph=True)
    assert gu is None and gx.numpy().tolist() == [2.0, 2.0]
    _, zeros = flow.autograd.grad(z, [x, unused], materialize_grads=True)
    assert zeros.numpy().tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(NotImplementedError, match=r"create_graph=True"):
        flow.autograd.grad((x * 2).sum(), x, create_graph=True)
    with pytest.raises(Exception, match=r"\[autograd.grad\] input 0 does not require grad"):
        flow.autograd.grad((x * 2).sum(), flow.ones(2))


# ---- from a review ---------------------------------------------------------------------------


def test_checkpoint_of_a_block_fed_plain_data_gives_its_parameters_gradients():
    for lib in (flow, torch):
        lib.manual_seed(0)
    results = []
    for checkpointed in (False, True):
        flow.manual_seed(0)
        l1, l2 = flow.nn.Linear(3, 4), flow.nn.Linear(4, 1)
        x = flow.ones(2, 3)  # data: needs no gradient
        h = flow.utils.checkpoint.checkpoint(l1, x) if checkpointed else l1(x)
        l2(h).sum().backward()
        results.append(l1.weight.grad.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_checkpoint_and_function_take_tensors_by_keyword_and_non_tensor_outputs():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    y = flow.utils.checkpoint.checkpoint(lambda x, w=None: (3, x * 2 * w),
                                         flow.ones(2, requires_grad=True), w=a * 3)
    y[1].sum().backward()
    assert y[0] == 3 and a.grad.numpy().tolist() == [6.0, 6.0]

    class Scale(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return "label", x * w

        @staticmethod
        def backward(ctx, none, g):
            assert none is None  # one gradient per output, None for a non-tensor
            x, w = ctx.saved_tensors
            return g * w, g * x

    x, w = flow.ones(2, requires_grad=True), flow.tensor([3.0, 4.0], requires_grad=True)
    Scale.apply(x, w=w)[1].sum().backward()
    assert x.grad.numpy().tolist() == [3.0, 4.0] and w.grad.numpy().tolist() == [1.0, 1.0]


def test_gradients_in_dot_grad_have_storage_of_their_own():
    a, b = flow.ones(2, requires_grad=True), flow.ones(2, requires_grad=True)
    (a + b).sum().backward()
    a.grad.div_(2)
    assert b.grad.numpy().tolist() == [1.0, 1.0]
    x, g = flow.ones(2, requires_grad=True), flow.ones(2)
    x.backward(g)
    g.mul_(7)
    assert x.grad.numpy().tolist() == [1.0, 1.0]
    z = x + 1
    z.retain_grad()
    z.sum().backward()
    z.grad.zero_()
    assert x.grad.numpy().tolist() == [2.0, 2.0]


def test_a_function_refuses_a_saved_tensor_written_in_place_and_frees_what_it_saved():
    class Square(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * x
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, _ = ctx.saved_tensors
            return 2 * x * g

    c = flow.ones(2, requires_grad=True) * 1.0
    out = Square.apply(c)
    with flow.no_grad():
        c.add_(10)
    with pytest.raises(RuntimeError, match=r"Square: saved tensor 0 .* was modified by an "
                                           r"in-place operation"):
        out.sum().backward()
    import gc

    gc.collect()
    before = flow._C.cpu_memory_live_bytes()
    for _ in range(5):
        Square.apply(flow.ones(1000, 1000, requires_grad=True))  # saves its output
    gc.collect()
    assert flow._C.cpu_memory_live_bytes() - before < 1 << 20


def test_hooks_go_when_removed_after_their_tensor_and_leaf_hooks_run_in_use_order():
    x = flow.ones(2, requires_grad=True)
    y = x * 2
    calls = []
    handle = y.register_hook(lambda g: calls.append(1))
    loss = (y * y).sum()
    del y
    handle.remove()
    loss.backward()
    assert calls == []
    leaves = [flow.ones(1, requires_grad=True) for _ in range(12)]
    order = []
    for k, leaf in enumerate(leaves):
        leaf.register_hook(lambda g, k=k: order.append(k))
    total = leaves[7] * 1
    for k in (3, 11, 0, 5, 1, 2, 4, 6, 8, 9, 10):
        total = total + leaves[k]
    total.sum().backward()
    # First contributions in backward order: the last sum's leaf first, leaves[7] last.
    assert order == [10, 9, 8, 6, 4, 2, 1, 5, 0, 11, 3, 7]


def test_checkpoint_refuses_to_recompute_inside_autograd_grad():
    lin = flow.nn.Linear(2, 2)
    x = flow.ones(1, 2, requires_grad=True)
    y = flow.utils.checkpoint.checkpoint(lin, x)
    with pytest.raises(RuntimeError, match=r"\[checkpoint\] cannot recompute inside "
                                           r"flow.autograd.grad"):
        flow.autograd.grad(y.sum(), [x])


def test_autograd_grad_of_a_computed_tensor_does_not_run_the_node_that_made_it():
    """A checkpoint's output as the input: its recomputation is not needed (it was refused),
    and a Function making the input does not run its backward (torch's)."""
    lin = flow.nn.Linear(2, 2)
    h = flow.utils.checkpoint.checkpoint(lin, flow.ones(1, 2, requires_grad=True))
    (g,) = flow.autograd.grad((h * 2).sum(), [h])
    assert g.numpy().tolist() == [[2.0, 2.0]]
    ran = []

    class Twice(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x, *, tag):
            return x * 2, tag

        @staticmethod
        def backward(ctx, g, _):
            ran.append(1)
            return g * 2

    tag = flow.ones(2)
    y, same = Twice.apply(flow.ones(2, requires_grad=True), tag=tag)
    assert same is not tag and tag.is_leaf and not tag.requires_grad
    flow.autograd.grad((y * 3).sum(), [y])
    assert ran == []


def test_a_checkpoint_returning_a_list_gives_gradients_and_a_function_refuses_one():
    lin = flow.nn.Linear(2, 2)
    x = flow.ones(1, 2, requires_grad=True)
    out = flow.utils.checkpoint.checkpoint(lambda t: [lin(t), t * 2], x)
    assert isinstance(out, list) and out[0].requires_grad
    (out[0].sum() + out[1].sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), lin.weight.detach().sum(0, keepdim=True).numpy()
                               + 2, rtol=1e-6)
    assert lin.weight.grad is not None

    class Listed(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return [x * 2]

    with pytest.raises(TypeError, match=r"Listed.forward returned a list"):
        Listed.apply(flow.ones(2, requires_grad=True))


def test_mark_non_differentiable_and_a_checkpoints_outputs_that_need_no_gradient():
    results = []
    for lib in (flow, torch):
        class Halves(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                mask = (x > 0).to(x.dtype)  # floating, but no gradient meant
                ctx.mark_non_differentiable(mask)
                return x * 0.5, mask

            @staticmethod
            def backward(ctx, g, g_mask):
                assert float(g_mask.abs().sum()) == 0.0  # zeros, as torch gives
                return g * 0.5

        x = lib.tensor([1.0, -2.0], requires_grad=True)
        y, mask = Halves.apply(x)
        (y.sum() + mask.sum()).backward() if mask.requires_grad else y.sum().backward()
        results.append((mask.requires_grad, y.requires_grad, x.grad.numpy().tolist()))
    assert results[0] == results[1] == (False, True, [0.5, 0.5])
    lin = flow.nn.Linear(2, 2)
    a, b = flow.utils.checkpoint.checkpoint(lambda t: (lin(t), t.sum(1)), flow.ones(1, 2))
    assert a.requires_grad and not b.requires_grad
    a.sum().backward()
    assert lin.weight.grad is not None
