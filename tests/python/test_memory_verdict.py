"""The memory verdict before anything runs (Note [Memory report], Note [Memory limit]):
graph.memory_report() by kind, graph.config.set_memory_limit refusing a plan that does not
fit on every rank with what would, and the launcher's --memory-per-rank. The fit test with the
LLaMA example is in test_llama_example.py."""

import re
import subprocess
import sys

import numpy as np
import pytest

import oneflowlike as flow
import oneflowlike.nn as nn
from launching import DIST
from oneflowlike.framework.sizes import format_bytes
from train_graph import TrainGraph


def _Train(model, limit=None):  # noqa: N802 (a graph)
    graph = TrainGraph(model, flow.optim.AdamW(model.parameters(), lr=0.01))
    if limit is not None:
        graph.config.set_memory_limit(limit)
    return graph


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10))


def _batch():
    rng = np.random.default_rng(0)
    return (flow.tensor(rng.standard_normal((32, 64)).astype(np.float32)),
            flow.tensor(rng.integers(0, 10, 32)))


def test_the_report_counts_parameters_and_adam_state_by_kind():
    model = _model()
    graph = _Train(model)
    with pytest.raises(RuntimeError, match=r"memory_report needs the traced graph"):
        graph.memory_report()
    graph(*_batch())
    report = graph.memory_report()
    assert len(report) == 1 and report[0]["rank"] == 0
    params = sum(int(p.numel()) * 4 for p in model.parameters())
    kinds = report[0]["by_kind"]
    assert kinds["parameters"] == params
    assert kinds["optimizer state"] == 2 * params  # exp_avg and exp_avg_sq
    assert report[0]["planned_peak"] >= report[0]["live_peak"] >= 3 * params
    assert report[0]["peak_task"]
    assert str(report).startswith("rank 0: planned peak ")


class _SelfAttention(nn.Module):
    """(32, 256) rows as one sequence of 32 positions, 4 heads of 64, attending causally."""

    def forward(self, x):
        heads = x.reshape(1, 32, 4, 64).transpose(1, 2)
        y = nn.functional.scaled_dot_product_attention(heads, heads, heads, is_causal=True)
        return y.transpose(1, 2).reshape(32, 256)


def test_the_widening_arena_and_the_matmul_scratchpad_are_kernel_workspace():
    # Note [Widening arena]: a host 16-bit op without a native loop (float16 attention here)
    # computes on float32 copies its thread keeps; the report counts the largest call's copies
    # as workspace: attention's gradient's, whose eight float16 tensors (q, k, v, the output,
    # its gradient, and dq, dk, dv) are 32 x 256 each. relu has loops of its own in both 16-bit
    # dtypes (Note [Native bfloat16 loops]) and takes none. Note [oneDNN matmul scratchpad]: the
    # thread's scratchpad for its largest matmul is workspace too, in every dtype; the same
    # matmuls without the op between them take the same scratchpad.
    def workspace(amp, middle):
        flow.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256, bias=False), middle,
                              nn.Linear(256, 10, bias=False))
        graph = _Train(model)
        if amp is not None:
            graph.config.enable_amp(True, dtype=amp)
        if amp == flow.float16:
            graph.set_grad_scaler(flow.amp.GradScaler())
        graph(*_batch())
        report, plan = graph.memory_report()[0]["workspace"], graph.workspace_bytes()
        assert report == plan
        return report

    scratchpad = workspace(None, nn.ReLU())
    assert 0 < scratchpad < 2**20 and workspace(None, nn.Identity()) == scratchpad
    # The float32 attention kernel's own tiles (Note [Attention workspace]) come on top, as
    # in float32, where the kernel runs as it is.
    tiles = workspace(None, _SelfAttention()) - scratchpad
    assert tiles > 0
    half = workspace(flow.float16, nn.Identity())
    assert workspace(flow.float16, _SelfAttention()) - half == 8 * 32 * 256 * 4 + tiles
    for amp in (flow.float16, flow.bfloat16):
        assert workspace(amp, nn.ReLU()) == workspace(amp, nn.Identity())


def test_a_plan_over_the_limit_is_refused_before_it_runs_naming_what_fills_it():
    graph = _Train(_model(), limit="64KiB")
    with pytest.raises(MemoryError) as error:
        graph(*_batch())
    text = str(error.value)
    assert "every rank must fit the memory limit of 64.00 KiB (65536 bytes)" in text
    assert "rank 0 plans a peak of" in text and "parameters" in text
    assert "optimizer state" in text and "Other remedies" in text
    # Nothing this model can change fits 64 KiB: the verdict says so.
    assert "No change tried here fits the limit of 64.00 KiB on these ranks." in text
    fits = _Train(_model(), limit="64MiB")
    fits(*_batch())  # within the limit: compiles and runs
    with pytest.raises(ValueError, match=r"set_memory_limit must be a size"):
        fits.config.set_memory_limit("6 parsecs")


def test_the_launcher_refuses_a_malformed_memory_per_rank_naming_the_flag():
    result = subprocess.run([sys.executable, "-m", "oneflowlike.distributed.launch",
                             "--memory-per-rank", "lots", str(DIST / "misc_worker.py")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "--memory-per-rank must be a size such as 6GiB" in result.stderr


def test_a_limit_of_zero_means_none_everywhere(monkeypatch, tmp_path):
    # The launcher's flag, its environment variable and set_memory_limit read 0 alike.
    from oneflowlike.framework.sizes import parse_limit

    for zero in (0, 0.0, False, "0", " 0 ", "", None):
        assert parse_limit(zero, "--memory-per-rank") == 0
    assert parse_limit("1KiB", "--memory-per-rank") == 1024
    with pytest.raises(ValueError, match=r"--memory-per-rank must be positive"):
        parse_limit(-1, "--memory-per-rank")
    monkeypatch.setenv("OFL_MEMORY_PER_RANK", "0")
    graph = _Train(_model(), limit=None)
    assert graph.config.memory_limit == 0
    graph.config.set_memory_limit(0)
    assert graph.config.memory_limit == 0
    graph(*_batch())  # no limit: compiles and runs
    script = tmp_path / "limit.py"
    script.write_text("import os\nprint('limit', repr(os.environ.get('OFL_MEMORY_PER_RANK')))\n")
    monkeypatch.delenv("OFL_MEMORY_PER_RANK")
    result = subprocess.run([sys.executable, "-m", "oneflowlike.distributed.launch",
                             "--memory-per-rank", "0", "--nproc_per_node", "1", str(script)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "limit None" in result.stdout, result.stdout


class _Blocks(nn.Module):
    """Four residual MLP blocks whose (256, 1024) hidden activations dwarf their weights."""

    def __init__(self):
        super().__init__()
        flow.manual_seed(0)
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Linear(64, 1024), nn.GELU(), nn.Linear(1024, 64)) for _ in range(4)])
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_the_verdict_offers_activation_checkpointing_with_its_recompiled_peak():
    rng = np.random.default_rng(1)
    batch = (flow.tensor(rng.standard_normal((256, 64)).astype(np.float32)),
             flow.tensor(rng.integers(0, 10, 256)))
    graph = _Train(_Blocks(), limit="1MiB")
    with pytest.raises(MemoryError) as error:
        graph(*batch)
    text = str(error.value)
    match = re.search(r"activation checkpointing of the 4 blocks of 'model\.blocks' "
                      r"\(set_activation_checkpointing on each\): peak ([\d.]+ \w+)", text)
    assert match, text
    # The suggestion's peak is the plan's when the user follows it.
    model = _Blocks()
    followed = _Train(model)
    for block in model.blocks:
        followed.set_activation_checkpointing(block)
    followed(*batch)
    plain = _Train(_Blocks())
    plain(*batch)
    assert followed.peak_bytes() < plain.peak_bytes()
    # (The verdict's figures are each rank's planned peak plus its kernel workspace.)
    assert match.group(1) == format_bytes(followed.peak_bytes() + followed.workspace_bytes()), text
    assert "Other remedies: more tensor or pipeline parallelism" in text
