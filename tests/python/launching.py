"""Starting a worker script of tests/python/dist/ on several processes through the launcher,
as a user would, for the multi-process tests."""

import os
import pathlib
import subprocess
import sys

DIST = pathlib.Path(__file__).parent / "dist"
_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT")


def run_worker(nproc, script, *args, timeout=240, check=True, **extra_env):
    """Runs dist/<script> on ``nproc`` processes; returns the CompletedProcess (stdout and
    stderr as text). With ``check``, a non-zero exit fails the test with the output's end."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OFL_")) and k not in _CONTRACT}
    env.update(extra_env)
    command = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
               str(nproc), str(DIST / script), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def launch(nproc, script, *args, timeout=240, **extra_env):
    """run_worker that must succeed; returns its stdout."""
    return run_worker(nproc, script, *args, timeout=timeout, **extra_env).stdout
