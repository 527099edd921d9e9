"""flow.optim.lr_scheduler against learning-rate sequences worked out by hand from torch's
documented formulas (constructing a scheduler sets epoch 0; each step() advances one)."""

import math

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike.optim import lr_scheduler


def _optimizer(lr=1.0, groups=1):
    params = [flow.nn.Parameter(flow.zeros(2)) for _ in range(groups)]
    return flow.optim.SGD([{"params": [p]} for p in params], lr=lr)


def _lrs(optimizer, scheduler, epochs):
    """The lr of the first group for epochs 0 .. epochs-1, as a training loop sees them."""
    seen = []
    for _ in range(epochs):
        seen.append(optimizer.param_groups[0]["lr"])
        assert scheduler.get_last_lr()[0] == seen[-1]
        optimizer.step()
        scheduler.step()
    return seen


def test_step_lr_decays_every_step_size_epochs():
    optimizer = _optimizer(lr=0.5)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)
    assert scheduler.last_epoch == 0
    expected = [0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 8), expected, rtol=1e-12)
    assert scheduler.last_epoch == 8


def test_multi_step_lr_decays_at_each_milestone_counting_repeats():
    optimizer = _optimizer(lr=1.0)
    scheduler = lr_scheduler.MultiStepLR(optimizer, milestones=[4, 2, 4], gamma=0.5)
    expected = [1.0, 1.0, 0.5, 0.5, 0.125, 0.125]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 6), expected, rtol=1e-12)


def test_cosine_annealing_goes_from_base_lr_to_eta_min():
    optimizer = _optimizer(lr=1.0)
    scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=0.2)
    # eta_min + (1 - eta_min) * (1 + cos(pi * t / 4)) / 2
    half = (1 + math.cos(math.pi / 4)) / 2  # 0.853553...
    expected = [1.0, 0.2 + 0.8 * half, 0.6, 0.2 + 0.8 * (1 - half), 0.2, 0.2 + 0.8 * (1 - half)]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 6), expected, rtol=1e-12)


def test_linear_lr_warms_up_then_holds():
    optimizer = _optimizer(lr=0.1)
    scheduler = lr_scheduler.LinearLR(optimizer, start_factor=0.25, end_factor=1.0,
                                      total_iters=3)
    expected = [0.025, 0.05, 0.075, 0.1, 0.1]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 5), expected, rtol=1e-12)
    default = lr_scheduler.LinearLR(_optimizer(lr=3.0))  # start 1/3 over 5 iterations
    assert default.get_last_lr() == pytest.approx([1.0])


def test_linear_lr_can_decay():
    optimizer = _optimizer(lr=1.0)
    scheduler = lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.0,
                                      total_iters=4)
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 6), [1.0, 0.75, 0.5, 0.25, 0.0, 0.0],
                               atol=1e-15)


def test_lambda_lr_with_one_function_per_group():
    optimizer = _optimizer(lr=2.0, groups=2)
    optimizer.param_groups[1]["lr"] = 10.0
    scheduler = lr_scheduler.LambdaLR(optimizer, [lambda e: 0.5 ** e, lambda e: 1.0 / (e + 1)])
    seen = []
    for _ in range(4):
        seen.append([g["lr"] for g in optimizer.param_groups])
        scheduler.step()
    np.testing.assert_allclose(seen, [[2.0, 10.0], [1.0, 5.0], [0.5, 10 / 3], [0.25, 2.5]],
                               rtol=1e-12)
    assert scheduler.base_lrs == [2.0, 10.0]
    shared = lr_scheduler.LambdaLR(_optimizer(lr=1.0, groups=2), lambda e: e + 1)
    assert shared.get_last_lr() == [1.0, 1.0]
    with pytest.raises(ValueError, match=r"one value per param group \(2\). However, got 1"):
        lr_scheduler.LambdaLR(_optimizer(groups=2), [lambda e: 1.0])


def test_sequential_lr_runs_warmup_then_cosine():
    optimizer = _optimizer(lr=1.0)
    warmup = lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=3)
    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=0.0)
    scheduler = lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[3])
    half = (1 + math.cos(math.pi / 4)) / 2
    # warmup epochs 0, 1, 2; the cosine restarts at its own epoch 0 on epoch 3
    expected = [0.1, 0.4, 0.7, 1.0, half, 0.5, 1 - half, 0.0, 1 - half]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 9), expected, rtol=1e-12,
                               atol=1e-15)
    assert scheduler.last_epoch == 9 and cosine.last_epoch == 6


def test_sequential_lr_with_three_phases():
    optimizer = _optimizer(lr=1.0)
    schedulers = [lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=2),
                  lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
                  lr_scheduler.LambdaLR(optimizer, lambda e: 0.01)]
    scheduler = lr_scheduler.SequentialLR(optimizer, schedulers, milestones=[2, 4])
    expected = [0.5, 0.75, 1.0, 0.5, 0.01, 0.01]
    np.testing.assert_allclose(_lrs(optimizer, scheduler, 6), expected, rtol=1e-12)


def test_sequential_lr_checks_its_arguments():
    optimizer = _optimizer()
    first = lr_scheduler.StepLR(optimizer, 2)
    with pytest.raises(ValueError, match="one milestone fewer than schedulers"):
        lr_scheduler.SequentialLR(optimizer, [first], milestones=[3])
    other = lr_scheduler.StepLR(_optimizer(), 2)
    with pytest.raises(ValueError, match=r"schedulers\[1\] \(StepLR\) drives another one"):
        lr_scheduler.SequentialLR(optimizer, [first, other], milestones=[3])


def test_scheduler_lr_reaches_the_optimizer_update():
    param = flow.nn.Parameter(flow.zeros(1, dtype=flow.float64))
    optimizer = flow.optim.SGD([param], lr=1.0)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(3):
        param.grad = flow.ones(1, dtype=flow.float64)
        optimizer.step()
        scheduler.step()
    np.testing.assert_allclose(param.numpy(), [-(1.0 + 0.5 + 0.25)], rtol=1e-12)


def test_state_dict_round_trip_resumes_the_schedule():
    optimizer = _optimizer(lr=1.0)
    scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    for _ in range(4):
        scheduler.step()
    state = scheduler.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 4

    resumed_optimizer = _optimizer(lr=1.0)
    resumed = lr_scheduler.CosineAnnealingLR(resumed_optimizer, T_max=10)
    resumed.load_state_dict(state)
    for _ in range(3):
        scheduler.step()
        resumed.step()
    assert resumed.get_last_lr() == scheduler.get_last_lr()
    assert resumed_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_sequential_and_lambda_state_dicts_round_trip():
    class Decay:
        def __init__(self):
            self.rate = 0.5

        def __call__(self, epoch):
            return self.rate ** epoch

    optimizer = _optimizer()
    decay = Decay()
    scheduler = lr_scheduler.SequentialLR(
        optimizer, [lr_scheduler.LinearLR(optimizer, 0.5, total_iters=2),
                    lr_scheduler.LambdaLR(optimizer, decay)], milestones=[2])
    decay.rate = 0.25
    for _ in range(4):
        scheduler.step()
    state = scheduler.state_dict()
    assert state["_schedulers"][1]["lr_lambdas"] == [{"rate": 0.25}]

    optimizer2 = _optimizer()
    decay2 = Decay()
    again = lr_scheduler.SequentialLR(
        optimizer2, [lr_scheduler.LinearLR(optimizer2, 0.5, total_iters=2),
                     lr_scheduler.LambdaLR(optimizer2, decay2)], milestones=[2])
    again.load_state_dict(state)
    assert decay2.rate == 0.25 and again.last_epoch == 4
    scheduler.step()
    again.step()
    assert again.get_last_lr() == scheduler.get_last_lr() == [0.25 ** 3]
    plain = lr_scheduler.LambdaLR(_optimizer(), lambda e: 1.0)
    assert plain.state_dict()["lr_lambdas"] == [None]


def test_resuming_with_last_epoch_needs_initial_lr():
    optimizer = _optimizer(lr=1.0)
    with pytest.raises(KeyError, match=r"param_groups\[0\] has none"):
        lr_scheduler.StepLR(optimizer, step_size=2, last_epoch=3)
    optimizer.param_groups[0]["initial_lr"] = 1.0
    scheduler = lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1, last_epoch=3)
    assert scheduler.last_epoch == 4  # torch also takes its first step on construction
    assert scheduler.get_last_lr() == pytest.approx([0.01])


def test_schedulers_check_their_arguments():
    with pytest.raises(TypeError, match="optimizer must be a flow.optim.Optimizer"):
        lr_scheduler.StepLR([1.0], step_size=1)
    with pytest.raises(ValueError, match="step_size must be a positive int. However, got 0"):
        lr_scheduler.StepLR(_optimizer(), step_size=0)
    with pytest.raises(ValueError, match=r"start_factor must be in \(0, 1\]"):
        lr_scheduler.LinearLR(_optimizer(), start_factor=0.0)
    with pytest.raises(ValueError, match=r"end_factor must be in \[0, 1\]"):
        lr_scheduler.LinearLR(_optimizer(), end_factor=1.5)
    with pytest.raises(ValueError, match="T_max must be a positive int"):
        lr_scheduler.CosineAnnealingLR(_optimizer(), T_max=0)
    with pytest.raises(TypeError, match="lr_lambda must be callable"):
        lr_scheduler.LambdaLR(_optimizer(), 0.5)


# ---- against torch, step by step: every group's lr and momentum ------------------------------

def _pair(kind, groups=2):
    """(ours, torch's) optimizers of ``kind`` over the same ``groups`` param groups (lrs 1, 0.5,
    ...)."""
    torch = pytest.importorskip("torch")
    ours = [flow.nn.Parameter(flow.zeros(2)) for _ in range(groups)]
    theirs = [torch.nn.Parameter(torch.zeros(2)) for _ in range(groups)]
    make = {"sgd": lambda lib, ps: lib.optim.SGD(
                [{"params": [p], "lr": 1.0 / (k + 1)} for k, p in enumerate(ps)], lr=1.0,
                momentum=0.9),
            "adam": lambda lib, ps: lib.optim.Adam(
                [{"params": [p], "lr": 1.0 / (k + 1)} for k, p in enumerate(ps)], lr=1.0)}[kind]
    return make(flow, ours), make(torch, theirs), torch


SCHEDULES = {
    "ExponentialLR": ("sgd", lambda s, o: s.ExponentialLR(o, gamma=0.9), 8),
    "ConstantLR": ("sgd", lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=3), 6),
    "PolynomialLR": ("sgd", lambda s, o: s.PolynomialLR(o, total_iters=4, power=2.0), 7),
    "CosineAnnealingWarmRestarts": ("sgd", lambda s, o: s.CosineAnnealingWarmRestarts(
        o, T_0=3, eta_min=0.01), 10),
    "CosineAnnealingWarmRestarts T_mult": ("sgd", lambda s, o: s.CosineAnnealingWarmRestarts(
        o, T_0=2, T_mult=2, eta_min=0.05), 20),
    "CosineAnnealingWarmRestarts T_0 1 T_mult 3": ("sgd", lambda s, o: s.CosineAnnealingWarmRestarts(
        o, T_0=1, T_mult=3), 130),
    "OneCycleLR": ("sgd", lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 0.3], total_steps=12), 12),
    "OneCycleLR linear three-phase adam": ("adam", lambda s, o: s.OneCycleLR(
        o, max_lr=0.5, epochs=3, steps_per_epoch=5, anneal_strategy="linear",
        three_phase=True), 15),
    "OneCycleLR no momentum": ("adam", lambda s, o: s.OneCycleLR(
        o, max_lr=0.5, total_steps=10, pct_start=0.5, cycle_momentum=False), 10),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedulers_give_torchs_lrs_and_momenta(name):
    kind, make, steps = SCHEDULES[name]
    ours_opt, theirs_opt, torch = _pair(kind)
    ours, theirs = make(lr_scheduler, ours_opt), make(torch.optim.lr_scheduler, theirs_opt)
    for step in range(steps):
        for a, b in zip(ours_opt.param_groups, theirs_opt.param_groups):
            assert a["lr"] == pytest.approx(b["lr"], rel=1e-12, abs=1e-15), (step, a["lr"])
            for key in ("momentum", "betas"):
                if key in b:
                    assert a[key] == pytest.approx(b[key], rel=1e-12), (step, key)
        ours_opt.step()  # the order torch expects (no gradients: nothing moves)
        theirs_opt.step()
        ours.step()
        theirs.step()


def test_reduce_lr_on_plateau_follows_torch_and_a_graph_refuses_it_as_lr_sch():
    ours_opt, theirs_opt, torch = _pair("sgd")
    kwargs = dict(mode="min", factor=0.5, patience=2, threshold=0.01, cooldown=1,
                  min_lr=[0.1, 0.2])
    ours = lr_scheduler.ReduceLROnPlateau(ours_opt, **kwargs)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs_opt, **kwargs)
    metrics = [5, 4, 4, 4, 4, 4, 3.99, 4, 4, 4, 4, 4, 4, 4, 1, 1, 1, 1, 1, 1]
    for metric in metrics:
        ours.step(metric)
        theirs.step(metric)
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
    assert ours.get_last_lr()[0] < 1.0  # it did reduce
    maximise = lr_scheduler.ReduceLROnPlateau(_optimizer(), mode="max", patience=0,
                                              threshold_mode="abs")
    maximise.step(1.0)
    maximise.step(0.5)
    assert maximise.get_last_lr() == [0.1]

    model = flow.nn.Linear(2, 2)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    class Graph(flow.nn.Graph):
        def __init__(self, scheduler):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer, lr_sch=scheduler)

    with pytest.raises(TypeError, match=r"ReduceLROnPlateau steps on a metric"):
        Graph(lr_scheduler.ReduceLROnPlateau(optimizer))
    with pytest.raises(ValueError, match=r"OneCycleLR with cycle_momentum=True"):
        Graph(lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=5))
    Graph(lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=5, cycle_momentum=False))
