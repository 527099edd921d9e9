"""Runs cuda_eager_cases.py (eager training on CUDA devices against the CPU) in a process with two
simulated CUDA devices (Note [Simulated CUDA devices] in oneflowlike/device.h), so CI checks
everything above the CUDA kernels without a GPU: devices of results, autograd across devices,
modules, optimizers, checkpoints and nn.Graph on a module's device. On a GPU,
scripts/gpu/check.sh runs the same file on the real device."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_eager_cuda_cases_on_two_simulated_devices():
    env = dict(os.environ, OFL_SIMULATE_CUDA_DEVICES="2")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "cuda_eager_cases.py"],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    # Every case ran: none skipped (two devices, so the two-device cases too).
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert not re.search(r"skipped|failed|error|xfail", summary), summary


def test_the_current_device_starts_at_the_launchers_gpu():
    """Until set_device, "cuda" is the GPU the launcher gave the process (Note [The GPU of a
    rank]): LOCAL_RANK, overridden by OFL_CUDA_DEVICE, as the runtime takes it for plans."""
    code = ("import oneflowlike as flow; t = flow.tensor([1.0]).cuda(); "
            "print(flow.cuda.current_device(), t.device)")
    # A process that sees only one GPU (CUDA_VISIBLE_DEVICES per rank) starts at it.
    for devices, extra, want in [("2", {}, "0 cuda:0"), ("2", {"LOCAL_RANK": "1"}, "1 cuda:1"),
                                 ("2", {"LOCAL_RANK": "1", "OFL_CUDA_DEVICE": "0"}, "0 cuda:0"),
                                 ("1", {"LOCAL_RANK": "1"}, "0 cuda:0")]:
        env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "OFL_CUDA_DEVICE")}
        env.update(OFL_SIMULATE_CUDA_DEVICES=devices, **extra)
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip() == want, (extra, result.stdout)
