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
