"""Context parallelism (the examples' --cp, Note [Context parallelism as SBP] in
examples/common/layout.py): every sequence split over the cp ranks gives the one-rank curve,
whichever way the compiler lets attention see the other ranks' tokens (an all-to-all into a
batch or a head split, or the queries kept split with k and v gathered: Note [Sequence-split
attention]), alone and with tensor, pipeline, data and expert parallelism; each rank plans less
memory; and tensor parallelism computes the norms on pieces between a reduce-scatter and an
all-gather (Megatron's sequence parallelism) without being asked. By default the sequences come
in the zigzag order that balances causal attention over the cp ranks (Note [Zigzag order] in
oneflowlike/ops/attention.h), which gives the same curve; the contiguous order is tested too."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import example_runs
from gpus import NEEDS_GPU
from tolerances import LOSS_RTOL

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_GPT = _ROOT / "examples" / "gpt" / "train.py"
_LLAMA = _ROOT / "examples" / "llama" / "train.py"
_GPT_SMALL = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--block-size", "32",
              "--batch-size", "8", "--warmup-steps", "2", "--quiet"]
# Multi-query attention (one key/value head): k and v are a quarter of q's size, so gathering
# them costs less than moving q, k and v by all-to-all, and the queries stay split.
_MQA = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--n-kv-head", "1",
        "--block-size", "64", "--batch-size", "2", "--warmup-steps", "2", "--quiet"]
_losses = example_runs.losses


def _curves_agree(records, single):
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])
    assert _losses(single)[-1] < _losses(single)[0]


@pytest.fixture(scope="module")
def gpt_single(tmp_path_factory):
    return example_runs.train(_GPT, _GPT_SMALL, tmp_path_factory.mktemp("gpt"), 1)


@pytest.fixture(scope="module")
def mqa_single(tmp_path_factory):
    return example_runs.train(_LLAMA, _MQA, tmp_path_factory.mktemp("mqa"), 1, output=True)


def test_cp2_of_the_gpt_gives_the_one_rank_curve(tmp_path, gpt_single):
    _curves_agree(example_runs.train(_GPT, _GPT_SMALL, tmp_path, 2, "--cp", "2"), gpt_single)


def test_one_sequence_over_cp2_gives_its_one_rank_curve(tmp_path):
    # One sequence cannot split by batch: the attention's heads split instead (an all-to-all
    # each way, DeepSpeed-Ulysses's exchange), nothing is gathered.
    flags = [*_GPT_SMALL, "--batch-size", "1"]
    single = example_runs.train(_GPT, flags, tmp_path, 1, tag="single")
    records, out = example_runs.train(_GPT, flags, tmp_path, 2, "--cp", "2", "--plan-summary",
                                      output=True)
    _curves_agree(records, single)
    ops = example_runs.collectives(out, 0)
    assert ops.get("ALL_TO_ALL", 0) >= 4 and "ALL_GATHER" not in ops, ops


@pytest.mark.parametrize("order", ["zigzag", "contiguous"])
def test_mqa_over_cp2_gathers_keys_and_values_and_plans_less(tmp_path, mqa_single, order):
    # In either order (Note [Zigzag order]: the sequence stored so that each rank's causal
    # attention has as many keys to see; the one-rank run keeps the sequence's order).
    loud = [f for f in _MQA if f != "--quiet"]  # rank 0 names the layout
    records, out = example_runs.train(_LLAMA, loud, tmp_path, 2, "--cp", "2", "--cp-order",
                                      order, "--plan-summary", output=True)
    assert f"cp 2 ({order})" in out
    _curves_agree(records, mqa_single[0])
    # Per layer k and v are gathered, and their gradients reduce-scattered; nothing moves by
    # all-to-all (the loss is taken on each rank's tokens, not flattened).
    ops = example_runs.collectives(out, 0)
    assert ops.get("ALL_GATHER") == 2 * 2 and ops.get("REDUCE_SCATTER", 0) >= 2 * 2, ops
    assert "ALL_TO_ALL" not in ops, ops
    # Each rank holds half of every sequence's activations (the weights and Adam state whole).
    single = example_runs.planned_peaks_mib(mqa_single[1])[0]
    assert max(example_runs.planned_peaks_mib(out).values()) < 0.8 * single


def test_mqa_over_cp2_on_cuda_placements_gives_the_curve_simulated(tmp_path, mqa_single):
    # --device cuda with the GPU tasks run on the host (OFL_SIMULATE_CUDA=1): the plan's host
    # copies around the gathers and the pieces' query offsets on GPU placements.
    records = example_runs.train(_LLAMA, _MQA, tmp_path, 2, "--cp", "2", "--device", "cuda",
                                 env={"OFL_SIMULATE_CUDA": "1"})
    np.testing.assert_allclose(_losses(records), _losses(mqa_single[0]), rtol=1e-4)


@NEEDS_GPU
def test_mqa_over_cp2_on_one_gpu_gives_the_cpu_curve(tmp_path, mqa_single):
    # Two processes sharing the GPU: the CUDA attention kernels of each rank's queries, told
    # their offset, against the CPU's curve.
    records = example_runs.train(_LLAMA, _MQA, tmp_path, 2, "--cp", "2", "--device", "cuda")
    np.testing.assert_allclose(_losses(records), _losses(mqa_single[0]), rtol=2e-4)


@pytest.mark.parametrize("script,model,layout", [
    (_LLAMA, [*_MQA, "--n-kv-head", "2"], ["--cp", "2", "--tp", "2"]),
    (_GPT, _GPT_SMALL, ["--cp", "2", "--pp", "2", "--micro-batches", "2"]),
    (_LLAMA, [*_MQA, "--n-experts", "4", "--batch-size", "4"], ["--cp", "2", "--dp", "2"]),
    # The experts' loss vector (one value per sequence) crosses the stage boundary split by
    # batch only, the activations along the sequence too (set_stage's input_sbp per input).
    (_LLAMA, [*_MQA, "--n-experts", "4"], ["--cp", "2", "--pp", "2", "--micro-batches", "2"]),
    # Note [Sliding window]: windows of 12 positions in the zigzag order over 4 ranks (chunks of
    # 8), every other layer global.
    (_LLAMA, [*_MQA, "--window", "12", "--global-every", "2"], ["--cp", "4"]),
    # Note [Packed documents]: the ids counted in the sequence's order (unzigzagged, summed,
    # zigzagged back), gathered whole for the attention, and moved to the second stage.
    (_LLAMA, [*_MQA, "--doc-sep", "32"], ["--cp", "2", "--pp", "2", "--micro-batches", "2"]),
], ids=["llama_cp2_tp2", "gpt_cp2_pp2_m2", "moe_ep2_cp2", "moe_cp2_pp2_m2", "window_cp4",
        "documents_cp2_pp2_m2"])
def test_cp_with_other_layouts_gives_the_one_rank_curve(tmp_path, script, model, layout):
    single = example_runs.train(script, model, tmp_path, 1, tag="single")
    _curves_agree(example_runs.train(script, model, tmp_path, 4, *layout), single)


def test_tensor_parallelism_computes_the_norms_on_pieces(tmp_path):
    # Megatron's sequence parallelism unasked: at a size where tensor parallelism stays the
    # cheaper plan (weights larger than activations), each row-parallel product's partial sums
    # are reduce-scattered and the norm and residual add run on half the tokens, then gathered;
    # no activation is all-reduced (the one all-reduce is the gradients' bucket).
    flags = ["--n-layer", "2", "--n-embd", "384", "--n-head", "6", "--block-size", "64",
             "--batch-size", "2", "--quiet"]
    _, out = example_runs.train(_GPT, flags, tmp_path, 2, "--tp", "2", "--plan-summary",
                                steps=2, output=True)
    ops = example_runs.collectives(out, 0)
    assert ops.get("ALL_REDUCE") == 1, ops
    assert ops.get("REDUCE_SCATTER", 0) >= 2 * 2 and ops.get("ALL_GATHER", 0) >= 2 * 2, ops


def test_the_zigzag_order_over_cp4_gives_the_one_rank_curve(tmp_path, gpt_single):
    # 8 chunks of 4 tokens: each rank's queries are two chunks, one from each half.
    loud = [f for f in _GPT_SMALL if f != "--quiet"]
    records, out = example_runs.train(_GPT, loud, tmp_path, 4, "--cp", "4", output=True)
    assert "cp 4 (zigzag)" in out
    _curves_agree(records, gpt_single)


def test_a_block_the_zigzag_order_cannot_cut_is_refused_naming_the_flags():
    result = subprocess.run([sys.executable, str(_LLAMA), *_MQA, "--block-size", "36", "--cp",
                             "4"], env=example_runs.clean_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert ("--cp 4 in the zigzag order cuts each sequence in 8 chunks: --block-size 36 must be "
            "a multiple of 8 (or use --cp-order contiguous).") in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_not_told_the_zigzag_order_is_refused():
    # The tokens are fed in the layout's order: a model built without config.zigzag would train
    # on wrong positions with rows seeing later tokens, and no error; the layout refuses it.
    train = example_runs.load_script(_GPT, "gpt_train_for_layout")
    args = train.parse(["--cp", "2", *_GPT_SMALL])
    layout = train.make_layout(args)
    config = train.GPTConfig(block_size=32, n_layer=2, n_head=4, n_embd=32)
    with pytest.raises(ValueError, match=r"the model's config.zigzag \(0\) must be the layout's "
                                         r"\(2: --cp 2, --cp-order zigzag\)"):
        layout.check(config, 8, 1)
    config.zigzag = layout.zigzag
    layout.check(config, 8, 1)


def test_cp_beyond_the_block_is_refused_naming_the_flags():
    result = subprocess.run([sys.executable, str(_GPT), *_GPT_SMALL, "--cp", "64"],
                            env=example_runs.clean_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "--cp 64 splits the sequence: it must be at most --block-size 32" in result.stderr
    assert "Traceback" not in result.stderr
