"""Misuses of nn.Graph that would train the wrong thing silently are refused (issue 14, items 1
and 3, and the audit of local and global tensors mixing), in one process; on two processes,
every rank refuses (dist/refusal_worker.py)."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from launching import launch
from train_graph import TrainGraph


def _placement():
    return flow.placement("cpu", ranks=[0])


class _Train(TrainGraph):
    """The messages name the graph's class: this one."""


def _mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))


def _data(placement=None):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 4)).astype(np.float32), np.array([0, 1, 2, 0])
    if placement is None:
        return flow.tensor(x), flow.tensor(y)
    S0 = flow.sbp.split(0)
    return (flow.tensor(x, placement=placement, sbp=S0),
            flow.tensor(y, placement=placement, sbp=S0))


def test_local_inputs_to_a_global_graph_are_refused_naming_the_input_and_the_fix():
    model = _mlp()
    model.to_global(_placement(), flow.sbp.broadcast)
    graph = _Train(model, flow.optim.AdamW(model.parameters(), lr=0.01))
    x, y = _data()
    with pytest.raises(TypeError, match=r"input 'x' of _Train is a local tensor \(4, 4\), but the "
                                        r"graph is global .*to_global\(placement=.*"
                                        r"sbp=flow.sbp.split\(0\)\)"):
        graph(x, y)


def test_a_local_parameter_in_a_global_graph_is_refused_naming_it():
    model = _mlp()
    model[0].to_global(_placement(), flow.sbp.broadcast)  # model[2] stays local
    graph = _Train(model, flow.optim.AdamW(model.parameters(), lr=0.01))
    with pytest.raises(TypeError, match=r"parameter 'model.2.weight' \(3, 8\) of _Train is a "
                                        r"local tensor.*module.to_global"):
        graph(*_data(_placement()))


def test_a_local_tensor_captured_by_a_global_build_is_refused_and_a_global_one_works():
    model = _mlp()
    model.to_global(_placement(), flow.sbp.broadcast)
    scale = flow.full((4, 3), 2.0)

    class Scaled(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x) * scale

    with pytest.raises(TypeError, match=r"\[mul\] got a local tensor .* in a graph over global "
                                        r"tensors.*sbp=flow.sbp.broadcast.*test_graph_refusals.py"):
        Scaled()(_data(_placement())[0])
    plain = _Linear(model)(_data(_placement())[0]).numpy()
    scale = scale.to_global(placement=_placement(), sbp=flow.sbp.broadcast)
    np.testing.assert_allclose(Scaled()(_data(_placement())[0]).numpy(), 2 * plain, rtol=1e-6)


class _Linear(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_an_optimizer_over_parameters_outside_the_graph_is_refused_naming_them():
    model, other = _mlp(), nn.Linear(2, 2)
    opt = flow.optim.SGD(list(model.parameters()) + list(other.parameters()), lr=0.1)
    with pytest.raises(ValueError, match=r"holds parameters that are not in the graph's modules "
                                         r"\(\['model'\]\): param_groups\[0\]\['params'\]\[4\] "
                                         r"\(2, 2\), param_groups\[0\]\['params'\]\[5\] \(2,\)"):
        _Train(model, opt)(*_data())


def test_only_the_optimizers_parameters_train_as_in_torch():
    model = _mlp()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    graph = _Train(model, flow.optim.SGD(model[2].parameters(), lr=0.5))
    graph(*_data())
    after = graph.state_dict()
    np.testing.assert_array_equal(after["model.0.weight"].numpy(), before["0.weight"])
    assert not np.array_equal(after["model.2.weight"].numpy(), before["2.weight"])
    assert "model.0.weight.momentum" not in after and "model.2.weight.momentum" in after


def test_an_optimizer_built_before_the_layout_trains_the_laid_out_parameters():
    model = _mlp()
    opt = flow.optim.AdamW(model.parameters(), lr=0.05)  # holds the local tensors
    model.to_global(_placement(), flow.sbp.broadcast)
    model[0].weight = model[0].weight.to_global(sbp=flow.sbp.split(0))  # replaced twice
    graph = _Train(model, opt)
    first = float(graph(*_data(_placement())).numpy())
    second = float(graph(*_data(_placement())).numpy())
    assert second < first
    assert "model.0.weight.exp_avg" in graph.state_dict()


def test_a_graph_traced_in_train_mode_refuses_to_run_in_eval_mode():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    graph = _Linear(model)
    x = flow.randn(2, 4)
    graph(x)
    model.eval()
    with pytest.raises(RuntimeError, match=r"traced with 'model' in train\(\) mode, and it is now "
                                           r"in eval\(\) mode.*Build a separate graph"):
        graph(x)
    evaluation = _Linear(model)  # a graph traced in eval mode: dropout off
    np.testing.assert_allclose(evaluation(x).numpy(), model(x).detach().numpy(), rtol=1e-6)
    model.train()
    graph(x)


def test_every_rank_refuses_mixing_local_and_global_on_two_processes():
    out = launch(2, "refusal_worker.py")
    assert out.count("refusals OK") == 2, out


def test_freezing_a_global_parameter_is_honoured_before_and_refused_after_compiling():
    model = _mlp()
    model.to_global(_placement(), flow.sbp.broadcast)
    model[0].weight.requires_grad_(False)
    assert not model[0].weight.requires_grad and model[0].bias.requires_grad
    before = model[0].weight.numpy().copy()
    graph = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    graph(*_data(_placement()))
    np.testing.assert_array_equal(graph.state_dict()["model.0.weight"].numpy(), before)
    model[2].weight.requires_grad = False  # after compiling: the plan would keep training it
    with pytest.raises(RuntimeError, match=r"which parameters train changed after _Train "
                                           r"compiled \(\['model.2.weight'\]"):
        graph(*_data(_placement()))


def test_replacing_a_parameter_after_compiling_is_refused():
    model = _mlp()
    graph = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    graph(*_data())
    model[0].weight = nn.Parameter(flow.zeros(8, 4))
    with pytest.raises(RuntimeError, match=r"\['model.0.weight'\] were added, removed or replaced "
                                           r"after _Train traced them"):
        graph(*_data())


def test_what_the_per_call_check_must_still_see_is_refused():
    """Note [Checking a graph's modules each call]: the flat snapshot sees every change the tree
    walk saw, the graph's own modules included (g.m = other ran the old module silently)."""

    class Eval(nn.Graph):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def build(self, x):
            return self.m(x)

    x = flow.randn(2, 4)
    graph = Eval(_mlp())
    graph(x)
    graph.m = _mlp()
    with pytest.raises(RuntimeError, match=r"\['m.0.bias', 'm.0.weight', 'm.2.bias', "
                                           r"'m.2.weight'\] were added, removed or replaced"):
        graph(x)
    model = _mlp()
    graph = Eval(model)
    graph(x)
    model[1] = nn.Sequential(nn.GELU(), nn.Linear(8, 8))  # a submodule added where none was
    with pytest.raises(RuntimeError, match=r"\['m.1.1.bias', 'm.1.1.weight'\] were added"):
        graph(x)
    model = _mlp()
    graph = Eval(model)
    graph(x)
    model.to(flow.float64)
    with pytest.raises(RuntimeError, match=r"moved to another device or dtype"):
        graph(x)
    model = _mlp()
    graph = Eval(model)
    graph(x)
    handle = model[0].register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(RuntimeError, match=r"hooks of \['m.0'\] were registered or removed"):
        graph(x)
    handle.remove()
    graph(x)  # as traced again


def test_a_bad_shape_leaves_the_graph_as_it_was():
    model = _mlp()
    graph = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    graph(*_data())
    state = graph.state_dict()
    state["_graph.optimizer"]["step"] = 7
    state["model.0.weight"] = flow.zeros(2, 2)
    with pytest.raises(ValueError, match=r"'model.0.weight' has shape \(8, 4\)"):
        graph.load_state_dict(state)
    assert graph.step_count == 1


def test_a_checkpoint_without_training_state_loads_with_strict_false(tmp_path):
    model = _mlp()
    graph = _Train(model, flow.optim.SGD(model.parameters(), lr=0.5))
    graph(*_data())
    state = {k: v for k, v in graph.state_dict().items() if flow.is_tensor(v)}  # an older save
    flow.save(state, str(tmp_path / "old"))
    loaded = flow.load(str(tmp_path / "old"), like=graph.state_dict())
    assert "_graph.optimizer" not in loaded
    with pytest.raises(KeyError, match="needs '_graph.optimizer'"):
        graph.load_state_dict(loaded)
    graph.load_state_dict(loaded, strict=False)


def test_module_load_state_dict_on_a_global_module():
    model = _mlp()
    source = {k: v * 0 + 1 for k, v in _mlp().state_dict().items()}
    model.to_global(_placement(), flow.sbp.split(0))
    model.load_state_dict(source)  # local whole values
    np.testing.assert_array_equal(model[0].weight.numpy(), np.ones((8, 4)))
    model.load_state_dict({k: v * 2 for k, v in model.state_dict().items()})  # global values
    np.testing.assert_array_equal(model[2].bias.numpy(), np.full(3, 2.0))


def test_enable_amp_refuses_what_it_cannot_do_safely():
    config = flow.nn.Graph().config
    with pytest.raises(TypeError, match=r"enable_amp takes dtype=flow.bfloat16 or flow.float16. "
                                        r"However, got oneflowlike.int32"):
        config.enable_amp(True, dtype=flow.int32)
    # float16 is taken here; the graph refuses to compile it without set_grad_scaler
    # (test_amp.py), as small gradients would flush to 0 silently.
    config.enable_amp(True, dtype=flow.float16)
    with pytest.raises(TypeError, match=r"reduce_dtype=flow.float32 or flow.bfloat16. However, "
                                        r"got oneflowlike.float16"):
        config.enable_amp(True, reduce_dtype=flow.float16)
    config.enable_amp(True)
    assert config.amp_dtype == flow.bfloat16
    config.enable_amp(False)
    assert config.amp_dtype is None
