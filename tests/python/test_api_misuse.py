"""Misuses of the local API that used to crash, or to train the wrong thing without a word
(found by exploring the API as a user would, 2026-11-28): each now raises naming what was
wrong, or does what torch does."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from oneflowlike.utils.data.collate import default_collate


@pytest.mark.parametrize("make", [lambda: flow.zeros(2**31, 2**33), lambda: flow.arange(2**61),
                                  lambda: flow.ones(2**32, 2**32).sum(),
                                  lambda: nn.Embedding(2**32, 2**32),
                                  lambda: nn.Linear(2**32, 2**32)])
def test_a_shape_past_int64_is_refused_not_a_crash(make):
    # The element (or byte) count wrapped around: a tensor without storage, then a segfault.
    with pytest.raises(ValueError, match=r"more (elements|bytes) than an int64 counts"):
        make()


def test_clone_passes_the_gradient_on():
    x = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.clone()
    assert y.requires_grad
    (y * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])  # was [1, 2, 3]
    with flow.no_grad():
        y.add_(1)  # its own memory
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("write", [lambda x: x.narrow(1, 0, 2).fill_(7),
                                   lambda x: x.t().add_(1), lambda x: x.T.copy_(flow.ones(3, 2)),
                                   lambda x: x.transpose(0, 1).mul_(2),
                                   lambda x: x.permute(1, 0).zero_(),
                                   lambda x: x.split(1)[0].fill_(1),
                                   lambda x: x.chunk(2, 1)[0].fill_(1),
                                   lambda x: x.unbind(0)[1].fill_(1),
                                   lambda x: x[:1].expand(2, 3).fill_(1)])
def test_writes_into_a_copy_where_torch_gives_a_view_are_refused(write):
    x = flow.zeros(2, 3)
    with pytest.raises(ValueError, match="copy that indexing or a view-like op made"):
        write(x)
    np.testing.assert_array_equal(x.numpy(), np.zeros((2, 3), np.float32))
    # Reshapes are views: writes through them land.
    x.reshape(3, 2).fill_(4)
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 4, np.float32))


def test_grad_scaler_refuses_a_step_without_scale_and_a_bad_scale():
    model = nn.Linear(2, 1)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    scaler = flow.amp.GradScaler()
    model(flow.ones(1, 2)).sum().backward()  # no scale(): the step would be 65536x too small
    with pytest.raises(RuntimeError, match=r"without scale\(\) since the last update"):
        scaler.step(opt)
    for bad in (0, -5, float("inf")):
        with pytest.raises(ValueError, match="positive finite scale"):
            scaler.update(new_scale=bad)
    opt.zero_grad()
    before = model.weight.detach().numpy().copy()
    scaler.scale(model(flow.ones(1, 2)).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(model.weight.detach().numpy(), before)


def test_graph_config_changes_after_the_first_call_are_refused():
    model = nn.Linear(3, 2)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    g = Step()
    g(flow.ones(4, 3))
    for change in (lambda: g.config.enable_amp(True, dtype=flow.bfloat16),
                   lambda: g.config.set_gradient_accumulation_steps(2),
                   lambda: g.config.enable_zero(True)):
        with pytest.raises(RuntimeError, match="must come before the first call"):
            change()


def test_a_checkpoint_keeps_zero_d_tensors_zero_d(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.temperature = nn.Parameter(flow.tensor(1.0))
            self.register_buffer("count", flow.tensor(5.0))

    flow.save(M().state_dict(), str(tmp_path / "ck"))
    state = flow.load(str(tmp_path / "ck"))
    assert tuple(state["temperature"].shape) == () and tuple(state["count"].shape) == ()
    M().load_state_dict(state)  # was a size mismatch, (1,) against ()


def test_default_collate_keeps_tensor_and_array_dtypes():
    assert default_collate([flow.ones(2, dtype=flow.bfloat16)] * 3).dtype == flow.bfloat16
    assert default_collate([flow.ones(2, dtype=flow.float64)] * 2).dtype == flow.float64
    assert default_collate([np.ones(2)] * 2).dtype == flow.float32  # numpy's default float64
    assert default_collate([1.0, 2.0]).dtype == flow.float32
    assert default_collate([np.arange(3, dtype=np.uint16)] * 2).dtype == flow.int64


def test_a_ragged_placement_names_the_placement():
    with pytest.raises(ValueError, match=r"\[placement\] ranks must be a list of ints or a grid"):
        flow.placement("cpu", ranks=[[0, 1], [1]])


def _model_and_training_graph():
    """A small classifier, its initial values, a batch, and a graph training it with SGD."""
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    initial = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    x = flow.tensor(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32))
    y = flow.tensor(np.random.default_rng(1).integers(0, 3, 16))

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.5))

        def build(self, x, y):
            loss = nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
            return loss

    return model, initial, x, y, Train()


def test_graphs_and_eager_calls_on_one_model_see_its_trained_values(tmp_path, variables):
    """Note [Graphs sharing modules]: an evaluation graph built on a model a training graph
    trained, the eager model and its state_dict see the trained values (they saw the initial
    ones); an eager write into the model reaches the training graph's next step."""
    F = nn.functional
    model, initial, x, y, train = _model_and_training_graph()

    class Evaluate(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x, y):
            return F.cross_entropy(self.model(x), y)

    for _ in range(10):
        train(x, y)
    trained = {k: v.numpy() for k, v in train.state_dict().items() if k in initial}
    model.eval()
    evaluated = Evaluate()(x, y).numpy()
    eager = F.cross_entropy(model(x), y).numpy()
    np.testing.assert_allclose(evaluated, eager, rtol=1e-6)
    state = model.state_dict()
    for k, v in trained.items():
        np.testing.assert_array_equal(state[k].numpy(), v)
        assert not np.array_equal(v, initial[k])
    model.train()
    with flow.no_grad():
        for p in model.parameters():
            p.fill_(0.0)
    np.testing.assert_allclose(train(x, y).numpy(), np.log(3.0), rtol=1e-6)  # zero logits
    assert bool(train._bound) == (variables == "bound")


def test_a_graph_refuses_a_tensor_to_train_that_its_modules_do_not_hold():
    held, outside = nn.Linear(2, 2), nn.Linear(2, 2)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.held = held
            self.add_optimizer(flow.optim.SGD(held.parameters(), lr=0.1))

        def build(self, x):
            loss = outside(self.held(x)).sum()  # `outside` would never train
            loss.backward()
            return loss

    with pytest.raises(ValueError, match="requires grad but is not a parameter or buffer of the "
                                         "graph's modules"):
        Step()(flow.ones(3, 2))


def test_small_misuses_name_what_was_wrong(tmp_path):
    # any/all over nothing, as torch: False and True (a max over nothing was refused).
    assert not flow.any(flow.ones(0) > 0).item() and flow.all(flow.ones(0) > 0).item()
    assert flow.all(flow.ones(2, 0) > 0, 1).numpy().tolist() == [True, True]
    assert flow.allclose(flow.ones(0), flow.ones(0))
    # A corrupt manifest names the checkpoint (a bare JSONDecodeError before).
    flow.save({"w": flow.ones(2)}, str(tmp_path / "ck"))
    (tmp_path / "ck" / "manifest.json").write_text('{"format": ')
    with pytest.raises(ValueError, match=r"checkpoint '.*ck' is corrupt: manifest.json is not valid"):
        flow.load(str(tmp_path / "ck"))

    class NoInit(nn.Graph):
        def __init__(self):
            self.model = nn.Linear(2, 2)  # before super().__init__()

    with pytest.raises(RuntimeError, match=r"call super\(\).__init__\(\) first in NoInit"):
        NoInit()


def test_a_write_after_a_graph_step_is_the_newest_value(variables):
    """Note [Graphs sharing modules]: load_state_dict or an eager write after a training graph's
    step is newer than the graph's copy: it is what state_dict, eager calls and the graph's next
    step see (a sync from the graph overwrote it)."""
    import gc

    from oneflowlike.nn import graph_sharing

    model, initial, x, y, train = _model_and_training_graph()
    for _ in range(3):
        train(x, y)
    model.load_state_dict({k: flow.tensor(v) for k, v in initial.items()})
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), initial[k])
    train(x, y)
    with flow.no_grad():
        for p in model.parameters():
            p.fill_(0.0)
    np.testing.assert_array_equal(model(x).numpy(), np.zeros((16, 3), np.float32))


class _TrainOf(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        return loss


def test_a_trained_graph_dropped_before_its_model_is_read_leaves_its_values(variables):
    """Note [Graphs sharing modules]: `del graph` after training, then model.state_dict(), gives
    the trained values (the graph went with them, and state_dict gave the initial ones); what
    holds them goes once they are taken, and a model and its graph dropped together go at once,
    by reference counts (the collector is off here: nothing waits for it)."""
    import gc
    import weakref

    from oneflowlike.nn import graph_sharing

    model, initial, x, y, train = _model_and_training_graph()
    twin, _, _, _, twin_train = _model_and_training_graph()  # the same seed: the same values
    for _ in range(2):
        train(x, y)
        twin_train(x, y)
    twin_train.sync_to_modules()
    trained = {k: v.numpy().copy() for k, v in twin.state_dict().items()}
    assert any(not np.array_equal(trained[k], initial[k]) for k in initial)
    gc.collect()
    gc.disable()
    try:
        holder = weakref.ref(train.__dict__["_sharing_holder"])
        del train
        # Its model keeps what it holds; bound, the model has the values: nothing is held.
        assert (holder() is not None) == (variables == "copied")
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), trained[k])
        assert holder() is None  # the values taken, nothing keeps it
        # sync_to_modules, then del: it goes at once; with its model, the same.
        twin_train(x, y)
        twin_train.sync_to_modules()
        holder = weakref.ref(twin_train.__dict__["_sharing_holder"])
        del twin_train
        assert holder() is None
        # (A graph class of the module, not the helper's, whose closure keeps its model.)
        model = nn.Linear(4, 3)
        train = _TrainOf(model, flow.optim.SGD(model.parameters(), lr=0.5))
        train(x, y)
        holder = weakref.ref(train.__dict__["_sharing_holder"])
        del model, train
        assert holder() is None and not graph_sharing._holders
    finally:
        gc.enable()


def test_sync_to_modules_of_a_graph_another_one_trained_after_gives_the_newest_values(variables):
    """graph.sync_to_modules() copies the newest values: those of the graph that trained last,
    not its own older copy (it overwrote the other graph's training)."""
    model, initial, x, y, first = _model_and_training_graph()
    second = _TrainOf(model, flow.optim.SGD(model.parameters(), lr=0.5))
    first(x, y)
    second(x, y)
    second(x, y)
    newest = {k: v.numpy().copy() for k, v in second.state_dict().items() if k in
              {f"model.{name}" for name in initial}}
    first.sync_to_modules()
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), newest[f"model.{k}"])


def test_a_copy_made_contiguous_or_a_parameter_is_writable():
    w = flow.ones(3, 2)
    fresh = w.t().contiguous()
    fresh.add_(1)  # its own memory, as torch's contiguous() of a transpose
    np.testing.assert_array_equal(w.numpy(), np.ones((3, 2), np.float32))
    m = nn.Linear(3, 2)
    m.weight = nn.Parameter(w.t())  # a GPT-2 Conv1D weight turned around
    m.load_state_dict({"weight": flow.zeros(2, 3), "bias": flow.zeros(2)})
    np.testing.assert_array_equal(m.weight.detach().numpy(), np.zeros((2, 3), np.float32))
