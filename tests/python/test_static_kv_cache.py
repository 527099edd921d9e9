"""flow.nn.StaticKVCache (Note [Static KV cache] in
python/oneflowlike/nn/modules/static_kv_cache.py): a cache of fixed shape gives what the growing
KVCache gives, step by step (a prompt, single tokens, several after a prefix), with windows and
grouped-query heads, through the in-place op and the composed ops alike; the examples' GPT and
LLaMA give their whole-sequence logits through it, eagerly, through a compiled graph, steps of
both mixed, and under enable_amp; a graph that writes only its caches leaves the weights to the
modules; what the cache and a graph cannot do with it is refused naming it. Generation through
the graph is in test_kv_cache.py, tensor-parallel in dist/kv_cache_worker.py."""

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from oneflowlike.nn import graph_sharing
from test_kv_cache import _STEPS, _gpt, _llama, _pieces

_MODELS = [_gpt, lambda: _llama(), lambda: _llama(window=3, global_every=2)]
_IDS = ["gpt", "llama", "llama-window"]


@pytest.mark.parametrize("window", [0, 1, 3, 20])
def test_a_static_cache_attends_as_the_growing_one(window):
    rng = np.random.default_rng(1)
    B, H, Hk, D, T = 2, 6, 2, 8, sum(_STEPS)
    q, k, v = (flow.tensor(rng.standard_normal((B, h, T, D)).astype(np.float32))
               for h in (H, Hk, Hk))
    growing, static = nn.KVCache(window=window), nn.StaticKVCache(B, Hk, 16, D, window=window)
    for pieces in zip(*(_pieces(t, dim=2) for t in (q, k, v))):
        want = growing.attend(*pieces, enable_gqa=True).numpy()
        got = static.attend(*pieces, enable_gqa=True).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert static.position.numpy().tolist() == [T]
    # The slots written hold the keys at their positions; the rest are still zeros.
    np.testing.assert_array_equal(static.k.numpy()[:, :, :T], k.numpy())
    assert not static.k.numpy()[:, :, T:].any()
    static.reset()
    assert static.position.numpy().tolist() == [0]
    assert "StaticKVCache" not in str(static.state_dict().keys())  # derived, not saved


class _Step(nn.Graph):
    def __init__(self, model, caches):
        super().__init__()
        self.model = model
        self.caches = nn.ModuleList(caches)

    def build(self, idx):
        return self.model(idx, caches=list(self.caches))


@pytest.mark.parametrize("make", _MODELS, ids=_IDS)
def test_the_examples_give_their_whole_logits_eagerly_and_through_a_graph(make, variables):
    """Eager steps and graph steps alternate over one set of caches: each sees what the other
    wrote (Note [Graphs sharing modules])."""
    model = make()
    idx = flow.tensor(np.random.default_rng(2).integers(0, 32, (2, sum(_STEPS))),
                      dtype=flow.int64)
    whole = model(idx).numpy()
    caches = model.make_caches(batch_size=2)
    eager = flow.cat([model(p, caches=caches) for p in _pieces(idx)], dim=1).numpy()
    np.testing.assert_allclose(eager, whole, rtol=1e-4, atol=1e-5)
    for cache in caches:
        cache.reset()
    one_token = _Step(model, caches)
    got, held = [], None
    for i, piece in enumerate(_pieces(idx)):
        by_graph = piece.shape[1] == 1 and i % 2 == 0  # steps 2 and 4; 3 and 6 eagerly
        got.append(one_token(piece) if by_graph else model(piece, caches=caches))
        if by_graph:  # what the graph holds right after its step
            held = set(graph_sharing._holders)
    np.testing.assert_allclose(flow.cat(got, dim=1).numpy(), whole, rtol=1e-4, atol=1e-5)
    # The graph writes the caches only. Copied, it holds them, not the weights (an eager step
    # between graph steps copies the caches back, never the model); bound, it writes the
    # caches' own memory and holds nothing.
    assert sorted(one_token._written_buffers) == sorted(
        f"caches.{i}.{name}" for i in range(len(caches)) for name in ("k", "v", "pos"))
    if variables == "copied":
        assert {id(c.k) for c in caches} <= held
        assert not held & {id(p) for p in model.parameters()}
    else:
        assert not held & {id(t) for c in caches for t in (c.k, c.v, c.pos)}
        assert set(one_token._written_buffers) <= set(one_token._bound)


def test_a_bfloat16_static_cache_under_autocast_follows_the_whole_sequence():
    model = _llama()
    idx = flow.tensor(np.random.default_rng(6).integers(0, 32, (1, sum(_STEPS))),
                      dtype=flow.int64)
    caches = model.make_caches(batch_size=1, dtype=flow.bfloat16)
    with flow.autocast("cpu", dtype=flow.bfloat16):
        whole = model(idx).float().numpy()
        got = flow.cat([model(p, caches=caches) for p in _pieces(idx)], dim=1).float().numpy()
    assert caches[0].k.dtype == flow.bfloat16
    np.testing.assert_allclose(got, whole, rtol=0.05, atol=0.05)


def test_rotary_rows_from_a_position_tensor_are_the_whole_tables_rows():
    rope = nn.RotaryEmbedding(8, 12)
    x = flow.randn(1, 2, 12, 8)
    whole = rope(x).numpy()
    at = flow.tensor([5], dtype=flow.int64)
    np.testing.assert_allclose(rope(x.narrow(2, 5, 4), at).numpy(), whole[:, :, 5:9],
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"\[RotaryEmbedding\] a tensor offset must hold one "
                                         r"int32/int64 position. However, got oneflowlike.float32 of shape "
                                         r"\(1,\)"):
        rope(x, flow.tensor([1.0]))


def test_what_a_static_cache_cannot_take_is_refused_naming_it():
    cache = nn.StaticKVCache(1, 2, 8, 4)
    q = flow.randn(1, 2, 6, 4)
    cache.attend(q, q, q)
    with pytest.raises(ValueError, match=r"\[StaticKVCache\] 3 new positions after the 6 held "
                                         r"pass max_len 8: reset\(\) the cache"):
        cache.attend(q[:, :, :3], q[:, :, :3], q[:, :, :3])
    with pytest.raises(ValueError, match=r"\[StaticKVCache\] q \(B, heads, T, D\), k and v .* "
                                         r"must fit the cache's \(1, 2, 8, 4\) oneflowlike.float32 on cpu:0. "
                                         r"However, got q \(2, 2, 1, 4\)"):
        x = flow.randn(2, 2, 1, 4)
        cache.attend(x, x, x)
    with pytest.raises(ValueError, match=r"must fit the cache's .* However, got q \(1, 2, 1, "
                                         r"4\), k \(1, 2, 1, 4\) oneflowlike.bfloat16"):
        x = flow.randn(1, 2, 1, 4)
        cache.attend(x, x.to(flow.bfloat16), x.to(flow.bfloat16))
    with pytest.raises(ValueError, match=r"\[StaticKVCache\] max_len must be a positive int. "
                                         r"However, got 0"):
        nn.StaticKVCache(1, 2, 0, 4)
    layer = nn.CausalSelfAttention(8, 2, 8, window=2)
    with pytest.raises(ValueError, match=r"the KV cache keeps a window of 0 keys, the layer "
                                         r"attends over 2 \(0: all\): make it with window=2"):
        layer(flow.randn(1, 3, 8), cache=nn.StaticKVCache(1, 2, 8, 4))
    model = _gpt()
    mixed = model.make_caches()[:1] + model.make_caches(batch_size=1)[1:]
    with pytest.raises(ValueError, match=r"\[GPT\] caches must be 2 flow.nn.KVCache or 2 "
                                         r"flow.nn.StaticKVCache \(one per layer\) at one "
                                         r"position \(reset\(\) them together\)"):
        model(flow.zeros(1, 2, dtype=flow.int64), caches=mixed)
    apart = model.make_caches(batch_size=1)
    model(flow.zeros(1, 2, dtype=flow.int64), caches=apart)
    apart[1].reset()  # one layer's alone: the model would read the first layer's position
    with pytest.raises(ValueError, match=r"at one position \(reset\(\) them together\)"):
        model(flow.zeros(1, 1, dtype=flow.int64), caches=apart)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.cache = nn.StaticKVCache(1, 2, 4, 4)

        def build(self, x):
            return self.cache.attend(x, x, x)

    with pytest.raises(ValueError, match=r"\[StaticKVCache\] a step of 5 positions does not fit "
                                         r"max_len 4"):
        Step()(flow.randn(1, 2, 5, 4))


def test_the_in_place_op_and_the_composed_ops_give_one_result():
    """Without gradients a step is one cached_attention op writing the caches in place (Note
    [Cached attention]); where q needs a gradient, the composed differentiable ops: the same
    rows and the same caches, and the gradient reaches q."""
    rng = np.random.default_rng(3)
    B, H, Hk, D, T = 2, 6, 2, 8, sum(_STEPS)
    q, k, v = (flow.tensor(rng.standard_normal((B, h, T, D)).astype(np.float32))
               for h in (H, Hk, Hk))
    fused, composed = nn.StaticKVCache(B, Hk, 16, D, window=3), nn.StaticKVCache(B, Hk, 16, D,
                                                                                  window=3)
    for pieces in zip(*(_pieces(t, dim=2) for t in (q, k, v))):
        with flow.no_grad():
            want = fused.attend(*pieces, enable_gqa=True).numpy()
        query = pieces[0].clone().requires_grad_()
        got = composed.attend(query, *pieces[1:], enable_gqa=True)
        got.sum().backward()
        assert query.grad is not None and np.isfinite(query.grad.numpy()).all()
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-6)
    for name in ("k", "v", "pos"):
        np.testing.assert_array_equal(getattr(composed, name).numpy(),
                                      getattr(fused, name).numpy())


def test_a_graph_under_enable_amp_keeps_float32_caches_and_follows_float32():
    """The caches are written in place, so mixed precision leaves their dtype and casts the
    op's other operands to it (amp_input_dtypes): a bf16 graph step gives float32's logits
    within bf16's tolerance, the caches written (a cast copy would have taken the writes)."""
    model = _llama()
    idx = flow.tensor(np.random.default_rng(8).integers(0, 32, (2, 9)), dtype=flow.int64)
    whole = model(idx).numpy()
    caches = model.make_caches(batch_size=2)
    step = _Step(model, caches)
    step.config.enable_amp(True, dtype=flow.bfloat16)
    eager = model.make_caches(batch_size=2)
    with flow.no_grad():
        rows = [model(idx[:, :5], caches=caches)] + [step(idx[:, t:t + 1]) for t in range(5, 9)]
        model(idx, caches=eager)
    np.testing.assert_allclose(flow.cat(rows, dim=1).float().numpy(), whole, rtol=0.05,
                               atol=0.05)
    step.sync_to_modules()
    for cache, want in zip(caches, eager):  # the graph's keys and values reached the caches
        assert np.abs(cache.k.numpy()[:, :, 5:9]).max() > 0
        np.testing.assert_allclose(cache.k.numpy(), want.k.numpy(), rtol=0.05, atol=0.05)
        np.testing.assert_allclose(cache.v.numpy(), want.v.numpy(), rtol=0.05, atol=0.05)


def test_what_a_graph_cannot_do_with_a_buffer_written_in_place_is_refused():
    """Note [Buffers written in place in build]: the buffer is not read again in the same
    build() (the plan would order that read before the write), only a buffer is written in
    place, and a step past the cache fails when the graph runs, naming it."""
    from oneflowlike import _C

    class OneCache(nn.Graph):
        def __init__(self, step):
            super().__init__()
            self.cache = nn.StaticKVCache(1, 2, 4, 4)
            self.step = step

        def build(self, x):
            return self.step(self.cache, x)

    def read_after(cache, x):
        return cache.attend(x, x, x) + cache.k.sum()

    def returned_after(cache, x):
        return cache.attend(x, x, x), cache.k

    def viewed_before(cache, x):
        before = cache.k.reshape(-1)
        return cache.attend(x, x, x), before

    def copied_after(cache, x):
        out = cache.attend(x, x, x)
        cache.k.copy_(flow.zeros(1, 2, 4, 4))
        return out

    def moved_before(cache, x):
        same = cache.k.to_global(placement=flow.placement("cpu", ranks=[0]),
                                 sbp=flow.sbp.broadcast)
        return cache.attend(x, x, x), same

    def written_before(cache, x):
        cache.k.mul_(0.0)
        return cache.attend(x, x, x)

    def not_a_buffer(cache, x):
        made = x.repeat(1, 1, 4, 1) * 2.0
        return _C.cached_attention(x, x, x, made, made, cache.pos, 1.0)

    after_write = r"uses buffer 'cache.k' after cached_attention wrote it in place"
    viewed = r"writes buffer 'cache.k' in place, and build\(\) took a view of it"
    refused = [
        (read_after, after_write),
        (returned_after, r"\[nn.Graph output\] " + after_write),
        (viewed_before, viewed),
        (copied_after, r"\[copy_\] " + after_write),
        (moved_before, viewed + r" \(view, reshape, detach, to_global to its own layout\)"),
        (written_before, r"writes buffer 'cache.k' \(its input 'k_cache'\) in place after an "
                         r"in-place op of build\(\) gave it a new value"),
        (not_a_buffer, r"\[cached_attention\] writes its input 'k_cache' in place: in a traced "
                       r"graph that must be a module's buffer"),
    ]
    with flow.no_grad():
        for step, message in refused:
            with pytest.raises(ValueError, match=message):
                OneCache(step)(flow.randn(1, 2, 1, 4))
        step = OneCache(lambda cache, x: cache.attend(x, x, x))
        for _ in range(4):
            step(flow.randn(1, 2, 1, 4))
        with pytest.raises(Exception, match=r"\[cached_attention\] 1 new positions from "
                                            r"position 4 do not fit the caches' 4"):
            step(flow.randn(1, 2, 1, 4))
