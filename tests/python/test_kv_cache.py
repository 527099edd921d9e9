"""flow.nn.KVCache (Note [KV cache] in python/oneflowlike/nn/modules/kv_cache.py): attention
over cached keys gives the rows of attention over the whole sequence, however the positions
come (a prompt, one token, several after a prefix), with sliding windows and grouped-query
heads, against torch's SDPA with the lower-right causal mask too; the examples' GPT and LLaMA
give their whole-sequence logits step by step and generate the same bytes with and without
caches, the context sliding past block_size, on one device and tensor-parallel over two
processes; what a cache cannot serve is refused naming it."""

import pathlib
import sys

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn

_EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
# Steps of a 13-position sequence: a prompt, single tokens, and several after a prefix.
_STEPS = (5, 1, 1, 4, 1, 2)


def _pieces(x, steps=_STEPS, dim=1):
    start = 0
    for n in steps:
        yield x.narrow(dim, start, n)
        start += n


@pytest.mark.parametrize("window", [0, 1, 3, 20])
def test_a_cached_attention_layer_gives_the_whole_sequences_rows(window):
    flow.manual_seed(0)
    layer = nn.CausalSelfAttention(24, 4, 16, window=window).eval()
    x = flow.randn(2, sum(_STEPS), 24)
    whole = layer(x).numpy()
    cache = nn.KVCache(window=window)
    got = flow.cat([layer(piece, cache=cache) for piece in _pieces(x)], dim=1).numpy()
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-6)
    assert cache.position == sum(_STEPS)
    # A window keeps only what a later query sees: its window - 1 latest keys.
    assert len(cache) == (sum(_STEPS) if not window else min(window - 1, sum(_STEPS)))


@pytest.mark.parametrize("window", [0, 3])
def test_cached_attention_matches_torch_with_the_lower_right_causal_mask(window):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    B, H, Hk, D, T = 2, 6, 2, 8, sum(_STEPS)
    q, k, v = (rng.standard_normal((B, h, T, D)).astype(np.float32) for h in (H, Hk, Hk))
    cache = nn.KVCache(window=window)
    outs = [cache.attend(*pieces, enable_gqa=True)
            for pieces in zip(*(_pieces(flow.tensor(t), dim=2) for t in (q, k, v)))]
    got = flow.cat(outs, dim=2).numpy()
    at = np.arange(T)
    visible = at[None, :] <= at[:, None]
    if window:
        visible &= at[None, :] > at[:, None] - window
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=torch.from_numpy(visible),
        enable_gqa=True).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rotary_positions_from_an_offset_are_the_whole_tables_rows():
    rope = nn.RotaryEmbedding(8, 12)
    x = flow.randn(1, 2, 12, 8)
    whole = rope(x).numpy()
    np.testing.assert_allclose(rope(x.narrow(2, 5, 4), 5).numpy(), whole[:, :, 5:9],
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"\[RotaryEmbedding\] the input has 4 positions along "
                                         r"dim -2 from position 9, more than max_seq_len 12"):
        rope(x.narrow(2, 5, 4), 9)
    with pytest.raises(ValueError, match=r"offset \(the first position of x\) must be an int"):
        rope(x, -1)


def _example(name):
    path = str(_EXAMPLES / name)
    if path not in sys.path:
        sys.path.insert(0, path)


def _gpt():
    _example("gpt")
    from model import GPT, GPTConfig

    flow.manual_seed(3)
    return GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


def _llama(**kwargs):
    _example("llama")
    from llama_model import Llama, LlamaConfig

    flow.manual_seed(4)
    config = LlamaConfig(vocab_size=32, block_size=16, n_layer=3, n_head=4, n_kv_head=2,
                         n_embd=32, **kwargs)
    return Llama(config).eval()


@pytest.mark.parametrize("make", [_gpt, lambda: _llama(),
                                  lambda: _llama(window=3, global_every=2)],
                         ids=["gpt", "llama", "llama-window"])
def test_the_examples_give_their_whole_sequence_logits_step_by_step(make):
    model = make()
    idx = flow.tensor(np.random.default_rng(2).integers(0, 32, (2, sum(_STEPS))),
                      dtype=flow.int64)
    whole = model(idx).numpy()
    caches = model.make_caches()
    got = flow.cat([model(piece, caches=caches) for piece in _pieces(idx)], dim=1).numpy()
    np.testing.assert_allclose(got, whole, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("make", [_gpt, lambda: _llama(window=3, global_every=2)],
                         ids=["gpt", "llama-window"])
def test_generation_takes_the_same_bytes_with_and_without_caches(make, graph):
    """40 new bytes after 6: the context reaches block_size (16) and slides, the caches are
    refilled, as the model sees the context without them; eagerly, and through a graph over
    static caches (Note [Static KV cache]: the refill runs eagerly, the graph goes on from
    there)."""
    _example("")  # examples/, where common/ is
    from common.sampling import generate

    model = make()
    prompt = flow.tensor(np.random.default_rng(5).integers(0, 32, (3, 6)), dtype=flow.int64)
    flow.manual_seed(9)
    cached = generate(model, prompt, 40, temperature=0.7, top_k=5, use_cache=True,
                      graph=graph).numpy()
    flow.manual_seed(9)
    plain = generate(model, prompt, 40, temperature=0.7, top_k=5, use_cache=False).numpy()
    np.testing.assert_array_equal(cached, plain)


def test_what_a_cache_cannot_serve_is_refused_naming_it():
    layer = nn.CausalSelfAttention(8, 2, 8, window=2)
    with pytest.raises(ValueError, match=r"the KV cache keeps a window of 0 keys, the layer "
                                         r"attends over 2"):
        layer(flow.randn(1, 3, 8), cache=nn.KVCache())
    cache = nn.KVCache(window=2)
    layer(flow.randn(1, 6, 8), cache=cache)
    with pytest.raises(ValueError, match=r"T <= block_size 8 - the 6 positions cached"):
        layer(flow.randn(1, 3, 8), cache=cache)
    with pytest.raises(ValueError, match=r"\[KVCache\] the new keys \(2, 2, 1, 4\) .* must "
                                         r"match the cached \(1, 2, 1, 4\)"):
        layer(flow.randn(2, 1, 8), cache=cache)
    with pytest.raises(ValueError, match=r"\[KVCache\] q \(B, heads, T, D\), k and v"):
        nn.KVCache().attend(flow.randn(1, 2, 3, 4), flow.randn(1, 2, 2, 4),
                            flow.randn(1, 2, 2, 4))
    with pytest.raises(ValueError, match=r"\[KVCache\] window \(the latest keys each query "
                                         r"sees\) must be an int >= 0"):
        nn.KVCache(window=-1)
    with pytest.raises(ValueError, match=r"\[Llama\] a KV cache holds only keys and values: it "
                                         r"cannot generate for experts"):
        _llama(n_experts=4).make_caches()
    model = _gpt()
    with pytest.raises(ValueError, match=r"\[GPT\] caches must be 2 flow.nn.KVCache"):
        model(flow.zeros(1, 2, dtype=flow.int64), caches=model.make_caches()[:1])

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def build(self, x):
            return self.layer(x, cache=nn.KVCache(window=2))

    with pytest.raises(TypeError, match=r"\[KVCache\] attend takes eager tensors .* "
                                        r"q is a traced value"):
        Step()(flow.randn(1, 3, 8))


def test_a_bfloat16_cache_under_autocast_follows_the_whole_sequence():
    model = _llama()
    idx = flow.tensor(np.random.default_rng(6).integers(0, 32, (1, sum(_STEPS))),
                      dtype=flow.int64)
    with flow.autocast("cpu", dtype=flow.bfloat16):
        whole = model(idx).float().numpy()
        caches = model.make_caches()
        got = flow.cat([model(p, caches=caches) for p in _pieces(idx)], dim=1).float().numpy()
    assert caches[0].k.dtype == flow.bfloat16
    np.testing.assert_allclose(got, whole, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("kwargs", [{}, {"window": 3, "global_every": 2}],
                         ids=["llama", "llama-window"])
def test_llama_step_by_step_matches_the_torch_twins_cache(kwargs):
    """The twin's cache (scripts/bench/bench_generate.py's reference) against ours."""
    torch = pytest.importorskip("torch")
    model = _llama(**kwargs)
    from llama_torch import torch_llama

    twin = torch_llama(model.config)
    twin.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                          for k, v in model.state_dict().items()})
    idx = np.random.default_rng(7).integers(0, 32, (2, sum(_STEPS)))
    caches, twin_caches = model.make_caches(), [{} for _ in range(model.config.n_layer)]
    with torch.no_grad():
        for piece in _pieces(flow.tensor(idx, dtype=flow.int64)):
            got = model(piece, caches=caches).numpy()
            want = twin(torch.from_numpy(piece.numpy()), caches=twin_caches).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_tensor_parallel_generation_on_two_processes_draws_one_devices_bytes():
    """dist/kv_cache_worker.py: the examples laid out tensor-parallel on global tensors generate
    through caches what one device generates (and two bugs found on the way stay fixed)."""
    from launching import launch

    out = launch(2, "kv_cache_worker.py", timeout=600)
    assert out.count("kv cache OK") == 2, out


def test_more_of_what_a_cache_cannot_serve_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"\[KVCache\] q, k and v must be 4-d .* q has shape "
                                         r"\(2, 3, 4\)"):
        nn.KVCache().attend(flow.randn(2, 3, 4), flow.randn(2, 3, 4), flow.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"\[CausalSelfAttention\] a KV cache generates in the "
                                         r"sequence's order, one document: it takes no "
                                         r"document_ids"):
        nn.CausalSelfAttention(8, 2, 8)(flow.randn(1, 3, 8), flow.zeros(1, 3, dtype=flow.int64),
                                        cache=nn.KVCache())
    with pytest.raises(ValueError, match=r"\[RotaryEmbedding\] an offset takes positions in the "
                                         r"sequence's order, not zigzag=1's"):
        nn.RotaryEmbedding(8, 12, zigzag=1)(flow.randn(1, 2, 2, 8), 4)
    _example("gpt")
    from model import GPT, GPTConfig

    with pytest.raises(ValueError, match=r"\[GPT\] a KV cache generates in the sequence's order, "
                                         r"not zigzag=2's"):
        GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16,
                      zigzag=2)).make_caches()
