"""examples/llama/train.py --n-experts: Mixtral-style experts (examples/llama/moe.py) give one
loss curve on one rank and with the experts split over two data-parallel ranks (expert
parallelism: the tokens cross by all-to-all), under TP2, PP2 and DP2 x TP2, in float32 and
bfloat16; a run resumed on another layout continues it; the PyTorch twin from the same weights
gives the same curve; and the routing's pieces (capacity queues, drops, the load-balancing loss)
do what the notes in moe.py say."""

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import example_runs
import oneflowlike as flow
from gpus import NEEDS_GPU
from tolerances import LOSS_RTOL

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TRAIN = _ROOT / "examples" / "llama" / "train.py"
sys.path.insert(0, str(_TRAIN.parent))
import moe  # noqa: E402
from llama_model import LlamaConfig  # noqa: E402

# Four experts, two per token; capacity 10 of 16 tokens per expert and sequence.
_SMALL = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--n-kv-head", "2",
          "--block-size", "16", "--batch-size", "8", "--warmup-steps", "2", "--n-experts", "4",
          "--quiet"]
_losses = example_runs.losses


def _train(tmp_path, nproc, *flags, tag="run", **kw):
    return example_runs.train(_TRAIN, _SMALL, tmp_path, nproc, *flags, tag=tag, **kw)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single"), 1)


@pytest.mark.parametrize("nproc,flags", [
    (2, ["--dp", "2"]),
    (2, ["--tp", "2"]),
    (2, ["--pp", "2", "--micro-batches", "4"]),
    (4, ["--dp", "2", "--tp", "2"]),
    (4, ["--dp", "2", "--pp", "2", "--micro-batches", "2", "--zero"]),
], ids=["ep2", "tp2", "pp2_m4", "ep2_tp2", "ep2_pp2_zero"])
def test_layouts_reproduce_the_single_device_loss_curve(tmp_path, single, nproc, flags):
    records = _train(tmp_path, nproc, *flags)
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])
    assert _losses(single)[-1] < _losses(single)[0]


def test_ep2_on_cuda_placements_gives_the_curve_simulated(tmp_path, single):
    # --device cuda with the runtime running the GPU tasks on the host (OFL_SIMULATE_CUDA=1): the
    # all-to-alls of GPU registers, through the plan's host copies, keep the curve.
    records = _train(tmp_path, 2, "--dp", "2", "--device", "cuda", env={"OFL_SIMULATE_CUDA": "1"})
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=1e-4)


@NEEDS_GPU
def test_one_gpu_gives_the_cpu_curve_in_float32_and_bfloat16(tmp_path, single):
    # The CUDA kernels of the routing (topk, one_hot's comparison, cumsum, the batched expert
    # products) in training, against the CPU kernels' curve. The curves agree only where the
    # discrete routing does: if this fails, compare the routing before any tolerance (a near
    # tie of router logits rounded differently by the two devices' matmuls).
    records = _train(tmp_path, 1, "--device", "cuda", tag="fp32")
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=2e-4)
    cpu_bf16 = _train(tmp_path, 1, "--dtype", "bfloat16", tag="cpu_bf16")
    records = _train(tmp_path, 1, "--device", "cuda", "--dtype", "bfloat16", tag="bf16")
    np.testing.assert_allclose(_losses(records), _losses(cpu_bf16), rtol=LOSS_RTOL["bfloat16"])


def test_experts_are_split_over_data_parallel_ranks_and_tokens_cross_by_all_to_all(tmp_path):
    ckpt = tmp_path / "ckpt"
    _, out = _train(tmp_path, 2, "--dp", "2", "--plan-summary", "--save", str(ckpt), steps=2,
                    output=True)
    # At least the forward's two per layer (the tokens to their experts and back); which of the
    # backward's exchanges are all-to-alls the compiler's costs decide (a reduce-scatter of the
    # input's gradient is cheaper than the dispatched tokens' all-to-all at this size).
    for rank in (0, 1):
        assert example_runs.collectives(out, rank).get("ALL_TO_ALL", 0) >= 4, out
    tensors = json.loads((ckpt / "manifest.json").read_text())["tensors"]
    for name in ("w1", "w3", "w2"):
        entry = tensors[f"model.blocks.0.mlp.{name}"]
        assert entry["sbp"] == ["S(0)"] and entry["shape"][0] == 4, entry
        assert tensors[f"model.blocks.0.mlp.{name}.exp_avg"]["sbp"] == ["S(0)"]
    assert tensors["model.blocks.0.mlp.router.weight"]["sbp"] == ["B"]
    # The dense model on the same layout exchanges no tokens.
    _, dense = example_runs.train(_TRAIN, _SMALL[:-3] + ["--quiet"], tmp_path, 2, "--dp", "2",
                                  "--plan-summary", steps=2, tag="dense", output=True)
    assert "ALL_TO_ALL" not in dense


def test_bfloat16_follows_float32_and_ep2_reproduces_one_rank(tmp_path, single):
    one = _train(tmp_path, 1, "--dtype", "bfloat16", tag="bf16")
    np.testing.assert_allclose(_losses(one), _losses(single), rtol=LOSS_RTOL["bfloat16"])
    assert _losses(one) != _losses(single), "the bf16 run computed nothing in bf16"
    two = _train(tmp_path, 2, "--dp", "2", "--dtype", "bfloat16", tag="bf16_ep2")
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=LOSS_RTOL["bfloat16"])


def test_resume_on_another_layout_continues_the_curve(tmp_path, single):
    # Experts saved split over two ranks, loaded whole on each rank of TP2 (split by hidden
    # units there).
    ckpt = tmp_path / "ckpt"
    first = _train(tmp_path, 2, "--dp", "2", "--save", str(ckpt), "--stop-after", "5",
                   tag="first")
    rest = _train(tmp_path, 2, "--tp", "2", "--resume", str(ckpt), tag="rest")
    assert [r["step"] for r in rest] == list(range(6, 11))
    np.testing.assert_allclose(_losses(first) + _losses(rest), _losses(single),
                               rtol=LOSS_RTOL["float32"])


def test_pytorch_twin_gives_the_same_loss_curve(single):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    losses = example_runs.llama_twin_losses(torch, _SMALL)
    np.testing.assert_allclose(_losses(single), losses, rtol=LOSS_RTOL["float32"])


def test_router_z_loss_joins_the_loss_and_the_pytorch_twin_gives_that_curve_too(tmp_path,
                                                                                single):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    z = ["--router-z-loss-coef", "0.001"]
    ours = _losses(_train(tmp_path, 1, *z, tag="z"))
    assert not np.allclose(ours, _losses(single), rtol=1e-4)  # it changed the loss
    np.testing.assert_allclose(example_runs.llama_twin_losses(torch, [*_SMALL, *z]), ours,
                               rtol=LOSS_RTOL["float32"])


def test_router_z_loss_is_each_groups_mean_squared_logsumexp():
    logits = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)
    want = (np.log(np.exp(logits).sum(-1)) ** 2).mean(-1)
    np.testing.assert_allclose(moe.router_z_loss(flow.tensor(logits)).numpy(), want, rtol=1e-5)


def test_routing_queues_tokens_in_order_and_drops_what_overflows():
    # One sequence of 4 tokens, 2 experts, top-1, capacity 2: tokens 0, 1 and 3 pick expert 0,
    # token 2 expert 1. Expert 0 takes tokens 0 and 1 in order and drops token 3.
    probs = flow.tensor([[[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]])
    dispatch, combine, choice = moe.route(probs, 1, 2)
    d = dispatch.numpy()[0]  # (T, E, C)
    assert d.shape == (4, 2, 2)
    assert d[0, 0, 0] == 1 and d[1, 0, 1] == 1 and d[2, 1, 0] == 1
    assert d[3].sum() == 0  # dropped
    assert d.sum() == 3
    np.testing.assert_array_equal(combine.numpy()[0], d)  # top-1 gates renormalise to 1
    # Top-2, capacity 3: each token's two choices queue before the next token's, so tokens 0-2
    # fill both experts and token 3 (whatever it prefers) finds them full.
    d = moe.route(probs, 2, 3)[0].numpy()[0]
    for t in range(3):
        assert d[t, 0, t] == 1 and d[t, 1, t] == 1
    assert d[3].sum() == 0 and d.sum() == 6


def test_gates_are_the_chosen_probabilities_renormalised():
    probs = flow.tensor([[[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]])  # 3 experts, top-2
    combine = moe.route(probs, 2, 2)[1].numpy()[0]  # (T, E, C)
    np.testing.assert_allclose(combine[0].sum(-1), [0.5 / 0.8, 0.3 / 0.8, 0.0], rtol=1e-6)
    np.testing.assert_allclose(combine[1].sum(-1), [0.0, 0.2 / 0.9, 0.7 / 0.9], rtol=1e-6)


def test_balance_loss_is_one_per_choice_when_the_load_is_even():
    even = flow.tensor([[[0.5, 0.5], [0.5, 0.5]]])
    choice = flow.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])  # (B, T, K, E)
    np.testing.assert_allclose(moe.balance_loss(even, choice).numpy(), [1.0], rtol=1e-6)
    both = flow.tensor([[[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]]])  # top-2
    np.testing.assert_allclose(moe.balance_loss(even, both).numpy(), [2.0], rtol=1e-6)
    skewed = flow.tensor([[[0.9, 0.1], [0.9, 0.1]]])
    both_first = flow.tensor([[[[1.0, 0.0]], [[1.0, 0.0]]]])
    np.testing.assert_allclose(moe.balance_loss(skewed, both_first).numpy(), [1.8], rtol=1e-6)


def test_capacity_follows_gshard_at_the_block_size():
    c = LlamaConfig(block_size=64, n_experts=8, top_k=2, capacity_factor=1.25)
    assert moe.expert_capacity(c) == math.ceil(2 * 64 * 1.25 / 8) == 20
    assert moe.expert_capacity(LlamaConfig(block_size=8, n_experts=2, capacity_factor=4.0)) == 8


def test_routing_is_causal_and_a_prefix_routes_as_the_whole_sequence_in_either_order():
    # Capacity 4 of 16 tokens x 2 choices over 4 experts: at least half the choices are
    # dropped, so which tokens keep their experts is decided all along the sequence.
    from llama_model import Llama

    config = LlamaConfig(block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                         n_experts=4, capacity_factor=0.5)
    assert moe.expert_capacity(config) == 4
    flow.manual_seed(3)
    model = Llama(config)
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 256, size=(2, 16))
    changed = tokens.copy()
    changed[:, 8:] = rng.integers(0, 256, size=(2, 8))
    with flow.no_grad():
        whole = model(flow.tensor(tokens)).numpy()
        other_future = model(flow.tensor(changed)).numpy()
        prefix = model(flow.tensor(tokens[:, :6])).numpy()
    np.testing.assert_allclose(other_future[:, :8], whole[:, :8], rtol=1e-6, atol=1e-6)
    assert not np.allclose(other_future[:, 8:], whole[:, 8:])
    np.testing.assert_allclose(prefix, whole[:, :6], rtol=1e-6, atol=1e-6)
    # Stored in the zigzag order over 2 pieces (context parallelism's), the sequence is queued
    # in its own order: the same routing and logits, so still causal (queued as stored, the
    # last chunk's tokens would take slots before the second's).
    config.zigzag = 2
    flow.manual_seed(3)
    ordered = Llama(config)
    F = flow.nn.functional
    with flow.no_grad():
        stored = ordered(F.zigzag(flow.tensor(tokens), 1, 2))
        back = F.unzigzag(stored, 1, 2).numpy()
        stored_other = ordered(F.zigzag(flow.tensor(changed), 1, 2))
        back_other = F.unzigzag(stored_other, 1, 2).numpy()
    np.testing.assert_allclose(back, whole, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(back_other[:, :8], back[:, :8], rtol=1e-6, atol=1e-6)


def test_bad_expert_flags_are_refused_naming_them():
    for flags, phrase in ((["--n-experts", "3", "--top-k", "4"],
                           "--top-k must lie in [1, --n-experts 3]"),
                          (["--n-experts", "1"], "--n-experts must be 0 (a dense MLP) or at least 2"),
                          (["--n-experts", "3", "--dp", "2"], "--dp 2 must divide --n-experts")):
        result = subprocess.run([sys.executable, str(_TRAIN), *_SMALL[:-3], *flags, "--steps",
                                 "1"], env=example_runs.clean_env(), capture_output=True,
                                text=True, timeout=120)
        assert result.returncode != 0
        assert phrase in result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr


def test_greedy_sampling_from_an_ep2_checkpoint_takes_what_pytorch_finds_likeliest(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    _train(tmp_path, 2, "--dp", "2", "--save", str(tmp_path / "ckpt"))
    sample = example_runs.load_script(_TRAIN.parent / "sample.py", "llama_sample")
    from llama_torch import torch_llama

    example_runs.check_greedy_sampling(torch, sample, tmp_path / "ckpt", torch_llama)
