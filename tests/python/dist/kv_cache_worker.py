"""Run by test_kv_cache.py on 2 processes. Prints "kv cache OK" per rank.

- Generation through KV caches on a model laid out tensor-parallel on global tensors (the
  examples' Megatron layout, eagerly, and through a compiled graph over static caches) draws the
  bytes one device draws from the same weights and seed: the LLaMA (grouped-query heads,
  windowed layers) and the GPT, batch 1 and 2.
- Slicing a global tensor whose split gives a rank an empty piece (batch 1 over two ranks)
  gives numpy's values (it aborted the process: a slice of an empty piece had its view placed
  past the piece's end), and to_global makes such a split (it had no SBP signature).
- An eager random op on global tensors called again after the same manual_seed draws what it
  drew the first time, as a local draw does (a cached graph drew from its own stream: Note
  [Eager global draws] in framework/global_tensor.py); a draw on a placement without this rank
  lets it go on; randn_like of a global tensor that requires grad is a constant to autograd
  (its backward was refused).
"""

import importlib.util
import pathlib
import sys

import numpy as np

import oneflowlike as flow

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples"
sys.path[:0] = [str(EXAMPLES)]
from common.layout import Layout  # noqa: E402
from common.sampling import generate  # noqa: E402

P = flow.placement("cpu", ranks=[0, 1])


def load(path, name):
    """An example's module by path, under a name of its own (both examples have a train.py)."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_slices():
    a = np.arange(48, dtype=np.float32).reshape(1, 8, 6)
    for sbp in (flow.sbp.split(0), flow.sbp.split(1)):
        g = flow.tensor(a, placement=P, sbp=sbp)
        for key in ((slice(None), -1), (slice(None), slice(-2, None)), (0, 3)):
            np.testing.assert_array_equal(g[key].numpy(), a[key], err_msg=f"{sbp} {key}")
    # A move into a split of an axis of one element (it had "no SBP signature"): rank 1's
    # piece is empty.
    g = flow.tensor(a, placement=P, sbp=flow.sbp.broadcast).to_global(sbp=flow.sbp.split(0))
    assert tuple(g.to_local().shape) == ((1, 8, 6) if flow.env.get_rank() == 0 else (0, 8, 6))
    np.testing.assert_array_equal(g.numpy(), a)
    np.testing.assert_array_equal((g * 2).to_global(sbp=flow.sbp.broadcast).to_local().numpy(),
                                  a * 2)


def check_reseeded_draws():
    weights = np.random.default_rng(0).random((2, 16)).astype(np.float32)
    p = flow.tensor(weights, placement=P, sbp=flow.sbp.split(0))
    draws = []
    for _ in range(3):
        flow.manual_seed(11)
        draws.append((flow.multinomial(p, 2).numpy(), p.multinomial(3, True).numpy(),
                      flow.randn(5, placement=P, sbp=flow.sbp.broadcast).numpy()))
    flow.manual_seed(11)
    local = (flow.multinomial(flow.tensor(weights), 2).numpy(),
             flow.tensor(weights).multinomial(3, True).numpy(), flow.randn(5).numpy())
    for got in draws:
        for a, b in zip(got, local):
            np.testing.assert_array_equal(a, b)
    # A draw on a placement without this rank: the others draw, this one goes on (review).
    alone = flow.tensor(weights, placement=flow.placement("cpu", ranks=[0]),
                        sbp=flow.sbp.broadcast)
    flow.manual_seed(11)
    drawn = flow.multinomial(alone, 2)
    if flow.env.get_rank() == 0:
        np.testing.assert_array_equal(drawn.numpy(), local[0])
    # randn_like / rand_like draw the one-device values and are constants to autograd (they
    # were traced as ops of x, whose backward refused to differentiate a draw).
    x = flow.tensor(weights, placement=P, sbp=flow.sbp.split(0)).requires_grad_()
    flow.manual_seed(3)
    noise = flow.randn_like(x)
    (x * noise + flow.rand_like(x)).sum().backward()
    flow.manual_seed(3)
    want = flow.randn_like(flow.tensor(weights))
    np.testing.assert_array_equal(noise.numpy(), want.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), want.numpy())
    try:
        flow.randn_like(x, device="cpu")
        raise AssertionError("a device was taken for a global tensor's draw")
    except ValueError as e:
        assert "[randn_like] a global tensor has a placement, not a device" in str(e), e
    # A function drawing inside its compiled graph (the fallback: traced at every call).
    from oneflowlike.framework import global_tensor as gt

    def noisy(x):
        return x + flow.rand(*x.shape)

    noise = []
    for _ in range(3):
        flow.manual_seed(5)
        noise.append(gt.apply(noisy, (p,), {}, name="noisy").numpy())
    flow.manual_seed(5)
    want = noisy(flow.tensor(weights)).numpy()
    for got in noise:
        np.testing.assert_array_equal(got, want)


def check_generation(make, train, vocab):
    for batch in (1, 2):
        prompt = np.random.default_rng(batch).integers(0, vocab, (batch, 5))
        model = make()
        flow.manual_seed(11)
        want = generate(model, flow.tensor(prompt, dtype=flow.int64), 24, temperature=0.8,
                        top_k=4, use_cache=False).numpy()
        Layout(1, 2, 1, "cpu", column=train.COLUMN, row=train.ROW).apply(model, None)
        idx = flow.tensor(prompt, dtype=flow.int64, placement=P, sbp=flow.sbp.broadcast)
        flow.manual_seed(11)
        got = generate(model, idx, 24, temperature=0.8, top_k=4, use_cache=True).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}")
        # Through a compiled graph over static caches, laid out as the keys (split over heads).
        flow.manual_seed(11)
        got = generate(model, idx, 24, temperature=0.8, top_k=4, graph=True).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}, graph")


def llama(**kwargs):
    def make():
        from llama_model import Llama, LlamaConfig

        flow.manual_seed(4)
        return Llama(LlamaConfig(vocab_size=32, block_size=16, n_layer=3, n_head=4, n_kv_head=2,
                                 n_embd=32, **kwargs)).eval()

    return make


def gpt():
    from model import GPT, GPTConfig

    flow.manual_seed(3)
    return GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


check_slices()
check_reseeded_draws()
llama_train = load(EXAMPLES / "llama" / "train.py", "llama_train")
check_generation(llama(), llama_train, 32)
check_generation(llama(window=3, global_every=2), llama_train, 32)
check_generation(gpt, load(EXAMPLES / "gpt" / "train.py", "gpt_train"), 32)
print("kv cache OK", flush=True)
