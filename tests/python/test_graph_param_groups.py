"""nn.Graph with several parameter groups (Note [Parameter groups] in
compiler/passes/optimizer.cpp): groups with their own lr and weight_decay, and an LR scheduler
acting on each group, train exactly as the eager optimizer does; on two processes (DP2) as on
one; what a graph cannot compile is refused naming the group and the key."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from train_graph import TrainGraph


_Train = TrainGraph


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))


def _groups(model, kind):
    """nanoGPT's split: matrices decay, vectors (biases, norms) do not; the second group also
    gets its own lr."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.1},
              {"params": no_decay, "weight_decay": 0.0, "lr": 0.02}]
    if kind == "sgd":
        return flow.optim.SGD(groups, lr=0.1, momentum=0.9)
    return flow.optim.AdamW(groups, lr=0.05, betas=(0.9, 0.95))


def _batches(steps):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6))
            for _ in range(steps)]


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_groups_with_their_own_lr_and_weight_decay_train_as_eager(kind):
    steps = 5
    eager_model = _model()
    eager_opt = _groups(eager_model, kind)
    eager_sched = flow.optim.lr_scheduler.LambdaLR(eager_opt, lambda s: 1.0 / (1 + s))
    for x, y in _batches(steps):
        eager_opt.zero_grad()
        nn.functional.cross_entropy(eager_model(flow.tensor(x)), flow.tensor(y)).backward()
        eager_opt.step()
        eager_sched.step()

    model = _model()
    opt = _groups(model, kind)
    graph = _Train(model, opt, flow.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)))
    for x, y in _batches(steps):
        graph(flow.tensor(x), flow.tensor(y))
    state = graph.state_dict()
    for name, value in eager_model.state_dict().items():
        np.testing.assert_allclose(state[f"model.{name}"].numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    # Each group followed its own schedule.
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in eager_opt.param_groups]


def test_one_group_without_decay_differs_from_decaying_everything():
    x, y = _batches(1)[0]
    finals = []
    for split in (True, False):
        model = _model()
        params = ([{"params": [p for p in model.parameters() if p.ndim >= 2]},
                   {"params": [p for p in model.parameters() if p.ndim < 2],
                    "weight_decay": 0.0}] if split else model.parameters())
        graph = _Train(model, flow.optim.AdamW(params, lr=0.05, weight_decay=0.5))
        graph(flow.tensor(x), flow.tensor(y))
        finals.append(graph.state_dict()["model.1.weight"].numpy())  # the LayerNorm's weight
    # lr * wd = 0.025 of decay on the norm's weight in the single-group run only.
    assert not np.allclose(finals[0], finals[1])


def test_groups_differing_in_what_a_graph_compiles_once_are_refused():
    model = _model()
    opt = flow.optim.AdamW([{"params": list(model[0].parameters())},
                            {"params": list(model[3].parameters()), "betas": (0.8, 0.9)}],
                           lr=0.05)
    graph = _Train(model, opt)
    x, y = _batches(1)[0]
    with pytest.raises(NotImplementedError, match=r"param_groups\[1\] has betas=\(0.8, 0.9\)"):
        graph(flow.tensor(x), flow.tensor(y))


def test_changing_a_groups_weight_decay_after_compiling_is_refused():
    model = _model()
    opt = _groups(model, "adamw")
    graph = _Train(model, opt)
    x, y = _batches(1)[0]
    graph(flow.tensor(x), flow.tensor(y))
    opt.param_groups[1]["weight_decay"] = 0.3
    with pytest.raises(ValueError, match=r"group_weight_decay changed"):
        graph(flow.tensor(x), flow.tensor(y))
