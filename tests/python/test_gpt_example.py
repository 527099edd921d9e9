"""examples/gpt/train.py: the same loss curve on one rank and under DP2, TP2, PP2 (4
micro-batches), DP2 x TP2 x PP2 (8 processes) and ZeRO; a run resumed from a checkpoint saved
on another layout continues the curve; and, where torch is installed, the same model in PyTorch
with the same initial weights gives the same curve."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import example_runs
import oneflowlike as flow
from tolerances import LOSS_RTOL
from gpus import NEEDS_GPU

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TRAIN = _ROOT / "examples" / "gpt" / "train.py"
# --warmup-steps 2: the 10 steps run through warmup and into the cosine decay.
_SMALL = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--block-size", "16",
          "--batch-size", "8", "--warmup-steps", "2", "--quiet"]


def _env():
    return example_runs.clean_env()


def _train(tmp_path, nproc, *flags, steps=10, tag="run", env=None):
    return example_runs.train(_TRAIN, _SMALL, tmp_path, nproc, *flags, steps=steps, tag=tag,
                              env=env)


_losses = example_runs.losses


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single"), 1)


@pytest.mark.parametrize("nproc,flags", [
    (2, ["--dp", "2"]),
    (2, ["--tp", "2"]),
    (2, ["--pp", "2", "--micro-batches", "4"]),
    (2, ["--dp", "2", "--zero"]),
    (2, ["--dp", "2", "--zero", "2", "--micro-batches", "2"]),
    (4, ["--dp", "2", "--tp", "2", "--zero", "3"]),
    (8, ["--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "2"]),
])
def test_layouts_reproduce_the_single_device_loss_curve(tmp_path, single, nproc, flags):
    records = _train(tmp_path, nproc, *flags)
    assert [r["step"] for r in records] == list(range(1, 11))
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=LOSS_RTOL["float32"])
    assert _losses(single)[-1] < _losses(single)[0]


# --device cuda with the runtime running the GPU tasks on the host (OFL_SIMULATE_CUDA=1): the
# plan's copies between host and GPU memory keep the curve.
@pytest.mark.parametrize("nproc,flags", [(1, []), (2, ["--dp", "2", "--zero"])])
def test_cuda_placements_reproduce_the_curve_simulated(tmp_path, single, nproc, flags):
    records = _train(tmp_path, nproc, "--device", "cuda", *flags, env={"OFL_SIMULATE_CUDA": "1"})
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=1e-4)


def test_resume_on_another_layout_continues_the_curve(tmp_path, single):
    ckpt = tmp_path / "ckpt"
    first = _train(tmp_path, 4, "--dp", "2", "--tp", "2", "--save", str(ckpt), "--stop-after",
                   "5", tag="first")
    assert (ckpt / "manifest.json").exists() and (ckpt / "train_state.json").exists()
    rest = _train(tmp_path, 2, "--pp", "2", "--resume", str(ckpt), tag="rest")
    assert [r["step"] for r in rest] == list(range(6, 11))
    np.testing.assert_allclose(_losses(first) + _losses(rest), _losses(single), rtol=1e-4)


def test_two_hosts_over_tcp_give_the_single_device_curve(tmp_path, single, two_hosts):
    """DP2 across two network namespaces (one rank each, UCX over TCP on the veth pair only)."""
    log = tmp_path / "two_hosts.jsonl"
    results = example_runs.launch_on_hosts(
        two_hosts, _TRAIN, [*_SMALL, "--steps", "10", "--dp", "2", "--log-json", str(log)])
    assert [code for code, _ in results] == [0, 0], "\n".join(out for _, out in results)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=1e-4)


_NEEDS_GPU = NEEDS_GPU


@_NEEDS_GPU
def test_one_gpu_gives_the_cpu_curve(tmp_path, single):
    # float32 on both; the GPU's reductions and cuBLASLt sum in another order than the CPU's.
    records = _train(tmp_path, 1, "--device", "cuda")
    np.testing.assert_allclose(_losses(records), _losses(single), rtol=2e-4)


@_NEEDS_GPU
def test_two_processes_sharing_one_gpu_in_dp2_give_one_process(tmp_path):
    # OFL_CUDA_DEVICE=0: both ranks on GPU 0 (Note [The GPU of a rank]); the gradients meet on the
    # host (device -> host -> UCX -> host -> device).
    one = _train(tmp_path, 1, "--device", "cuda", tag="one")
    two = _train(tmp_path, 2, "--device", "cuda", "--dp", "2", tag="dp2",
                 env={"OFL_CUDA_DEVICE": "0"})
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-4)


@_NEEDS_GPU
def test_one_gpu_gives_the_cpu_curve_in_bfloat16(tmp_path, single_bf16):
    # Mixed precision on a CUDA placement: cuBLASLt's bf16 matmuls against oneDNN's.
    records = _train(tmp_path, 1, "--device", "cuda", "--dtype", "bfloat16")
    np.testing.assert_allclose(_losses(records), _losses(single_bf16),
                               rtol=LOSS_RTOL["bfloat16"])


@_NEEDS_GPU
def test_one_gpu_gives_the_cpu_curve_in_float16_with_loss_scaling(tmp_path):
    # float16 on a CUDA placement: cuBLASLt's f16 matmuls, the CUDA loss-scaling kernels
    # (count_nonfinite, the skippable update, the scale's update) against the CPU's.
    cpu = _train(tmp_path, 1, "--dtype", "float16", tag="cpu_fp16")
    gpu = _train(tmp_path, 1, "--device", "cuda", "--dtype", "float16", tag="gpu_fp16")
    np.testing.assert_allclose(_losses(gpu), _losses(cpu), rtol=LOSS_RTOL["float16"])


@pytest.mark.skipif(flow.cuda.device_count() < 2,
                    reason=f"needs 2 GPUs (NCCL puts each member of a communicator on a GPU of "
                    f"its own); this machine has {flow.cuda.device_count()}")
@pytest.mark.parametrize("flags", [["--dp", "2"], ["--tp", "2"]], ids=["dp2", "tp2"])
def test_two_gpus_through_nccl_give_one_gpu(tmp_path, flags):
    # One rank per GPU (LOCAL_RANK): the collectives run through NCCL on the GPUs (Note [Device
    # collectives] in actor/device_collectives.h), which sums in its own order.
    one = _train(tmp_path, 1, "--device", "cuda", tag="one")
    two = _train(tmp_path, 2, "--device", "cuda", *flags, tag="two",
                 env={"OFL_CUDA_COLLECTIVES": "nccl"})
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=1e-4)


@pytest.mark.skipif(flow.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_says_why():
    result = subprocess.run([sys.executable, str(_TRAIN), *_SMALL, "--device", "cuda"],
                            env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "[placement] device cuda needs a CUDA device. However, there is none" in result.stderr


# --- mixed precision (Note [Mixed precision] in compiler/passes/amp.cpp) ------------------------
@pytest.fixture(scope="module")
def single_bf16(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("single_bf16"), 1, "--dtype", "bfloat16")


def test_bfloat16_follows_the_float32_curve(single, single_bf16):
    np.testing.assert_allclose(_losses(single_bf16), _losses(single), rtol=LOSS_RTOL["bfloat16"])
    assert _losses(single_bf16) != _losses(single), "the bf16 run computed nothing in bf16"


@pytest.mark.parametrize("nproc,flags", [
    (2, ["--dp", "2"]),
    (2, ["--tp", "2"]),
    (2, ["--pp", "2", "--micro-batches", "4"]),
    (8, ["--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "2"]),
    # Note [Gradient reduction dtype]: the all-reduce and ZeRO's reduce-scatter in bfloat16.
    (2, ["--dp", "2", "--reduce-dtype", "bfloat16"]),
    (2, ["--dp", "2", "--zero", "--reduce-dtype", "bfloat16"]),
], ids=["dp2", "tp2", "pp2_m4", "dp2_tp2_pp2", "dp2_bf16_reduce", "dp2_zero_bf16_reduce"])
def test_bfloat16_layouts_reproduce_one_rank(tmp_path, single_bf16, nproc, flags):
    records = _train(tmp_path, nproc, *flags, "--dtype", "bfloat16")
    np.testing.assert_allclose(_losses(records), _losses(single_bf16),
                               rtol=LOSS_RTOL["bfloat16"])


def test_float16_with_dynamic_loss_scaling_follows_float32_on_one_rank_and_dp2(tmp_path,
                                                                              single):
    one = _train(tmp_path, 1, "--dtype", "float16", tag="fp16")
    two = _train(tmp_path, 2, "--dtype", "float16", "--dp", "2", tag="fp16_dp2")
    np.testing.assert_allclose(_losses(one), _losses(single), rtol=LOSS_RTOL["float16"])
    np.testing.assert_allclose(_losses(two), _losses(one), rtol=LOSS_RTOL["float16"])


def test_bad_flags_are_reported():
    result = subprocess.run([sys.executable, str(_TRAIN), *_SMALL, "--tp", "3"], env=_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--tp 3 must divide --n-head 4" in result.stderr


# --- against PyTorch ---------------------------------------------------------------------------
def _torch_curve(autocast):
    """The example's 10 steps in PyTorch from our initial weights, under
    torch.autocast("cpu", bfloat16) when ``autocast``."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    sys.path.insert(0, str(_TRAIN.parent))
    import oneflowlike as flow
    import train
    from model import GPT, GPTConfig

    args = train.parse([*_SMALL, "--steps", "10"])
    assert args.warmup_steps == 2
    config = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                       n_embd=args.n_embd)
    flow.manual_seed(args.seed)  # train.py's initial weights
    ours = GPT(config)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from torch_model import torch_gpt

    return example_runs.torch_curve(torch, ours, torch_gpt(config), train, args,
                                    autocast=autocast)


def test_pytorch_gives_the_same_loss_curve(single):
    np.testing.assert_allclose(_losses(single), _torch_curve(False), rtol=LOSS_RTOL["float32"])


def test_pytorch_autocast_gives_the_same_bfloat16_curve(single_bf16):
    np.testing.assert_allclose(_losses(single_bf16), _torch_curve(True),
                               rtol=LOSS_RTOL["bfloat16"])


def test_a_rank_killed_mid_training_ends_the_job_naming_it():
    import signal
    import time

    command = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node", "2",
               str(_TRAIN), *[f for f in _SMALL if f != "--quiet"], "--dp", "2", "--steps",
               "100000"]
    env = dict(_env(), OFL_FAULT_TIMEOUT="3")
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    lines = []
    for line in launcher.stdout:  # wait until rank 1 trains
        lines.append(line)
        if "step    3" in line:
            break
    # The launcher's children are the ranks, started in rank order.
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                              text=True).stdout.split()
    assert len(children) == 2, "".join(lines)
    os.kill(int(sorted(children, key=int)[-1]), signal.SIGKILL)
    start = time.time()
    out, _ = launcher.communicate(timeout=60)
    output = "".join(lines) + out
    assert launcher.returncode != 0
    assert time.time() - start < 15, output[-3000:]
    # The launcher names the killed rank. (A survivor that reads the dead rank's memory first
    # names it too, Note [A peer's death inside UCX]; the launcher usually stops it before.)
    assert "[launch] rank 1" in output and "SIGKILL" in output, output[-3000:]


# --- sampling (examples/gpt/sample.py) ---------------------------------------------------------
@pytest.fixture(scope="module")
def saved_tp2(tmp_path_factory):
    """A checkpoint of 10 TP2 steps: sample.py loads it whole on one device."""
    path = tmp_path_factory.mktemp("saved")
    _train(path, 2, "--tp", "2", "--save", str(path / "ckpt"))
    return path / "ckpt"


def _sample_module():
    return example_runs.load_script(_TRAIN.parent / "sample.py", "gpt_sample")


def test_greedy_sampling_takes_the_byte_pytorch_finds_likeliest_with_the_same_weights(saved_tp2):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    sample = _sample_module()  # puts examples/gpt on sys.path
    from torch_model import torch_gpt

    example_runs.check_greedy_sampling(torch, sample, saved_tp2, torch_gpt)


def test_sampling_over_two_processes_with_tp_writes_one_devices_text(saved_tp2):
    """sample.py --tp 2 on two processes lays the checkpoint out tensor-parallel and generates
    through KV caches on global tensors, eagerly and through a graph (--graph): the same text as
    one process (Note [KV cache])."""
    flags = [str(saved_tp2), "--prompt", "And God", "--tokens", "40", "--samples", "2",
             "--temperature", "0.9", "--top-k", "5"]
    sample = str(_TRAIN.parent / "sample.py")
    one = subprocess.run([sys.executable, sample, *flags], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "oneflowlike.distributed.launch",
                          "--nproc_per_node", "2", sample, *flags, "--tp", "2"], env=_env(),
                         capture_output=True, text=True, timeout=240)
    assert two.returncode == 0, two.stderr[-2000:]
    texts = [line[len("[rank 0] "):] for line in two.stdout.splitlines()
             if line.startswith("[rank 0] ")]
    assert texts == one.stdout.splitlines() and texts[0].startswith("And God"), (texts, one.stdout)
    # --graph: each byte through one compiled graph over static caches (Note [Static KV cache]).
    graph = subprocess.run([sys.executable, "-m", "oneflowlike.distributed.launch",
                            "--nproc_per_node", "2", sample, *flags, "--tp", "2", "--graph"],
                           env=_env(), capture_output=True, text=True, timeout=240)
    assert graph.returncode == 0, graph.stderr[-2000:]
    assert [line[len("[rank 0] "):] for line in graph.stdout.splitlines()
            if line.startswith("[rank 0] ")] == texts, graph.stdout
    wrong = subprocess.run([sys.executable, sample, *flags, "--tp", "2"], env=_env(),
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "--tp 2 lays the model out over that many processes: " \
        "launch them" in wrong.stderr, wrong.stderr[-2000:]


def test_sampling_draws_among_the_top_k_and_is_seeded(saved_tp2):
    sample = _sample_module()
    model = sample.load_model(str(saved_tp2))
    prompt = flow.tensor([list(b"In the beginning")] * 3, dtype=flow.int64)

    def draw(seed):
        flow.manual_seed(seed)
        return sample.generate(model, prompt, 20, temperature=1.5, top_k=3).numpy()

    first = draw(5)
    np.testing.assert_array_equal(draw(5), first)
    assert not np.array_equal(draw(6), first)
    for row in first:
        for t in range(prompt.shape[1], len(row)):
            block = model.config.block_size
            logits = model(flow.tensor(row[None, max(0, t - block):t].copy()))[0, -1].numpy()
            assert row[t] in np.argsort(logits)[-3:], t
    command = [sys.executable, str(_TRAIN.parent / "sample.py"), str(saved_tp2), "--prompt",
               "Let there be", "--tokens", "30", "--samples", "2"]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    texts = result.stdout.split("---\n")
    assert len(texts) == 3 and all(t.startswith("Let there be") for t in texts[:2]), texts
