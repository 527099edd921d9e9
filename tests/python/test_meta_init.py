"""The meta device (Note [Meta tensors] in framework/meta.py): a model built under
flow.device("meta") allocates nothing, and laying it out makes each rank's pieces from the
initialisers with the values of an eager one-device initialisation; what needs data refuses a
meta tensor. Across processes: dist/creation_worker.py and test_llama_example.py (--meta-init)."""

import gc
import pathlib
import sys

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from oneflowlike import _C

_ROOT = pathlib.Path(__file__).resolve().parents[2]
P = flow.placement("cpu", ranks=[0])
B = flow.sbp.broadcast


def _gpt(meta=False):
    sys.path[:0] = [str(_ROOT / "examples" / "gpt"), str(_ROOT / "examples")]
    from model import GPT, GPTConfig

    flow.manual_seed(11)
    config = GPTConfig(n_layer=2, n_embd=32, n_head=4, block_size=16)
    if not meta:
        return GPT(config)
    with flow.device("meta"):
        return GPT(config)


class _Padded(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4, padding_idx=2)
        self.norm = nn.RMSNorm(4)
        self.fc = nn.Linear(4, 3)
        nn.init.kaiming_uniform_(self.fc.weight)
        nn.init.constant_(self.fc.bias, 0.5)


def _same_values(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k].numpy(), sb[k].numpy(), err_msg=k)


def test_a_meta_built_model_allocates_nothing_and_lays_out_to_the_eager_values():
    eager = _gpt()
    # Earlier tests' garbage is collected first, and not while the model is built: the count
    # must move only by what the build allocates.
    gc.collect()
    gc.disable()
    try:
        before = _C.cpu_memory_live_bytes()
        model = _gpt(meta=True)
        assert _C.cpu_memory_live_bytes() == before
    finally:
        gc.enable()
    weight = model.embed.wte.weight
    assert weight.is_meta and weight.shape == (256, 32) and weight.requires_grad
    assert str(weight.device) == "meta"
    model.to_global(P, B)
    assert model.embed.wte.weight.is_global
    _same_values(model, eager)


def test_layers_and_init_functions_record_their_draws():
    flow.manual_seed(4)
    eager = _Padded()
    flow.manual_seed(4)
    with flow.device("meta"):
        model = _Padded()
    from oneflowlike.framework import meta

    _same_values(meta.materialize(model), eager)
    assert np.all(eager.emb.weight.numpy()[2] == 0)


def test_a_checkpoint_loads_into_a_meta_built_laid_out_model(tmp_path):
    trained = _gpt()
    with flow.no_grad():
        trained.head.lm_head.weight.mul_(3.0)  # not what an initialisation gives
    flow.save(trained.state_dict(), str(tmp_path / "ckpt"))
    model = _gpt(meta=True).to_global(P, B)
    model.load_state_dict(flow.load(str(tmp_path / "ckpt")))
    _same_values(model, trained)


def test_what_needs_data_refuses_a_meta_tensor_naming_it():
    model = _gpt(meta=True)
    w = model.head.lm_head.weight
    with pytest.raises(RuntimeError, match=r"\[meta\] a meta tensor has no data, so numpy\(\)"):
        w.numpy()
    with pytest.raises(RuntimeError, match=r"\[meta\] a meta tensor has no data"):
        w @ w
    # The library's functions too, whatever the argument's position, in a list or a keyword.
    x = flow.ones(2, w.shape[1])
    for what, call in [("relu", lambda: flow.relu(w)), ("matmul", lambda: flow.matmul(x, w)),
                       ("linear", lambda: flow.nn.functional.linear(x, w)),
                       ("concat", lambda: flow.cat([w, w])), ("mul", lambda: x * w)]:
        with pytest.raises(RuntimeError, match=rf"\[meta\] a meta tensor has no data, so "
                                               rf"'{what}' cannot run"):
            call()

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, idx, targets):
            return self.model(idx, targets)

    idx = flow.zeros(2, 16, dtype=flow.int64)
    with pytest.raises(RuntimeError, match=r"'model\.embed\.wte\.weight' is a meta tensor"):
        Train()(idx, idx)


def test_randint_under_the_meta_device_is_refused():
    with flow.device("meta"):
        with pytest.raises(NotImplementedError, match=r"\[randint\] cannot make a meta tensor"):
            flow.randint(0, 10, (3,))
