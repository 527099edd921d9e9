"""cumsum against PyTorch (values, dtypes as torch promotes them, the dtype argument), its
gradient against torch and finite differences, in a training graph as in eager mode, and its
errors (Note [Running sums] in oneflowlike/ops/scan.h)."""

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients
from train_graph import eager_and_graph_losses

torch = pytest.importorskip("torch")


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_values_match_torch_along_every_dim(dim):
    x = rand(4, 70, 5, dtype=np.float64)
    out = flow.cumsum(flow.tensor(x), dim)
    np.testing.assert_allclose(out.numpy(), torch.cumsum(torch.from_numpy(x), dim).numpy(),
                               rtol=1e-12, atol=1e-12)
    # float32 sums in double (as torch's CPU kernel), each output rounded once.
    x32 = rand(4, 70, 5)
    expected = np.cumsum(x32.astype(np.float64), axis=dim).astype(np.float32)
    np.testing.assert_array_equal(flow.tensor(x32).cumsum(dim).numpy(), expected)


def test_dtypes_follow_torch():
    ints = np.array([[3, -1, 4], [1, 5, -9]], dtype=np.int32)
    for t in (flow.tensor(ints), flow.tensor(ints > 0), flow.tensor(ints.astype(np.int64))):
        out = flow.cumsum(t, 1)
        assert out.dtype == flow.int64  # bool and integers sum in int64, as torch
        want = torch.cumsum(torch.from_numpy(t.numpy()), 1)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
    out = flow.cumsum(flow.tensor(ints), 0, dtype=flow.float32)
    assert out.dtype == flow.float32
    np.testing.assert_array_equal(out.numpy(), np.cumsum(ints, 0).astype(np.float32))
    bf = flow.tensor(rand(3, 9)).to(flow.bfloat16)
    out = flow.cumsum(bf, 1)
    assert out.dtype == flow.bfloat16
    want = torch.cumsum(torch.from_numpy(bf.to(flow.float32).numpy()).double(), 1)
    np.testing.assert_array_equal(out.to(flow.float32).numpy(),
                                  want.float().bfloat16().float().numpy())


def test_gradient_matches_torch_and_finite_differences():
    x = rand(3, 6, 2, dtype=np.float64, seed=1)
    for dim in (0, 1, -1):
        a = flow.tensor(x, requires_grad=True)
        out = flow.cumsum(a, dim)
        dy = rand(*out.shape, dtype=np.float64, seed=2)
        out.backward(flow.tensor(dy))
        b = torch.from_numpy(x).requires_grad_()
        torch.cumsum(b, dim).backward(torch.from_numpy(dy))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)
        check_gradients(lambda t: flow.cumsum(t, dim), x)


class _Running(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = flow.nn.Parameter(flow.tensor(rand(6, 5, seed=3)))

    def forward(self, x):
        h = x @ self.w
        return (flow.cumsum(h, 1) ** 2).mean() + flow.cumsum(h, 0)[-1].sum()


def test_graph_training_steps_equal_eager():
    x = flow.tensor(rand(4, 6, seed=4))

    def make():
        model = _Running()
        return model, flow.optim.SGD(model.parameters(), lr=0.1)

    eager_losses, graph_losses = eager_and_graph_losses(make, lambda m, t: m(t), (x,))
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)


def test_errors_name_the_op():
    x = flow.tensor(rand(3, 4))
    with pytest.raises(IndexError, match=r"\[cumsum\] dimension out of range"):
        flow.cumsum(x, 2)
    with pytest.raises(TypeError):
        flow.cumsum(x)  # dim is required, as torch's
