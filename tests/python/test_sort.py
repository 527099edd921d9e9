"""argmax/argmin, max/min with a dim, topk, sort and argsort against PyTorch, their gradients
against finite differences, ties and NaN (Note [Orders and ties] in oneflowlike/ops/sort.h),
and their errors."""

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

torch = pytest.importorskip("torch")

NAN = float("nan")
# Rows with ties and NaN.
TIES = np.array([[2, 1, 2, 5, 1, 5], [0, NAN, 3, NAN, 3, -1], [4, 4, 4, 4, 4, 4]],
                dtype=np.float32)


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def same(a, b):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_match_torch_with_ties_and_nan(name, dim, keepdim):
    for x in (TIES, rand(3, 4, 5, seed=1)):
        out = getattr(flow, name)(flow.tensor(x), dim=dim, keepdim=keepdim)
        expected = getattr(torch, name)(torch.from_numpy(x), dim=dim, keepdim=keepdim)
        assert out.dtype == flow.int64
        same(out, expected)
        same(getattr(flow.tensor(x), name)(dim, keepdim), expected)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_give_values_and_indices_as_torch(name, dim, keepdim):
    for x in (TIES, rand(4, 7, seed=2)):
        out = getattr(flow, name)(flow.tensor(x), dim, keepdim)
        expected = getattr(torch, name)(torch.from_numpy(x), dim, keepdim)
        values, indices = out
        same(values, expected.values)
        same(out.indices, expected.indices)
        assert out.values is values and indices.dtype == flow.int64
        method = getattr(flow.tensor(x), name)(dim=dim, keepdim=keepdim)
        same(method.values, expected.values)
    # The forms that were there before: everything, and two tensors elementwise.
    assert flow.max(flow.tensor(TIES[0])).item() == 5.0
    same(flow.min(flow.tensor(TIES[0]), flow.tensor(TIES[2])),
         torch.min(torch.from_numpy(TIES[0]), torch.from_numpy(TIES[2])))
    assert "return_types.max" in repr(flow.max(flow.tensor(TIES), 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_is_torch_stable_sort(dtype, descending, dim):
    for x in (TIES, rand(5, 40, seed=3) * 3):
        if np.issubdtype(dtype, np.integer):
            x = np.nan_to_num(x, nan=7.0)
        x = x.astype(dtype)
        out = flow.sort(flow.tensor(x), dim=dim, descending=descending)
        expected = torch.sort(torch.from_numpy(x), dim=dim, descending=descending, stable=True)
        same(out.values, expected.values)
        same(out.indices, expected.indices)
        same(flow.argsort(flow.tensor(x), dim, descending), expected.indices)
        same(flow.tensor(x).sort(dim, descending, stable=True)[1], expected.indices)
        same(flow.tensor(x).argsort(dim=dim, descending=descending), expected.indices)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_topk_matches_torch_on_distinct_values(largest, dim):
    x = rand(6, 9, seed=4)
    out = flow.topk(flow.tensor(x), 3, dim=dim, largest=largest)
    expected = torch.topk(torch.from_numpy(x), 3, dim=dim, largest=largest)
    same(out.values, expected.values)
    same(out.indices, expected.indices)
    values, indices = flow.tensor(x).topk(3, dim, largest)
    same(indices, expected.indices)


def test_topk_lists_ties_by_index_and_nan_as_largest():
    out = flow.topk(flow.tensor(TIES), 4)
    stable = torch.sort(torch.from_numpy(TIES), descending=True, stable=True)
    same(out.values, stable.values[:, :4])
    same(out.indices, stable.indices[:, :4])
    assert flow.topk(flow.tensor(TIES), 0).values.shape == (3, 0)


def test_gradients_scatter_to_the_indices():
    x = rand(3, 5, seed=5).astype(np.float64)
    for fn in (lambda t: t.max(1).values, lambda t: t.min(0, keepdim=True)[0],
               lambda t: t.topk(2, 1).values, lambda t: t.topk(2, 0, largest=False).values,
               lambda t: t.sort(0, descending=True).values, lambda t: t.sort(1)[0]):
        a = flow.tensor(x, requires_grad=True)
        out = fn(a)
        dy = rand(*out.shape, seed=6).astype(np.float64)
        out.backward(flow.tensor(dy))
        b = torch.from_numpy(x).requires_grad_()
        fn(b).backward(torch.from_numpy(dy))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)
        check_gradients(fn, x)


def test_indices_do_not_require_grad():
    out = flow.sort(flow.tensor(rand(3, 4, dtype=np.float64), requires_grad=True))
    assert out.values.requires_grad and not out.indices.requires_grad


def test_bad_dims_k_and_dtypes_raise_naming_the_op():
    x = flow.tensor(rand(3, 4))
    with pytest.raises(IndexError, match=r"\[max_dim\] dimension out of range"):
        flow.max(x, 2)
    with pytest.raises(IndexError, match=r"\[sort\] dimension out of range"):
        flow.sort(x, -3)
    with pytest.raises(ValueError, match=r"\[topk\] k must be in \[0, 4\] \(the size of dim 1\)"
                                         r".*got k = 5 for x \(3, 4\) float32"):
        flow.topk(x, 5)
    with pytest.raises(ValueError, match=r"\[min_dim\] cannot reduce an empty dim"):
        flow.argmin(flow.tensor(np.zeros((2, 0), np.float32)), 1)
    with pytest.raises(TypeError, match=r"\[sort\] needs a floating-point or integer tensor"):
        flow.sort(x > 0)


class _Mixed(flow.nn.Module):
    """Every op of this family and gather/index_select in one loss."""

    def __init__(self):
        super().__init__()
        self.w = flow.nn.Parameter(flow.tensor(rand(4, 6, seed=7)))

    def forward(self, x):
        h = x * self.w
        index = flow.tensor([[5, 0], [1, 1], [2, 4], [3, 3]])
        selected = flow.index_select(h, 0, flow.tensor([3, 0, 3]))
        return (flow.max(h, 1).values.sum() + (flow.topk(h, 2, dim=0).values ** 2).sum()
                + flow.sort(h, 1, descending=True).values[:, :3].sum()
                + flow.gather(h, 1, index).sum() + (selected ** 2).mean()
                - flow.min(h, 0, keepdim=True)[0].sum())


class _TrainGraph(flow.nn.Graph):
    def __init__(self, model, opt):
        super().__init__()
        self.model = model
        self.add_optimizer(opt)

    def build(self, x):
        loss = self.model(x)
        loss.backward()
        return loss


def test_graph_training_steps_equal_eager():
    """The compiler's autograd emits the same gradient ops (the one registry) as eager mode."""
    x = flow.tensor(rand(4, 6, seed=8))
    eager, compiled = _Mixed(), _Mixed()
    opt = flow.optim.SGD(eager.parameters(), lr=0.1)
    graph = _TrainGraph(compiled, flow.optim.SGD(compiled.parameters(), lr=0.1))
    for _ in range(2):
        loss = eager(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        np.testing.assert_allclose(graph(x).numpy(), loss.numpy(), rtol=1e-5)
    graph.sync_to_modules()
    np.testing.assert_allclose(compiled.w.numpy(), eager.w.detach().numpy(), rtol=1e-5)
