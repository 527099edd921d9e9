"""flow.nn: Parameter, Module bookkeeping and state_dict, and containers."""

import collections

import numpy as np
import pytest

import oneflowlike as flow
from oneflowlike import nn


# ---- Parameter ---------------------------------------------------------------------------------


def test_parameter_is_a_leaf_tensor_sharing_storage_that_requires_grad():
    data = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    p = nn.Parameter(data)
    assert isinstance(p, flow.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf
    assert p._shares_storage_with(data)
    assert not nn.Parameter(data, requires_grad=False).requires_grad
    assert repr(p).startswith("Parameter containing:\ntensor([[1., 2.],")
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [[2.0, 4.0], [6.0, 8.0]])
    assert type(p * 2) is flow.Tensor  # ops return plain tensors


def test_parameter_from_a_computed_tensor_drops_its_history():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    p = nn.Parameter(x * 3)
    assert p.is_leaf and p.requires_grad
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [6.0, 12.0])
    assert x.grad is None


def test_parameter_rejects_non_tensors():
    with pytest.raises(TypeError, match=r"\[Parameter\] data must be a Tensor"):
        nn.Parameter([1.0, 2.0])


# ---- Module bookkeeping ------------------------------------------------------------------------


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2, bias=False)
        self.scale = nn.Parameter(flow.ones(2))
        self.register_buffer("steps", flow.zeros((), dtype=flow.int64))
        self.register_buffer("cache", flow.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_attribute_assignment_registers_parameters_buffers_and_children():
    net = _Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc1.weight", "fc1.bias",
                                                      "fc2.weight"]
    assert [tuple(p.shape) for p in net.parameters()] == [(2,), (3, 4), (3,), (2, 3)]
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert len(list(net.buffers())) == 2
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert list(net.children()) == [net.fc1, net.act, net.fc2]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert list(net.modules())[0] is net
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert net.fc2.bias is None
    assert "fc1" in dir(net) and "scale" in dir(net)


def test_reassigning_and_deleting_attributes_moves_them_between_registries():
    net = _Net()
    net.fc1 = None
    assert net.fc1 is None and [n for n, _ in net.named_children()] == ["act", "fc2"]
    net.scale = nn.Parameter(flow.zeros(2))
    np.testing.assert_array_equal(net.scale.numpy(), [0.0, 0.0])
    net.steps = flow.ones((), dtype=flow.int64)
    assert net.steps.item() == 1
    del net.scale
    assert "scale" not in dict(net.named_parameters())
    with pytest.raises(AttributeError, match="'_Net' object has no attribute 'scale'"):
        net.scale
    net.plain = 3
    assert net.plain == 3 and "plain" not in dict(net.named_parameters())


def test_shared_parameters_and_modules_are_listed_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.wte.weight
            self.again = self.head

    tied = Tied()
    assert [n for n, _ in tied.named_parameters()] == ["wte.weight"]
    assert [n for n, _ in tied.named_modules()] == ["", "wte", "head"]
    # state_dict lists a tied weight under every name, as torch does
    assert list(tied.state_dict()) == ["wte.weight", "head.weight", "again.weight"]


def test_registration_errors_name_the_problem():
    net = _Net()
    with pytest.raises(TypeError, match="cannot assign an object of type Tensor to parameter"):
        net.scale = flow.ones(2)
    with pytest.raises(TypeError, match=r"flow.nn.Parameter or None.*Parameter\(tensor\)"):
        net.register_parameter("w", flow.ones(2))
    with pytest.raises(KeyError, match="attribute 'fc1' already exists"):
        net.register_parameter("fc1", nn.Parameter(flow.ones(1)))
    with pytest.raises(KeyError, match='contain no "."'):
        net.register_buffer("a.b", flow.ones(1))
    with pytest.raises(TypeError, match="must be a Tensor or None"):
        net.register_buffer("b", [1.0])
    with pytest.raises(TypeError, match="type int to child module 'fc1': a Module or None"):
        net.fc1 = 3
    with pytest.raises(TypeError, match="type list to buffer 'steps': a Tensor or None"):
        net.steps = [1]

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(flow.ones(1))
            super().__init__()

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) is called"):
        Early()
    with pytest.raises(NotImplementedError, match="Module must define forward"):
        nn.Module()(flow.ones(1))


def test_train_eval_zero_grad_apply_and_requires_grad():
    net = _Net()
    assert net.training and net.fc1.training
    assert net.eval() is net
    assert not net.training and not net.fc1.training and not net.act.training
    net.train()
    assert net.fc2.training
    with pytest.raises(ValueError, match="mode must be a bool"):
        net.train("no")

    net(flow.randn(5, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())

    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited == ["Linear", "ReLU", "Linear", "_Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_repr_matches_torch_layout():
    net = nn.Sequential(nn.Linear(4, 8), nn.GELU(approximate="tanh"), nn.Dropout(0.1),
                        nn.LayerNorm(8), nn.Embedding(10, 3), nn.ReLU(),
                        nn.CrossEntropyLoss())
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (1): GELU(approximate='tanh')\n"
        "  (2): Dropout(p=0.1, inplace=False)\n"
        "  (3): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
        "  (4): Embedding(10, 3)\n"
        "  (5): ReLU()\n"
        "  (6): CrossEntropyLoss()\n"
        ")"
    )
    assert repr(nn.Sequential(nn.Sequential(nn.ReLU()))) == (
        "Sequential(\n  (0): Sequential(\n    (0): ReLU()\n  )\n)")


def test_get_submodule_walks_dotted_paths():
    net = nn.Sequential(collections.OrderedDict(block=nn.ModuleList([nn.ReLU(), nn.GELU()])))
    assert isinstance(net.get_submodule("block.1"), nn.GELU)
    assert net.get_submodule("") is net
    with pytest.raises(AttributeError, match="block has no submodule '7'"):
        net.get_submodule("block.7")


# ---- state_dict --------------------------------------------------------------------------------


def test_state_dict_round_trip_copies_values_into_the_same_parameters():
    flow.manual_seed(1)
    source = _Net()
    flow.manual_seed(2)
    target = _Net()
    state = source.state_dict()
    assert list(state) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert not isinstance(state["fc1.weight"], nn.Parameter)
    assert not state["fc1.weight"].requires_grad
    assert state["fc1.weight"]._shares_storage_with(source.fc1.weight)
    assert isinstance(source.state_dict(keep_vars=True)["fc1.weight"], nn.Parameter)

    before = {n: p for n, p in target.named_parameters()}
    optimizer = flow.optim.SGD(target.parameters(), lr=0.1)
    source.steps = flow.full((), 7)
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    for name, p in target.named_parameters():
        assert p is before[name]  # loaded in place: the optimizer still holds them
        np.testing.assert_array_equal(p.numpy(), dict(source.named_parameters())[name].numpy())
    assert target.steps.item() == 7
    x = flow.randn(3, 4)
    np.testing.assert_array_equal(target(x).numpy(), source(x).numpy())
    assert not target.fc1.weight._shares_storage_with(source.fc1.weight)

    target(x).sum().backward()
    optimizer.step()
    assert not np.array_equal(target.fc1.weight.numpy(), source.fc1.weight.numpy())


def test_loading_a_modules_own_state_dict_keeps_its_values():
    net = _Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    net.load_state_dict(net.state_dict())
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_load_state_dict_casts_dtype_and_accepts_numpy_arrays():
    layer = nn.Linear(2, 2)
    weight = np.array([[1.5, -2.0], [0.25, 3.0]])
    layer.load_state_dict({"weight": weight, "bias": flow.tensor([1, 2])})
    assert layer.weight.dtype == flow.float32 and layer.bias.dtype == flow.float32
    np.testing.assert_array_equal(layer.weight.numpy(), weight.astype(np.float32))
    np.testing.assert_array_equal(layer.bias.numpy(), [1.0, 2.0])


def test_load_state_dict_reports_missing_and_unexpected_keys():
    net = _Net()
    state = net.state_dict()
    del state["fc1.bias"]
    state["fc3.weight"] = flow.zeros(1)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(state)
    message = str(info.value)
    assert "[load_state_dict] Error(s) in loading state_dict for _Net" in message
    assert 'Missing key(s) in state_dict: "fc1.bias".' in message
    assert 'Unexpected key(s) in state_dict: "fc3.weight".' in message
    assert "HINT: strict=False" in message

    original = net.fc1.weight.numpy().copy()
    state["fc1.weight"] = flow.zeros(3, 4)
    result = net.load_state_dict(state, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["fc3.weight"]
    np.testing.assert_array_equal(net.fc1.weight.numpy(), 0.0)
    assert not np.array_equal(original, 0.0)


def test_load_state_dict_reports_shape_mismatches_and_copies_nothing():
    net = _Net()
    state = net.state_dict()
    state["fc1.weight"] = flow.zeros(4, 3)
    state["scale"] = flow.full((2,), 5.0)
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=(
                r"size mismatch for fc1.weight: copying a param with shape \(4, 3\) from "
                r"checkpoint, the shape in current model is \(3, 4\)")):
            net.load_state_dict(state, strict=strict)
    np.testing.assert_array_equal(net.scale.numpy(), [1.0, 1.0])  # checks come before copies
    with pytest.raises(TypeError, match='the value of "scale" must be a Tensor'):
        net.load_state_dict({**net.state_dict(), "scale": [1.0, 2.0]})
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        net.load_state_dict([("scale", flow.ones(2))])


def test_loading_into_a_non_finite_parameter_overwrites_it_in_place():
    layer = nn.Linear(2, 1)
    layer.weight = nn.Parameter(flow.tensor([[float("nan"), 1.0]]))
    old = layer.weight
    layer.load_state_dict({"weight": flow.tensor([[2.0, 3.0]]), "bias": flow.zeros(1)})
    assert layer.weight is old and layer.weight.requires_grad
    np.testing.assert_array_equal(layer.weight.numpy(), [[2.0, 3.0]])


# ---- containers --------------------------------------------------------------------------------


def test_sequential_indexes_slices_iterates_and_chains():
    layers = [nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and list(seq) == layers
    assert seq[0] is layers[0] and seq[-1] is layers[2]
    assert isinstance(seq[1:], nn.Sequential) and list(seq[1:]) == layers[1:]
    x = flow.randn(5, 3)
    np.testing.assert_array_equal(seq(x).numpy(), layers[2](layers[1](layers[0](x))).numpy())
    named = nn.Sequential(collections.OrderedDict(fc=nn.Linear(3, 3), act=nn.GELU()))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    seq.append(nn.ReLU())
    assert len(seq) == 4
    seq[3] = nn.GELU()
    assert isinstance(seq[3], nn.GELU)
    with pytest.raises(IndexError, match="index 4 is out of range for 4 modules"):
        seq[4]
    with pytest.raises(TypeError, match="expects Modules. However, got int"):
        nn.Sequential(nn.ReLU(), 3)


def test_module_list_registers_its_modules():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    blocks.append(nn.Linear(2, 3))
    blocks.extend([nn.ReLU()])
    blocks.insert(0, nn.GELU())
    assert len(blocks) == 5
    assert [type(m).__name__ for m in blocks] == ["GELU", "Linear", "Linear", "Linear", "ReLU"]
    assert blocks[-1] is list(blocks)[4] and isinstance(blocks[1:3], nn.ModuleList)
    assert [n for n, _ in blocks.named_parameters()][:2] == ["1.weight", "1.bias"]
    assert len(list(blocks.parameters())) == 6

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    tower = Tower()
    assert list(tower.state_dict()) == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                        "blocks.1.bias"]
    assert tuple(tower(flow.randn(3, 2)).shape) == (3, 2)
    with pytest.raises(NotImplementedError, match="iterate over it"):
        blocks(flow.ones(1))


def test_module_dict_maps_names_to_modules():
    d = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    d["c"] = nn.GELU()
    assert list(d) == ["a", "b", "c"] and len(d) == 3 and "b" in d
    assert list(d.keys()) == ["a", "b", "c"] and isinstance(d["c"], nn.GELU)
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias"]
    assert isinstance(d.pop("b"), nn.ReLU) and list(d) == ["a", "c"]
    del d["c"]
    d.update([("e", nn.ReLU())])
    assert [k for k, _ in d.items()] == ["a", "e"] and len(list(d.values())) == 2


# ---- copy.deepcopy (Note [Deep copies] in framework/tensor_copy.py) ----------------------------


def test_deepcopy_of_a_model_and_its_state_dict_has_its_own_storage():
    import copy

    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 3))
    model[0].weight.grad = flow.ones(4, 3)
    model[1].weight.requires_grad = False
    x = flow.tensor(np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32))
    copied = copy.deepcopy(model)
    best = copy.deepcopy(model.state_dict())
    np.testing.assert_array_equal(copied(x).numpy(), model(x).numpy())
    assert type(copied[0].weight) is nn.Parameter and copied[0].weight.requires_grad
    assert not copied[1].weight.requires_grad
    np.testing.assert_array_equal(copied[0].weight.grad.numpy(), np.ones((4, 3), np.float32))
    before = model[0].weight.numpy().copy()
    with flow.no_grad():
        copied[0].weight.fill_(5.0)
        copied[0].weight.grad.fill_(2.0)
        model[2].bias.fill_(7.0)
    np.testing.assert_array_equal(model[0].weight.numpy(), before)
    np.testing.assert_array_equal(model[0].weight.grad.numpy(), np.ones((4, 3), np.float32))
    assert not np.any(best["2.bias"].numpy() == 7.0)
    bf = copy.deepcopy(flow.ones(2, dtype=flow.bfloat16))
    assert bf.dtype == flow.bfloat16


def test_deepcopy_keeps_a_tied_weight_tied_and_refuses_a_computed_tensor():
    import copy

    embed = nn.Embedding(5, 4)
    head = nn.Linear(4, 5, bias=False)
    head.weight = embed.weight
    model = nn.ModuleList([embed, head])
    copied = copy.deepcopy(model)
    assert copied[0].weight is copied[1].weight and copied[0].weight is not embed.weight
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    b = copy.deepcopy(a)  # a leaf of its own: its gradient stays its own
    assert b.is_leaf and b.grad_fn is None and b.requires_grad
    (b * 2).sum().backward()
    assert a.grad is None and b.grad.numpy().tolist() == [2.0, 2.0]
    x = flow.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"only tensors made directly .*shape \(2,\)"):
        copy.deepcopy(x * 2)
    assert copy.deepcopy((x * 2).detach()).is_leaf


def test_deepcopy_of_a_global_tensor_copies_this_ranks_piece_in_its_layout():
    import copy

    p = flow.placement("cpu", ranks=[0])
    w = flow.tensor([[1.0, 2.0], [3.0, 4.0]], placement=p, sbp=flow.sbp.split(0),
                    requires_grad=True)
    c = copy.deepcopy(w)
    assert c.placement == p and c.sbp == w.sbp and c.requires_grad
    with flow.no_grad():
        c.fill_(0.0)
    np.testing.assert_array_equal(w.to_local().numpy(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(c.to_local().numpy(), np.zeros((2, 2), np.float32))


def test_deepcopy_of_a_model_a_graph_trained_has_the_trained_values():
    """Note [Graphs sharing modules]: the module's tensors are brought up to date first."""
    import copy

    model = nn.Linear(3, 2)
    opt = flow.optim.SGD(model.parameters(), lr=0.5)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    train = Train()
    x = flow.ones(4, 3)
    initial = model.weight.numpy().copy()
    train(x)
    copied = copy.deepcopy(model)
    assert "_anchors" not in copied.__dict__
    trained = model.weight.numpy()
    assert not np.array_equal(trained, initial)
    np.testing.assert_array_equal(copied.weight.numpy(), trained)


# ---- forward hooks, get_parameter, parameter containers, Flatten, nn.utils ----------------------


def test_forward_hooks_see_and_replace_inputs_and_outputs_in_order_and_go_when_removed():
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    seen = []
    pre = model[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    post = model[0].register_forward_hook(lambda m, args, out: seen.append(("post", out.shape)))
    first = model[0].register_forward_hook(lambda m, args, out: seen.append(("first", None)),
                                           prepend=True)
    double = model.register_forward_hook(lambda m, args, out: out * 10)
    x = flow.ones(4, 3)
    plain = flow.relu(model[0].forward(x * 2))
    np.testing.assert_allclose(model(x).numpy(), plain.numpy() * 10, rtol=1e-6)
    assert seen == [("first", None), ("post", (4, 2))]
    with_kwargs = model[1].register_forward_pre_hook(
        lambda m, args, kwargs: ((args[0] - 100,), kwargs), with_kwargs=True)
    assert not model(x).numpy().any()  # every input of the ReLU below zero
    for handle in (pre, post, first, double, with_kwargs):
        handle.remove()
    handle.remove()  # twice is harmless
    np.testing.assert_array_equal(model(x).numpy(), model.forward(x).numpy())
    with pytest.raises(TypeError, match=r"\[register_forward_hook\] hook must be callable"):
        model.register_forward_hook(3)


class _Calls(nn.Graph):
    """A graph calling ``model``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_a_forward_hook_runs_while_a_graph_traces_and_its_result_is_part_of_the_plan():
    model = nn.Linear(3, 2)
    model.register_forward_hook(lambda m, args, out: out + 1.0)

    x = flow.ones(2, 3)
    np.testing.assert_allclose(_Calls(model)(x).numpy(), model(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(model(x).numpy(), model.forward(x).numpy() + 1.0, rtol=1e-6)


def test_get_parameter_get_buffer_and_parameter_containers():
    model = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2))
    assert model.get_parameter("0.weight") is model[0].weight
    with pytest.raises(AttributeError, match=r"\[get_parameter\] 0 has no parameter 'scale'"):
        model.get_parameter("0.scale")
    with pytest.raises(AttributeError, match=r"\[get_buffer\]"):
        model.get_buffer("1.weight")

    class Mixture(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([flow.ones(2), nn.Parameter(flow.zeros(2))])
            self.biases = nn.ParameterDict({"a": flow.ones(3)})
            self.scales.append(flow.full((2,), 2.0))
            self.biases["b"] = flow.zeros(3)

        def forward(self, x):
            return sum(s * x for s in self.scales) + self.biases["a"][:2]

    m = Mixture()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scales.0", "scales.1", "scales.2", "biases.a", "biases.b"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    assert len(m.scales) == 3 and list(m.biases) == ["a", "b"] and "b" in m.biases
    m(flow.ones(2)).sum().backward()
    np.testing.assert_array_equal(m.scales[0].grad.numpy(), [1.0, 1.0])
    assert set(m.state_dict()) == set(names)
    with pytest.raises(TypeError, match=r"\[ParameterList\] holds parameters"):
        nn.ParameterList([3])
    assert list(nn.ParameterDict(m.biases).keys()) == ["a", "b"]


def test_flatten_unflatten_and_nn_utils_match_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    assert nn.Flatten()(flow.tensor(x)).shape == torch.nn.Flatten()(torch.tensor(x)).shape
    assert nn.Flatten(0, 2)(flow.tensor(x)).shape == (24, 5)
    assert nn.Unflatten(-1, (5, 1))(flow.tensor(x)).shape == (2, 3, 4, 5, 1)
    model = nn.Linear(4, 3)
    for p in model.parameters():
        p.grad = flow.tensor(np.linspace(-2, 2, p.numel()).reshape(tuple(p.shape))
                             .astype(np.float32))
    nn.utils.clip_grad_value_(model.parameters(), 0.5)
    assert float(model.weight.grad.numpy().max()) == 0.5
    assert float(model.bias.grad.numpy().min()) == -0.5
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert tuple(vec.shape) == (15,)
    nn.utils.vector_to_parameters(vec * 2, model.parameters())
    np.testing.assert_allclose(nn.utils.parameters_to_vector(model.parameters()).numpy(),
                               vec.numpy() * 2)
    with pytest.raises(ValueError, match=r"\[vector_to_parameters\] vec must be 1-d"):
        nn.utils.vector_to_parameters(vec[:3], model.parameters())


def test_a_graph_refuses_hooks_registered_or_removed_after_its_trace():
    model = nn.Linear(3, 2)

    x = flow.ones(2, 3)
    graph = _Calls(model)
    graph(x)
    handle = model.register_forward_hook(lambda m, args, out: out * 0)
    with pytest.raises(RuntimeError, match=r"hooks of \['model'\] were registered or "
                                           r"removed after _Calls traced them"):
        graph(x)
    traced = _Calls(model)
    np.testing.assert_array_equal(traced(x).numpy(), np.zeros((2, 2), np.float32))
    handle.remove()
    with pytest.raises(RuntimeError, match=r"hooks of \['model'\]"):
        traced(x)


def test_module_backward_hooks_match_torch():
    """Note [Module backward hooks]: a pre-hook doubling grad_output, a hook tripling
    grad_input, a module whose inputs need no gradient (grad_input all None)."""
    torch = pytest.importorskip("torch")
    results = []
    for lib in (flow, torch):
        m = lib.nn.Linear(3, 2)
        with lib.no_grad():
            m.weight.copy_(lib.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]]))
            m.bias.copy_(lib.tensor([0.1, -0.2]))
        seen = []
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))

        def hook(mod, gi, go, seen=seen):
            seen.append((gi[0].numpy().copy(), go[0].numpy().copy()))
            return (gi[0] * 3,)

        handle = m.register_full_backward_hook(hook)
        x = lib.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], requires_grad=True)
        (m(x) ** 2).sum().backward()
        handle.remove()
        (m(x) ** 2).sum().backward()  # the pre-hook only now
        nothing = []
        m.register_full_backward_hook(lambda mod, gi, go: nothing.append(gi))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that no input needs a gradient
            m(lib.ones(1, 3)).sum().backward()
        results.append([x.grad.numpy(), m.weight.grad.numpy(), seen[0][0], seen[0][1],
                        len(seen), nothing])
    ours, theirs = results
    for a, b in zip(ours[:4], theirs[:4]):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert ours[4] == theirs[4] == 1 and ours[5] == theirs[5] == [(None,)]


def test_a_graph_refuses_a_module_with_backward_hooks():
    model = nn.Linear(3, 2)
    model.register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(NotImplementedError, match=r"\[register_full_backward_hook\] Linear has "
                                                  r"backward hooks"):
        _Calls(model)(flow.ones(2, 3))


def test_module_backward_hooks_follow_torch_at_the_edges():
    """From a review: an output no loss uses gets no gradient (its weights stay None, not
    zeros a weight decay would move), grad_input has one entry per positional argument, an
    output that needs no gradient stays so, grad_output is the gradient of what the forward
    hooks returned, and the hooks are those registered when the module ran."""
    torch = pytest.importorskip("torch")
    results = []
    for lib in (flow, torch):
        class TwoHeads(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.main, self.aux = lib.nn.Linear(2, 2), lib.nn.Linear(2, 2)
                self.register_buffer("scale", lib.ones(2))

            def forward(self, x, mask, y):
                return self.main(x) + y, self.aux(x), self.scale * 3

        m = TwoHeads()
        seen = {}
        m.register_full_backward_pre_hook(lambda mod, go: seen.setdefault("pre", go) and None)
        m.register_full_backward_hook(
            lambda mod, gi, go: seen.setdefault("full", (len(gi), gi[1] is None,
                                                         gi[2].numpy().tolist())) and None)
        m.register_forward_hook(lambda mod, args, out: (out[0] * 10, out[1], out[2]))
        x = lib.ones(1, 2, requires_grad=True)
        y = lib.ones(1, 2, requires_grad=True)
        a, _, scale = m(x, None, y)
        late = m.register_full_backward_hook(lambda mod, gi, go: seen.setdefault("late", 1))
        (a * lib.tensor([1.0, 2.0])).sum().backward()
        late.remove()
        results.append((m.aux.weight.grad is None, scale.requires_grad, seen["pre"][1] is None,
                        seen["pre"][0].numpy().tolist(), seen["full"], "late" in seen))
    assert results[0] == results[1]
    assert results[0] == (True, False, True, [[1.0, 2.0]], (3, True, [[10.0, 20.0]]), False)


def test_autograd_grad_runs_only_the_nodes_on_a_path_to_its_inputs():
    block, head = nn.Linear(3, 3), nn.Linear(3, 1)
    x = flow.ones(2, 3, requires_grad=True)
    h = flow.utils.checkpoint.checkpoint(block, x)  # off the path to head.weight
    (g,) = flow.autograd.grad(head(h).sum(), [head.weight])
    np.testing.assert_allclose(g.numpy(), h.detach().sum(0, keepdim=True).numpy(), rtol=1e-6)
    assert block.weight.grad is None


def test_a_later_backward_reaching_a_hooked_modules_input_alone_runs_no_hook():
    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            self.cache = x
            return self.lin(x)

    m = Keeps()
    calls = []
    m.register_full_backward_hook(lambda mod, gi, go: calls.append(1))
    m(flow.ones(1, 2, requires_grad=True)).sum().backward(retain_graph=True)
    (m.cache * 2).sum().backward()  # through the input wrapper, not the outputs
    assert calls == [1]
