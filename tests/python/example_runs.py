"""Running an example trainer (examples/*/train.py) as a user would, on one process or through
the launcher, and reading its --log-json curve: shared by the example tests."""

import json
import os
import subprocess
import sys

_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT")


def clean_env():
    """This process's environment without the launcher's contract or oneflowlike's settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OFL_")) and k not in _CONTRACT}


def train(script, base_flags, tmp_path, nproc, *flags, steps=10, tag="run", env=None):
    """Runs ``script`` with ``base_flags`` and ``flags`` for ``steps`` steps on ``nproc``
    processes; returns the per-step records of its JSON log."""
    log = tmp_path / f"{tag}.jsonl"
    args = [str(script), *base_flags, "--steps", str(steps), "--log-json", str(log), *flags]
    if nproc == 1:
        command = [sys.executable, *args]
    else:
        command = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
                   str(nproc), *args]
    result = subprocess.run(command, env={**clean_env(), **(env or {})}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "done:" in result.stdout, result.stdout
    return [json.loads(line) for line in log.read_text().splitlines()]


def losses(records):
    return [r["loss"] for r in records]
