"""Note [Graphs sharing modules] and Note [Variables bound to the caller's tensors]: a graph's
runtime takes its modules' tensors as its variables, so it holds no second copy of the model
and a step's writes are the modules' values."""

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import _C, nn
from oneflowlike.nn import graph_sharing


class _Train(nn.Graph):
    def __init__(self, model, optimizer=None):
        super().__init__()
        self.model = model
        if optimizer is not None:
            self.add_optimizer(optimizer)

    def build(self, x):
        out = self.model(x)
        if not self._optimizers:
            return out
        loss = (out * out).mean()
        loss.backward()
        return loss


def _grown_by_first_call(graph, x):
    _C.cpu_memory_reset_peak()
    live, peak = _C.cpu_memory_live_bytes(), _C.cpu_memory_peak_bytes()
    graph(x)
    return _C.cpu_memory_live_bytes() - live, _C.cpu_memory_peak_bytes() - peak


def test_a_graph_holds_no_second_copy_of_its_weights(variables):
    """The first call of an evaluation graph on a 16 MiB weight allocates a fraction of it where
    the weight is bound (it allocated all of it, and kept it, with a copy of its own), also at
    its peak: the variable never had memory of its own, not even while the graph loaded."""
    flow.manual_seed(0)
    model = nn.Linear(2048, 2048)
    weight_bytes = 2048 * 2048 * 4
    grown, peak = _grown_by_first_call(_Train(model), flow.randn(4, 2048))
    if variables == "bound":
        assert grown < weight_bytes / 4 and peak < weight_bytes / 4, (grown, peak)
    else:
        assert grown >= weight_bytes, grown


def test_a_step_writes_the_modules_tensors_and_counts_the_writes():
    """After a step the module's tensors hold its values, with no sync; the trained parameters'
    versions count the write (a backward saved before the step refuses to read them, as after
    an optimizer's step in eager), a frozen parameter's does not."""
    flow.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    optimizer = flow.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    reference = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    reference.load_state_dict(model.state_dict())
    reference[0].weight.requires_grad_(False)
    eager_optimizer = flow.optim.SGD([p for p in reference.parameters() if p.requires_grad],
                                     lr=0.1)
    x = flow.randn(8, 4)
    train = _Train(model, optimizer)
    saved = model(x).sum()  # eager: saves the weights at their versions now
    frozen = model[0].weight._version
    trained = model[1].weight._version
    for _ in range(3):
        train(x)
        eager_loss = (reference(x) * reference(x)).mean()
        eager_optimizer.zero_grad()
        eager_loss.backward()
        eager_optimizer.step()
    assert set(train._bound) == {"model.0.weight", "model.0.bias", "model.1.weight",
                                 "model.1.bias"}
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)
    assert model[0].weight._version == frozen and model[1].weight._version == trained + 3
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        saved.backward()


def test_a_module_tensor_given_new_memory_is_bound_again():
    """`weight.data = ...` between steps: the next step trains the new memory (its values, then
    its place), as it would eagerly; the old memory is left alone."""
    flow.manual_seed(2)
    model = nn.Linear(3, 3)
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    x = flow.randn(5, 3)
    train(x)
    old = model.weight.detach()
    before = old.numpy().copy()
    model.weight.data = flow.zeros(3, 3)
    with flow.no_grad():
        model.bias.fill_(0.0)
    np.testing.assert_allclose(train(x).numpy(), 0.0)  # zero weights and bias: zero outputs
    np.testing.assert_array_equal(old.numpy(), before)
    assert train._bound["model.weight"][0] == model.weight._data_ptr
    model.weight.data = flow.ones(3, 3)
    with flow.no_grad():
        want = ((x.numpy() @ np.ones((3, 3), np.float32).T) ** 2).mean()
    np.testing.assert_allclose(train(x).numpy(), want, rtol=1e-6)
    assert not np.array_equal(model.weight.numpy(), np.ones((3, 3), np.float32))  # trained


def test_feeding_a_bound_tensor_gives_the_graph_a_copy():
    """A module's own tensor fed as the graph's input is read as it was before the step, though
    the step updates it in place (the runtime refuses a fed piece on a bound piece's memory)."""
    flow.manual_seed(3)
    model = nn.Linear(4, 4, bias=False)
    copy = nn.Linear(4, 4, bias=False)
    copy.load_state_dict(model.state_dict())
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    reference = _Train(copy, flow.optim.SGD(copy.parameters(), lr=0.5))
    for _ in range(2):
        got = train(model.weight.detach()).numpy()
        want = reference(copy.weight.detach().clone()).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(model.weight.numpy(), copy.weight.numpy(), rtol=1e-6)


def test_module_tensors_sharing_memory_keep_copies_of_their_own():
    """Two parameters on one storage are not bound (the plan would update them in place in an
    order it never fixed); the graph trains its own copies of them, and the others are bound."""
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    second.weight.data = first.weight.detach()
    model = nn.Sequential(first, second)
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.1))
    train(flow.randn(3, 2))
    assert set(train._bound) == {"model.0.bias", "model.1.bias"}
    assert graph_sharing.bindable_pieces(train, {"model.0.weight", "model.1.weight"}) == {}


def test_a_checkpoint_loaded_into_a_graph_after_its_module_moved_reaches_the_module():
    """graph.load_state_dict after `weight.data = ...` (no call between): the loaded values go
    into the module's new memory, which the next step trains."""
    flow.manual_seed(4)
    model = nn.Linear(3, 3)
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    x = flow.randn(4, 3)
    train(x)
    state = {k: v.clone() if flow.is_tensor(v) else v for k, v in train.state_dict().items()}
    train(x)
    model.weight.data = flow.zeros(3, 3)
    train.load_state_dict(state)
    np.testing.assert_array_equal(model.weight.numpy(), state["model.weight"].numpy())
    train(x)
    assert not np.array_equal(model.weight.numpy(), state["model.weight"].numpy())
    np.testing.assert_array_equal(train.state_dict()["model.weight"].numpy(),
                                  model.weight.numpy())


@pytest.mark.parametrize("copied", ["training", "evaluation"])
def test_a_bound_graph_and_a_graph_with_copies_on_one_model_see_each_others_steps(
        copied, monkeypatch):
    """One graph binds the module tensors, the other keeps copies (as ZeRO's or a GPU's would):
    each sees what the other wrote, and eager calls see both."""
    flow.manual_seed(5)
    model = nn.Linear(4, 2)
    reference = nn.Linear(4, 2)
    reference.load_state_dict(model.state_dict())
    eager_optimizer = flow.optim.SGD(reference.parameters(), lr=0.5)
    x = flow.randn(6, 4)

    def compiled(graph, with_copies):
        with monkeypatch.context() as patch:
            if with_copies:
                patch.setattr(graph_sharing, "bindable_pieces", lambda graph, names: {})
            graph(x)
        return graph

    evaluate = compiled(_Train(model), copied == "evaluation")
    train = compiled(_Train(model, flow.optim.SGD(model.parameters(), lr=0.5)),
                     copied == "training")
    assert bool(train._bound) == (copied != "training")
    assert bool(evaluate._bound) == (copied != "evaluation")
    loss = (reference(x) * reference(x)).mean()
    loss.backward()
    eager_optimizer.step()
    for _ in range(2):
        np.testing.assert_allclose(evaluate(x).numpy(), reference(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
        train(x)
        eager_optimizer.zero_grad()
        (reference(x) * reference(x)).mean().backward()
        eager_optimizer.step()
        np.testing.assert_allclose(model(x).numpy(), reference(x).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    with flow.no_grad():
        model.weight.fill_(0.0)
        model.bias.fill_(0.0)
    np.testing.assert_array_equal(evaluate(x).numpy(), np.zeros((6, 2), np.float32))


def test_a_checkpoint_loaded_after_an_eager_write_is_what_the_next_step_trains(variables):
    """An eager write into the module, then graph.load_state_dict: the loaded values are the
    newest (the next step and eager reads see them, not the eager write)."""
    flow.manual_seed(6)
    model = nn.Linear(3, 2)
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5, momentum=0.9))
    x = flow.randn(4, 3)
    train(x)
    state = {k: v.clone() if flow.is_tensor(v) else v for k, v in train.state_dict().items()}
    second = train(x).numpy()
    with flow.no_grad():
        model.weight.fill_(3.0)
    train.load_state_dict(state)
    np.testing.assert_array_equal(model.state_dict()["weight"].numpy(),
                                  state["model.weight"].numpy())
    np.testing.assert_array_equal(train(x).numpy(), second)


def test_a_graph_whose_first_call_failed_while_placing_its_variables_runs_after(monkeypatch):
    """Note [Variables bound to the caller's tensors]: an error while the first call places the
    variables (here the second bind) leaves none without memory: the next call writes what was
    not placed and runs."""
    flow.manual_seed(7)
    model = nn.Linear(3, 2)
    reference = _Train(nn.Linear(3, 2))
    reference.model.load_state_dict(model.state_dict())
    x = flow.randn(4, 3)
    bind, calls = graph_sharing.bind, []

    def failing(graph, full, value):
        calls.append(full)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return bind(graph, full, value)

    graph = _Train(model)
    monkeypatch.setattr(graph_sharing, "bind", failing)
    with pytest.raises(KeyboardInterrupt):
        graph(x)
    monkeypatch.setattr(graph_sharing, "bind", bind)
    np.testing.assert_array_equal(graph(x).numpy(), reference(x).numpy())


def test_a_model_converted_after_a_graph_trained_it_keeps_the_training(variables):
    """model.double() after graph steps converts the trained values (with copies, it converted
    the module's older ones and the steps were lost)."""
    flow.manual_seed(8)
    model = nn.Linear(3, 2)
    train = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    x = flow.randn(4, 3)
    train(x)
    trained = train.state_dict()["model.weight"].numpy()
    model.double()
    np.testing.assert_array_equal(model.weight.numpy(), trained.astype(np.float64))


def test_a_dropped_graph_frees_its_memory_in_a_one_process_job(variables):
    """A one-process job keeps no graph's runtime past the graph: its gradients and optimizer
    state go with it (they stayed until the process ended, one set per graph ever made)."""
    model = nn.Linear(512, 512)
    x = flow.randn(4, 512)
    live = _C.cpu_memory_live_bytes()
    for _ in range(3):
        train = _Train(model, flow.optim.Adam(model.parameters(), lr=1e-3))
        train(x)
        assert _C.cpu_memory_live_bytes() - live >= 3 * 512 * 512 * 4  # gradients, moments
        train.sync_to_modules()  # with copies, the module takes the values from the runtime
        del train
        assert _C.cpu_memory_live_bytes() - live < 512 * 512 * 4 / 8
