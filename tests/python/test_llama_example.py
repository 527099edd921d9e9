"""examples/llama/train.py: a LLaMA-style decoder (RMSNorm, RoPE, grouped-query attention,
SwiGLU) gives one loss curve on one rank and under DP2, TP2 (query and key/value heads split),
PP2, DP2 + ZeRO, DP2 x TP2 and DP2 x TP2 x PP2, in float32 and bfloat16; a run resumed on
another layout continues it; and its PyTorch twin from the same initial weights gives the same
curve. On a GPU: one GPU gives the CPU's curves, TP2 sharing it gives one GPU's."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import example_runs
from tolerances import LOSS_RTOL
from gpus import NEEDS_GPU

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TRAIN = _ROOT / "examples" / "llama" / "train.py"
# 4 query heads over 2 key/value heads; --warmup-steps 2 runs into the cosine decay.
_SMALL = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--n-kv-head", "2",
          "--block-size", "16", "--batch-size", "8", "--warmup-steps", "2", "--quiet"]
_losses = example_runs.losses


def _train(tmp_path, nproc, *flags, tag="run", env=None):
    return example_runs.train(_TRAIN, _SMALL, tmp_path, nproc, *flags, tag=tag, env=env)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single"), 1)


@pytest.fixture(scope="module")
def single_bf16(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single_bf16"), 1, "--dtype", "bfloat16")


@pytest.mark.parametrize("nproc,flags", [
    (2, ["--dp", "2"]),
    (2, ["--tp", "2"]),
    (2, ["--pp", "2", "--micro-batches", "4"]),
    (2, ["--dp", "2", "--zero"]),
    (4, ["--dp", "2", "--tp", "2"]),
    (8, ["--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "2"]),
    # Note [ZeRO-3 gathers twice]: a gather per forward and per backward use, placed by control
    # inputs, with micro-batches and with pipeline stages.
    (4, ["--dp", "2", "--pp", "2", "--micro-batches", "2", "--zero", "3"]),
], ids=["dp2", "tp2", "pp2_m4", "dp2_zero", "dp2_tp2", "dp2_tp2_pp2", "dp2_pp2_zero3"])
def test_layouts_reproduce_the_single_device_loss_curve(tmp_path, single, nproc, flags):
    records = _train(tmp_path, nproc, *flags)
    assert [r["step"] for r in records] == list(range(1, 11))
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])
    assert _losses(single)[-1] < _losses(single)[0]


def test_bfloat16_follows_float32_and_tp2_reproduces_one_rank(tmp_path, single, single_bf16):
    np.testing.assert_allclose(_losses(single_bf16), _losses(single), rtol=LOSS_RTOL["bfloat16"])
    assert _losses(single_bf16) != _losses(single), "the bf16 run computed nothing in bf16"
    records = _train(tmp_path, 2, "--tp", "2", "--dtype", "bfloat16")
    np.testing.assert_allclose(_losses(records), _losses(single_bf16),
                               rtol=LOSS_RTOL["bfloat16"])


_NEEDS_GPU = NEEDS_GPU


@_NEEDS_GPU
def test_one_gpu_gives_the_cpu_curve_in_float32_and_bfloat16(tmp_path, single, single_bf16):
    # The CUDA kernels of rms_norm, silu, rotary_embedding and grouped-query SDPA in training,
    # forward and backward, against the CPU kernels' curve.
    records = _train(tmp_path, 1, "--device", "cuda", tag="fp32")
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=2e-4)
    records = _train(tmp_path, 1, "--device", "cuda", "--dtype", "bfloat16", tag="bf16")
    np.testing.assert_allclose(_losses(records), _losses(single_bf16),
                               rtol=LOSS_RTOL["bfloat16"])


@_NEEDS_GPU
def test_tp2_sharing_one_gpu_gives_one_gpu(tmp_path):
    # Heads split over two processes on GPU 0 (OFL_CUDA_DEVICE=0, Note [The GPU of a rank]):
    # rotary and GQA on half the heads each, the partial sums meeting through the host.
    one = _train(tmp_path, 1, "--device", "cuda", tag="one")
    two = _train(tmp_path, 2, "--device", "cuda", "--tp", "2", tag="tp2",
                 env={"OFL_CUDA_DEVICE": "0"})
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-4)


def test_resume_on_another_layout_continues_the_curve(tmp_path, single):
    ckpt = tmp_path / "ckpt"
    first = _train(tmp_path, 4, "--dp", "2", "--tp", "2", "--save", str(ckpt), "--stop-after",
                   "5", tag="first")
    rest = _train(tmp_path, 2, "--pp", "2", "--resume", str(ckpt), tag="rest")
    assert [r["step"] for r in rest] == list(range(6, 11))
    np.testing.assert_allclose(_losses(first) + _losses(rest), _losses(single),
                               rtol=LOSS_RTOL["float32"])


def test_activation_checkpointing_keeps_the_curve_and_lowers_the_planned_peak(tmp_path, single):
    plain = _train(tmp_path, 2, "--dp", "2", tag="plain")
    recomputed = _train(tmp_path, 2, "--dp", "2", "--checkpoint-activations", tag="ckpt")
    np.testing.assert_allclose(_losses(recomputed), _losses(single), rtol=LOSS_RTOL["float32"])
    np.testing.assert_allclose(_losses(recomputed), _losses(plain), rtol=LOSS_RTOL["float32"])
    # The peak where activations are the largest part (a longer batch): at the small size the
    # gradients' all-reduce buffers (Note [Collective scratch]) set it, after the activations.
    larger = ["--batch-size", "32", "--block-size", "64"]
    _, out = example_runs.train(_TRAIN, _SMALL, tmp_path, 2, "--dp", "2", *larger, steps=1,
                                tag="plain_peak", output=True)
    _, out_ckpt = example_runs.train(_TRAIN, _SMALL, tmp_path, 2, "--dp", "2", *larger,
                                     "--checkpoint-activations", steps=1, tag="ckpt_peak",
                                     output=True)
    before, after = example_runs.planned_peaks_mib(out), example_runs.planned_peaks_mib(out_ckpt)
    assert sorted(before) == sorted(after) == [0, 1]
    assert all(after[r] < before[r] for r in before), (before, after)


def test_a_model_built_on_the_meta_device_trains_the_same_curve(tmp_path, single):
    # Note [Meta tensors]: DP2 x TP2 lays the meta model out piece by piece from its
    # initialisers, one rank materialises it whole: both give the eager initialisation's curve.
    for nproc, flags in ((4, ["--dp", "2", "--tp", "2"]), (1, [])):
        records = _train(tmp_path, nproc, *flags, "--meta-init", tag=f"meta{nproc}")
        np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])


def test_the_fit_test_a_limit_one_rank_exceeds_trains_on_dp2_tp2_with_zero(tmp_path, single):
    # Note [Memory limit]: the limit lies between one rank's planned peak and the largest of
    # DP2 x TP2 + ZeRO's (both measured here, the plans being deterministic). One rank is
    # refused before anything runs, with the verdict; four ranks train the one-rank curve.
    _, out_one = example_runs.train(_TRAIN, _SMALL, tmp_path, 1, steps=1, tag="one",
                                    output=True)
    layout = ["--dp", "2", "--tp", "2", "--zero"]
    _, out_four = example_runs.train(_TRAIN, _SMALL, tmp_path, 4, *layout, steps=1, tag="four",
                                     output=True)
    one = example_runs.planned_peaks_mib(out_one)[0]
    four = max(example_runs.planned_peaks_mib(out_four).values())
    assert four < one, (four, one)
    limit = f"{int((one + four) / 2 * 1024)}KiB"
    refused = subprocess.run(
        [sys.executable, "-m", "oneflowlike.distributed.launch", "--memory-per-rank", limit,
         str(_TRAIN), *_SMALL, "--steps", "2"], env=example_runs.clean_env(),
        capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "every rank must fit the memory limit" in refused.stdout + refused.stderr
    assert "rank 0 plans a peak of" in refused.stdout + refused.stderr
    records = example_runs.train(_TRAIN, _SMALL, tmp_path, 4, *layout, tag="fits",
                                 env={"OFL_MEMORY_PER_RANK": str(int(limit[:-3]) * 1024)})
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])


def test_bad_flags_are_reported():
    for flags, message in [(["--tp", "4"], "--tp 4 must divide --n-kv-head 2"),
                           (["--n-kv-head", "3"], "--n-head 4 must be a multiple of --n-kv-head 3"),
                           (["--doc-sep", "256"], "--doc-sep must be a token id in [0, 256) (or -1: "
                            "no documents). However, got 256."),
                           (["--global-every", "2"], "--window must be >= 0 (0: whole prefix) and "
                            "--global-every >= 0, and only with a window. However, got --window "
                            "0, --global-every 2")]:
        result = subprocess.run([sys.executable, str(_TRAIN), *_SMALL, *flags],
                                env=example_runs.clean_env(), capture_output=True, text=True,
                                timeout=120)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr[-2000:]


def test_pytorch_twin_gives_the_same_loss_curve(single):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    losses = example_runs.llama_twin_losses(torch, _SMALL)
    np.testing.assert_allclose(_losses(single), losses, rtol=LOSS_RTOL["float32"])


def test_sliding_window_layers_give_the_pytorch_twins_curve(tmp_path, single):
    # Note [Sliding window]: --window 5 --global-every 2 (Gemma 2's alternation): layer 0 sees
    # each position's 5 latest, layer 1 the whole prefix; the twin masks layer 0's scores with
    # torch's SDPA and a boolean mask. The window changes the curve (it is not ignored).
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    window = ["--window", "5", "--global-every", "2"]
    records = _train(tmp_path, 1, *window)
    losses = example_runs.llama_twin_losses(torch, [*_SMALL, *window])
    np.testing.assert_allclose(_losses(records), losses, rtol=LOSS_RTOL["float32"])
    assert not np.allclose(_losses(records)[1:], _losses(single)[1:], rtol=1e-4)


@pytest.fixture(scope="module")
def single_documents(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single_documents"), 1, *_DOCUMENTS)


# Note [Packed documents]: each word of the corpus a document (the space ends it), so every
# sequence packs several and the mask shapes every layer.
_DOCUMENTS = ["--doc-sep", "32"]


def test_packed_documents_give_the_pytorch_twins_curve(single, single_documents):
    # The twin masks every layer's scores with torch's SDPA and the boolean document mask
    # (causal too). The documents change the curve (they are not ignored).
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    losses = example_runs.llama_twin_losses(torch, [*_SMALL, *_DOCUMENTS])
    np.testing.assert_allclose(_losses(single_documents), losses, rtol=LOSS_RTOL["float32"])
    assert not np.allclose(_losses(single_documents)[1:], _losses(single)[1:], rtol=1e-4)


def test_packed_documents_over_dp2_tp2_pp2_give_the_one_rank_curve(tmp_path, single_documents):
    # The ids are made once from the tokens and reach the second stage's blocks as a stage input.
    records = _train(tmp_path, 8, *_DOCUMENTS, "--dp", "2", "--tp", "2", "--pp", "2",
                     "--micro-batches", "2")
    np.testing.assert_allclose(_losses(records), _losses(single_documents),
                               rtol=LOSS_RTOL["float32"])


# --- data through flow.utils.data (--data-bin) ------------------------------------------------
@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    """800 bytes of the corpus as tokens: 49 windows of 16, six batches of 8 per epoch, so ten
    steps cross an epoch boundary."""
    root = tmp_path_factory.mktemp("tokens")
    text = root / "head.txt"
    corpus = _ROOT / "examples" / "data" / "kjv-genesis-deuteronomy.txt"
    text.write_bytes(corpus.read_bytes()[:800])
    out = root / "head.bin"
    subprocess.run([sys.executable, str(_ROOT / "examples" / "common" / "prepare_tokens.py"),
                    str(text), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def single_bin(tmp_path_factory, token_file):
    return _train(tmp_path_factory.mktemp("single_bin"), 1, "--data-bin", str(token_file))


@pytest.mark.parametrize("layout", [["--dp", "2", "--tp", "2"], ["--dp", "2", "--cp", "2"]],
                         ids=["dp2_tp2", "dp2_cp2"])
def test_each_data_parallel_rank_loading_its_shard_gives_the_one_rank_curve(tmp_path, token_file,
                                                                           single_bin, layout):
    # Under context parallelism each rank keeps its piece of its shard's sequences.
    records = _train(tmp_path, 4, *layout, "--data-bin", str(token_file))
    np.testing.assert_allclose(_losses(records), _losses(single_bin), rtol=LOSS_RTOL["float32"])


def test_a_resumed_run_sees_the_batches_of_the_uninterrupted_one(tmp_path, token_file,
                                                                  single_bin):
    # Saved after step 5 on DP2 x TP2, resumed on DP2 x PP2: steps 6-10 (across the epoch
    # boundary after step 6) must see the uninterrupted run's batches.
    ckpt = tmp_path / "ckpt"
    first = _train(tmp_path, 4, "--dp", "2", "--tp", "2", "--data-bin", str(token_file),
                   "--save", str(ckpt), "--stop-after", "5", tag="first")
    rest = _train(tmp_path, 4, "--dp", "2", "--pp", "2", "--micro-batches", "2", "--data-bin",
                  str(token_file), "--resume", str(ckpt), tag="rest")
    np.testing.assert_allclose(_losses(first) + _losses(rest), _losses(single_bin),
                               rtol=LOSS_RTOL["float32"])


def test_greedy_sampling_from_a_dp2_checkpoint_takes_what_pytorch_finds_likeliest(tmp_path):
    """examples/llama/sample.py (common/sampling.py) against the PyTorch twin with the same
    weights, from a checkpoint of another layout."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    _train(tmp_path, 2, "--dp", "2", "--save", str(tmp_path / "ckpt"))
    sample = example_runs.load_script(_TRAIN.parent / "sample.py", "llama_sample")
    from llama_torch import torch_llama

    example_runs.check_greedy_sampling(torch, sample, tmp_path / "ckpt", torch_llama)
