"""A job that loses a rank is started again by the launcher (--max_restarts, Note [Restarts] in
oneflowlike/distributed/launch.py) and continues from its last checkpoint (the examples'
--save-every and --resume auto, Note [Checkpoints that survive a crash] in
examples/common/checkpoints.py), giving the curve of a run that was never interrupted."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import example_runs

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_GPT = _ROOT / "examples" / "gpt" / "train.py"
_FAULT = pathlib.Path(__file__).resolve().parent / "dist" / "fault_worker.py"
_SMALL = ["--n-layer", "2", "--n-embd", "32", "--n-head", "4", "--block-size", "32",
          "--batch-size", "8", "--warmup-steps", "2", "--quiet", "--dp", "2"]
sys.path.insert(0, str(_ROOT / "examples"))

from common import checkpoints  # noqa: E402


@pytest.mark.parametrize("data,dies,at,resumed", [
    ("bytes", 1, 6, 4),
    # From --data-bin the checkpoint of step 4 holds the loaders' position, and rank 0 (the one
    # that bootstraps the job) is the one lost.
    ("data_bin", 0, 6, 4),
    # Lost while step 4's checkpoint is being written (it commits after step 5): step 2's.
    ("bytes", 1, 5, 2),
])
def test_a_job_whose_rank_dies_restarts_and_gives_the_uninterrupted_curve(tmp_path, data, dies,
                                                                           at, resumed):
    flags = list(_SMALL)
    if data == "data_bin":
        text = tmp_path / "text.txt"
        text.write_bytes((_ROOT / "examples" / "data" / "kjv-genesis-deuteronomy.txt")
                         .read_bytes()[:100000])
        subprocess.run([sys.executable, str(_ROOT / "examples" / "common" / "prepare_tokens.py"),
                        str(text), str(tmp_path / "tokens.bin")], check=True,
                       capture_output=True)
        flags += ["--data-bin", str(tmp_path / "tokens.bin")]
    whole = example_runs.train(_GPT, flags, tmp_path, 2, steps=7, tag="whole")
    ckpt, log = tmp_path / "ckpt", tmp_path / "restarted.jsonl"
    command = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node", "2",
               "--max_restarts", "1", str(_FAULT), *flags, "--steps", "7", "--log-json",
               str(log), "--save", str(ckpt), "--save-every", "2", "--resume", "auto"]
    env = {**example_runs.clean_env(), "OFL_TEST_DIE_RANK": str(dies),
           "OFL_TEST_DIE_AT_STEP": str(at)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"rank {dies} dies before step {at}" in result.stdout
    assert "was killed by SIGKILL" in result.stderr
    assert "[launch] restarting the job: restart 1 of 1" in result.stderr
    assert f"--resume auto: no checkpoint in {ckpt} yet, step 1 (restart 0)" in result.stdout
    assert f"--resume auto: from {ckpt} (step {resumed}, restart 1)" in result.stdout
    # The steps after the checkpoint ran twice; the log keeps each step once.
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 8))
    np.testing.assert_array_equal(example_runs.losses(records), example_runs.losses(whole))
    assert checkpoints.latest(str(ckpt)) == str(ckpt)
    assert json.loads((ckpt / "train_state.json").read_text())["step"] == 7
    assert not any(pathlib.Path(f"{ckpt}{s}").exists() for s in (".next", ".prev"))
    # Run again (one process: the checkpoint loads onto any layout), the finished job has
    # nothing left to do.
    one_rank = [*_SMALL[:-2], *flags[len(_SMALL):]]  # without --dp 2
    again = subprocess.run([sys.executable, str(_GPT), *one_rank, "--steps", "7", "--save",
                            str(ckpt), "--resume", "auto"], env=example_runs.clean_env(),
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{ckpt} is at step 7 of 7: nothing left to run" in again.stdout


def test_two_hosts_restart_together_after_one_loses_its_rank(tmp_path, two_hosts):
    """DP2 across two network namespaces, one rank each: rank 1's host loses it (SIGKILL); rank
    0 sees its peer die and fails too, so both launchers restart, meet at MASTER_PORT again, and
    continue from the step-4 checkpoint to the uninterrupted curve."""
    whole = example_runs.train(_GPT, _SMALL, tmp_path, 2, steps=7, tag="whole")
    ckpt, log = tmp_path / "ckpt", tmp_path / "restarted.jsonl"
    results = example_runs.launch_on_hosts(
        two_hosts, _FAULT, [*_SMALL, "--steps", "7", "--log-json", str(log), "--save", str(ckpt),
                            "--save-every", "2", "--resume", "auto"],
        launcher_flags=["--max_restarts", "1", "--fault_timeout", "3"],
        env={"OFL_TEST_DIE_RANK": "1", "OFL_TEST_DIE_AT_STEP": "6"}, timeout=240)
    outputs = [output for _, output in results]
    assert [code for code, _ in results] == [0, 0], "\n".join(outputs)
    for output in outputs:
        assert "restarting the job: restart 1 of 1 (OFL_RESTART_COUNT=1, MASTER_PORT=29500)" \
            in output, output
    assert f"--resume auto: from {ckpt} (step 4, restart 1)" in outputs[0]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    np.testing.assert_array_equal(example_runs.losses(records), example_runs.losses(whole))


def _fake_checkpoint(path, step, manifest=True):
    path.mkdir()
    (path / "train_state.json").write_text(json.dumps({"step": step}))
    if manifest:
        (path / "manifest.json").write_text("{}")


def test_the_newest_complete_checkpoint_survives_a_save_cut_short(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert checkpoints.latest(str(ckpt)) is None
    # Cut short while writing DIR.next: DIR stands.
    _fake_checkpoint(ckpt, 4)
    _fake_checkpoint(pathlib.Path(f"{ckpt}.next"), 6, manifest=False)
    assert checkpoints.latest(str(ckpt)) == str(ckpt)
    # Cut short between the renames: DIR moved to DIR.prev, DIR.next complete and newer.
    ckpt.rename(f"{ckpt}.prev")
    (pathlib.Path(f"{ckpt}.next") / "manifest.json").write_text("{}")
    assert checkpoints.latest(str(ckpt)) == f"{ckpt}.next"
    # A train_state.json without a manifest (flow.save's commit marker) is not a checkpoint.
    pathlib.Path(f"{ckpt}.next", "manifest.json").unlink()
    assert checkpoints.latest(str(ckpt)) == f"{ckpt}.prev"


def test_the_last_checkpoint_is_discarded_markers_first(tmp_path, monkeypatch):
    # A removal cut short (here: rmtree fails) leaves an incomplete directory, never one that
    # latest() would take with its pieces gone.
    ckpt = tmp_path / "ckpt"
    _fake_checkpoint(ckpt, 4)
    (ckpt / "rank0.json").write_text("{}")

    def cut_short(path, *args, **kwargs):
        raise OSError("cut short")

    monkeypatch.setattr(checkpoints.shutil, "rmtree", cut_short)
    with pytest.raises(OSError):
        checkpoints._discard(str(ckpt))
    assert checkpoints.latest(str(ckpt)) is None


def _train_one(tmp_path, save, *extra, steps=3):
    return subprocess.run([sys.executable, str(_GPT), *_SMALL[:-2], "--steps", str(steps),
                           "--save", save, "--save-every", "1", *extra],
                          env=example_runs.clean_env(), capture_output=True, text=True,
                          timeout=120)


def test_a_save_directory_is_taken_through_slashes_and_symlinks(tmp_path):
    # A trailing slash: the staging directories go beside DIR, not inside it.
    result = _train_one(tmp_path, f"{tmp_path / 'slash'}/")
    assert result.returncode == 0, result.stderr[-2000:]
    assert checkpoints.latest(str(tmp_path / "slash")) == str(tmp_path / "slash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slash"]
    # A symlink stays one, to the directory that holds the newest checkpoint.
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = _train_one(tmp_path, str(tmp_path / "link"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "link" / "train_state.json").read_text())["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real", "slash"]


def test_a_save_directory_holding_other_files_is_refused(tmp_path):
    # Each save replaces the directory whole: a user's files there would go with it.
    run = tmp_path / "run"
    run.mkdir()
    (run / "NOTES.txt").write_text("mine")
    result = _train_one(tmp_path, str(run))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (f"--save {run} holds files that are not a checkpoint's (NOTES.txt): each save "
            "replaces the directory whole" in result.stderr)
    assert (run / "NOTES.txt").read_text() == "mine"


@pytest.mark.parametrize("flags,message", [
    (["--save-every", "2"], "--save-every takes a number of steps >= 0 and --save DIR. However, "
                            "got --save-every 2 and --save None."),
    (["--save-every", "-1", "--save", "ckpt"], "However, got --save-every -1 and --save ckpt."),
    (["--resume", "auto"], "--resume auto resumes from --save's checkpoint. However, no --save "
                           "was given."),
], ids=["no_save", "negative", "auto_without_save"])
def test_periodic_saves_and_auto_resume_refuse_what_they_cannot_do(tmp_path, flags, message):
    result = subprocess.run([sys.executable, str(_GPT), *_SMALL[:-2], "--steps", "2", *flags],
                            env=example_runs.clean_env(), capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr
    assert not (tmp_path / "ckpt").exists()
