import numpy as np
import pytest

import oneflowlike as flow


def _sgd_reference(params, grads_per_step, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                   nesterov=False):
    """torch.optim.SGD, written out in NumPy."""
    params = [p.copy() for p in params]
    buffers = [None] * len(params)
    for grads in grads_per_step:
        for k, (p, g) in enumerate(zip(params, grads)):
            d = g + weight_decay * p
            if momentum != 0:
                if buffers[k] is None:
                    buffers[k] = d.copy()
                else:
                    buffers[k] = momentum * buffers[k] + (1 - dampening) * d
                d = d + momentum * buffers[k] if nesterov else buffers[k]
            p -= lr * d
    return params, buffers


def _adam_reference(params, grads_per_step, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                    decoupled=False):
    """torch.optim.Adam / AdamW, written out in NumPy."""
    beta1, beta2 = betas
    params = [p.copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step, grads in enumerate(grads_per_step, start=1):
        for k, (p, g) in enumerate(zip(params, grads)):
            if decoupled:
                p *= 1 - lr * weight_decay
            else:
                g = g + weight_decay * p
            m[k] = beta1 * m[k] + (1 - beta1) * g
            v[k] = beta2 * v[k] + (1 - beta2) * g * g
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            denom = np.sqrt(v[k]) / np.sqrt(bias_correction2) + eps
            p -= lr / bias_correction1 * m[k] / denom
    return params, m, v


def _setup(dtype=np.float64, shapes=((3, 4), (5,)), steps=5, seed=0):
    rng = np.random.default_rng(seed)
    initial = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]
    params = [flow.tensor(p, requires_grad=True) for p in initial]
    return initial, grads, params


def _run(optimizer, params, grads_per_step):
    for grads in grads_per_step:
        optimizer.zero_grad()
        for p, g in zip(params, grads):
            p.grad = flow.tensor(g)
        optimizer.step()


@pytest.mark.parametrize("config", [
    dict(),
    dict(momentum=0.9),
    dict(momentum=0.9, dampening=0.5),
    dict(momentum=0.9, weight_decay=0.01),
    dict(momentum=0.8, nesterov=True, weight_decay=0.1),
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sgd_matches_torch_formulas(config, dtype):
    initial, grads, params = _setup(dtype)
    _run(flow.optim.SGD(params, lr=0.05, **config), params, grads)
    expected, _ = _sgd_reference(initial, grads, 0.05, **config)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for p, e in zip(params, expected):
        assert p.dtype == flow.tensor(e).dtype
        np.testing.assert_allclose(p.numpy(), e, rtol=tol, atol=tol)


@pytest.mark.parametrize("config", [
    dict(),
    dict(betas=(0.8, 0.99), eps=1e-6),
    dict(weight_decay=0.05),
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adam_matches_torch_formulas(config, dtype):
    initial, grads, params = _setup(dtype)
    optimizer = flow.optim.Adam(params, lr=0.01, **config)
    _run(optimizer, params, grads)
    expected, m, v = _adam_reference(initial, grads, 0.01, **config)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for k, (p, e) in enumerate(zip(params, expected)):
        np.testing.assert_allclose(p.numpy(), e, rtol=tol, atol=tol)
        np.testing.assert_allclose(optimizer.state[p]["exp_avg"].numpy(), m[k], rtol=tol, atol=tol)
        np.testing.assert_allclose(optimizer.state[p]["exp_avg_sq"].numpy(), v[k], rtol=tol,
                                   atol=tol)
        assert optimizer.state[p]["step"] == len(grads)


def test_adamw_decouples_weight_decay():
    initial, grads, params = _setup()
    _run(flow.optim.AdamW(params, lr=0.01, weight_decay=0.1), params, grads)
    expected, _, _ = _adam_reference(initial, grads, 0.01, weight_decay=0.1, decoupled=True)
    coupled, _, _ = _adam_reference(initial, grads, 0.01, weight_decay=0.1, decoupled=False)
    for p, e, c in zip(params, expected, coupled):
        np.testing.assert_allclose(p.numpy(), e, rtol=1e-12, atol=1e-12)
        assert not np.allclose(p.numpy(), c)
    assert flow.optim.AdamW(params).param_groups[0]["weight_decay"] == 0.01


def test_param_groups_override_defaults():
    initial, grads, params = _setup()
    optimizer = flow.optim.SGD([{"params": [params[0]], "lr": 0.5}, {"params": [params[1]]}],
                               lr=0.1, momentum=0.9)
    assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.1]
    _run(optimizer, params, grads)
    first, _ = _sgd_reference([initial[0]], [[g[0]] for g in grads], 0.5, momentum=0.9)
    second, _ = _sgd_reference([initial[1]], [[g[1]] for g in grads], 0.1, momentum=0.9)
    np.testing.assert_allclose(params[0].numpy(), first[0], rtol=1e-12)
    np.testing.assert_allclose(params[1].numpy(), second[0], rtol=1e-12)


def test_changing_lr_between_steps_takes_effect():
    initial, grads, params = _setup(shapes=((4,),), steps=2)
    optimizer = flow.optim.SGD(params, lr=0.1)
    _run(optimizer, params, grads[:1])
    optimizer.param_groups[0]["lr"] = 0.01
    _run(optimizer, params, grads[1:])
    expected = initial[0] - 0.1 * grads[0][0] - 0.01 * grads[1][0]
    np.testing.assert_allclose(params[0].numpy(), expected, rtol=1e-12)


def test_step_skips_parameters_without_gradients_and_zero_grad_clears():
    initial, grads, params = _setup()
    optimizer = flow.optim.Adam(params, lr=0.1)
    params[0].grad = flow.tensor(grads[0][0])
    optimizer.step()
    np.testing.assert_array_equal(params[1].numpy(), initial[1])
    assert not np.allclose(params[0].numpy(), initial[0])
    assert params[1] not in optimizer.state
    optimizer.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(params[0].grad.numpy(), np.zeros((3, 4)))
    assert params[1].grad is None
    optimizer.zero_grad()
    assert params[0].grad is None


def test_training_with_autograd_converges():
    w = flow.tensor(np.array([3.0, -2.0, 0.5]), requires_grad=True)
    optimizer = flow.optim.SGD([w], lr=0.1, momentum=0.5)

    def closure():
        optimizer.zero_grad()
        loss = flow.sum(w * w)
        loss.backward()
        return loss

    first = optimizer.step(closure).item()
    for _ in range(60):
        last = optimizer.step(closure).item()
    assert first == pytest.approx(9 + 4 + 0.25)
    assert last < 1e-6
    assert w.is_leaf and w.requires_grad


def test_state_dict_round_trip_resumes_identically():
    initial, grads, params = _setup()
    optimizer = flow.optim.Adam(params, lr=0.01)
    _run(optimizer, params, grads[:2])
    saved = optimizer.state_dict()
    assert sorted(saved["state"]) == [0, 1]
    assert saved["param_groups"][0]["params"] == [0, 1]
    assert saved["state"][0]["step"] == 2
    saved_exp_avg = saved["state"][0]["exp_avg"].numpy()

    clones = [flow.tensor(p.numpy(), requires_grad=True) for p in params]
    resumed = flow.optim.Adam(clones, lr=0.5)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == 0.01
    _run(optimizer, params, grads[2:])
    _run(resumed, clones, grads[2:])
    for p, c in zip(params, clones):
        np.testing.assert_array_equal(p.numpy(), c.numpy())
    # The state dict holds copies: the later steps did not change it.
    assert saved["state"][0]["step"] == 2
    np.testing.assert_array_equal(saved["state"][0]["exp_avg"].numpy(), saved_exp_avg)
    assert not np.array_equal(optimizer.state[params[0]]["exp_avg"].numpy(), saved_exp_avg)


def test_a_checkpoint_of_model_and_optimizer_resumes_identically(tmp_path):
    # Note [Nested entries] in framework/checkpoint.py: torch.save's usual argument.
    def make():
        flow.manual_seed(4)
        model = flow.nn.Sequential(flow.nn.Linear(3, 5), flow.nn.GELU(), flow.nn.Linear(5, 2))
        return model, flow.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)

    def step(model, optimizer, k):
        x = flow.tensor(np.linspace(-1, 1, 12).reshape(4, 3) * (k + 1), dtype=flow.float32)
        loss = (model(x) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    model, optimizer = make()
    for k in range(3):
        step(model, optimizer, k)
    flow.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 3,
               "pair": (1, "a")}, str(tmp_path / "ck"))
    want = [step(model, optimizer, k) for k in range(3, 6)]

    loaded = flow.load(str(tmp_path / "ck"))
    assert loaded["step"] == 3 and loaded["pair"] == (1, "a")  # kinds kept: a tuple
    assert sorted(loaded["optimizer"]["state"]) == [0, 1, 2, 3]
    assert loaded["optimizer"]["state"][0]["step"] == 3  # int keys and values stay ints
    again, resumed = make()
    again.load_state_dict(loaded["model"])
    resumed.load_state_dict(loaded["optimizer"])
    assert [step(again, resumed, k) for k in range(3, 6)] == want

    layouts = flow.load(str(tmp_path / "ck"), like={"optimizer": resumed.state_dict()})
    assert list(layouts) == ["optimizer"]
    exp_avg = layouts["optimizer"]["state"][1]["exp_avg"]
    assert tuple(exp_avg.shape) == (5,)
    with pytest.raises(TypeError, match=r"\[save\] 'bad' has a key of type tuple"):
        flow.save({"bad": {(1, 2): flow.ones(1)}}, str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"'m.w' names both an entry and a tensor nested in 'm'"):
        flow.save({"m": {"w": flow.ones(1)}, "m.w": flow.ones(1)}, str(tmp_path / "clash"))


def test_load_state_dict_rejects_mismatched_groups():
    _, _, params = _setup()
    saved = flow.optim.SGD(params, lr=0.1).state_dict()
    with pytest.raises(ValueError, match="has 2 parameters"):
        flow.optim.SGD(params[:1], lr=0.1).load_state_dict(saved)


def test_bad_hyper_parameters_and_params_raise():
    _, _, params = _setup()
    with pytest.raises(ValueError, match="lr must be non-negative"):
        flow.optim.SGD(params, lr=-1.0)
    with pytest.raises(ValueError, match="nesterov momentum requires"):
        flow.optim.SGD(params, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas must be two values"):
        flow.optim.Adam(params, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="must not be empty"):
        flow.optim.Adam([])
    with pytest.raises(TypeError, match="single tensor"):
        flow.optim.Adam(params[0])
    with pytest.raises(ValueError, match="more than one param group"):
        flow.optim.SGD([{"params": params}, {"params": params[:1]}], lr=0.1)


def test_update_ops_validate_their_inputs():
    p = flow.tensor(np.zeros((2, 3), dtype=np.float32))
    lr = flow._C.from_numpy(np.asarray(0.1, dtype=np.float32))
    with pytest.raises(ValueError, match="grad must have the shape of param"):
        flow._C.sgd_update(p, flow.tensor(np.zeros((3, 2), np.float32)), p.clone(), lr)
    with pytest.raises(TypeError, match="lr must have the dtype of param"):
        flow._C.sgd_update(p, p.clone(), p.clone(), flow._C.from_numpy(np.asarray(0.1)))
    with pytest.raises(ValueError, match="step must be a scalar tensor"):
        flow._C.adam_update(p, p.clone(), p.clone(), p.clone(), lr,
                            flow.tensor(np.ones(1, np.float32)))
    # A gradient of the wrong shape reaches the op through step().
    w = flow.tensor(np.zeros(4), requires_grad=True)
    w.grad = flow.tensor(np.zeros(5))
    with pytest.raises(ValueError, match="grad must have the shape of param"):
        flow.optim.SGD([w], lr=0.1).step()


def test_sgd_and_adam_match_torch_itself():
    torch = pytest.importorskip("torch")
    initial, grads, params = _setup()
    for make_flow, make_torch in [
        (lambda ps: flow.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.2),
         lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.2)),
        (lambda ps: flow.optim.AdamW(ps, lr=0.01), lambda ps: torch.optim.AdamW(ps, lr=0.01)),
    ]:
        ours = [flow.tensor(p, requires_grad=True) for p in initial]
        theirs = [torch.tensor(p, requires_grad=True) for p in initial]
        _run(make_flow(ours), ours, grads)
        optimizer = make_torch(theirs)
        for step_grads in grads:
            for t, g in zip(theirs, step_grads):
                t.grad = torch.tensor(g)
            optimizer.step()
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
