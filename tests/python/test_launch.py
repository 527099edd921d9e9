"""The launcher (python -m oneflowlike.distributed.launch) and the env contract it sets."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from oneflowlike.distributed import launch
from oneflowlike.distributed.env import (expand_nodelist, expand_tasks_per_node, first_host,
                                         launch_env)

_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT", "OFL_JOB_SECRET", "OFL_BOOTSTRAP_TIMEOUT", "OFL_FAULT_TIMEOUT",
             "OMP_NUM_THREADS", "PYTHONUNBUFFERED")

# A worker that prints its env contract, launch_env() and its arguments as one JSON line.
_PRINT_ENV = f"""
import json, os, sys
from oneflowlike.distributed.env import launch_env
names = {_CONTRACT!r}
print(json.dumps({{"env": {{n: os.environ.get(n) for n in names}}, "parsed": launch_env(),
                  "argv": sys.argv[1:], "marker": os.environ.get("OFL_TEST_MARKER")}}))
"""

# A worker that says it is ready, then sleeps; it reports which signal stopped it.
_SLEEP = """
import os, signal, sys, time
def stop(number, frame):
    print(f"caught {signal.Signals(number).name}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print(f"ready pid {os.getpid()}", flush=True)
time.sleep(60)
"""


def _clean_env(**extra):
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("SLURM_", "OFL_")) and name not in _CONTRACT}
    env.update(extra)
    return env


def _script(tmp_path, body, name="worker.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launch_command(*args):
    return [sys.executable, "-m", "oneflowlike.distributed.launch", *args]


def _launch(*args, env=None, timeout=20):
    return subprocess.run(_launch_command(*args), capture_output=True, text=True, timeout=timeout,
                          env=_clean_env() if env is None else env)


def _rank_lines(stdout):
    """{rank: [line, ...]} from '[rank N] line' output; fails on any other line."""
    lines = {}
    for line in stdout.splitlines():
        match = re.fullmatch(r"\[rank (\d+)\] (.*)", line)
        assert match, f"unprefixed line {line!r}"
        lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie whose new parent has not reaped it yet counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids, seconds=3.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if not _gone(pid)]


def _start_sleepers(tmp_path, nproc, *extra_args, popen_options=None):
    """Starts a launcher of sleeping ranks; returns it and the ranks' pids once all are ready."""
    script = _script(tmp_path, _SLEEP)
    process = subprocess.Popen(_launch_command("--nproc_per_node", str(nproc), *extra_args, script),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_clean_env(), **(popen_options or {}))
    pids = []
    while len(pids) < nproc:
        line = process.stdout.readline()
        assert line, f"launcher ended early: {process.stderr.read()}"
        pids.append(int(re.fullmatch(r"\[rank \d+\] ready pid (\d+)\n", line).group(1)))
    return process, pids


# ---- the env contract ------------------------------------------------------------------------

def test_each_local_rank_gets_the_env_contract(tmp_path):
    result = _launch("--nproc_per_node", "3", _script(tmp_path, _PRINT_ENV),
                     env=_clean_env(OFL_TEST_MARKER="inherited"))
    assert (result.returncode, result.stderr) == (0, "")
    reports = {rank: json.loads(lines[0]) for rank, lines in _rank_lines(result.stdout).items()}
    assert sorted(reports) == [0, 1, 2]
    secrets_seen = {report["env"]["OFL_JOB_SECRET"] for report in reports.values()}
    assert len(secrets_seen) == 1 and re.fullmatch(r"[0-9a-f]{32}", secrets_seen.pop())
    # One node without --master_port: a free port, the same for every rank.
    ports = {report["env"]["MASTER_PORT"] for report in reports.values()}
    assert len(ports) == 1
    port = ports.pop()
    assert 1 <= int(port) <= 65535
    for rank, report in reports.items():
        env = report["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == ("3", "3", "0")
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", port)
        assert (env["OFL_BOOTSTRAP_TIMEOUT"], env["OFL_FAULT_TIMEOUT"]) == ("60", "10")
        assert env["OMP_NUM_THREADS"] == str(max(1, os.cpu_count() // 3))
        assert env["PYTHONUNBUFFERED"] == "1"
        assert report["marker"] == "inherited"
        parsed = report["parsed"]
        assert (parsed["rank"], parsed["world_size"], parsed["local_rank"]) == (rank, 3, rank)
        assert (parsed["local_world_size"], parsed["node_rank"]) == (3, 0)
        assert (parsed["master_addr"], parsed["master_port"]) == ("127.0.0.1", int(port))
        assert parsed["secret"] == env["OFL_JOB_SECRET"]
        assert (parsed["bootstrap_timeout"], parsed["fault_timeout"]) == (60.0, 10.0)


def test_second_node_ranks_follow_the_first_nodes(tmp_path):
    result = _launch("--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--secret", "x",
                     "--master_addr", "10.1.2.3", "--master-port", "1234", "--timeout", "5",
                     "--fault_timeout", "2.5", _script(tmp_path, _PRINT_ENV))
    assert result.returncode == 0, result.stderr
    reports = {rank: json.loads(lines[0]) for rank, lines in _rank_lines(result.stdout).items()}
    assert sorted(reports) == [2, 3]
    for rank, report in reports.items():
        env = report["env"]
        assert (env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"]) == (str(rank), str(rank - 2), "1")
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("4", "2")
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["OFL_JOB_SECRET"]) == (
            "10.1.2.3", "1234", "x")
        assert (env["OFL_BOOTSTRAP_TIMEOUT"], env["OFL_FAULT_TIMEOUT"]) == ("5", "2.5")
        assert report["parsed"]["node_rank"] == 1


def test_users_omp_num_threads_and_job_secret_are_kept(tmp_path):
    result = _launch("--nproc_per_node", "2", "--nnodes", "2", _script(tmp_path, _PRINT_ENV),
                     env=_clean_env(OMP_NUM_THREADS="7", OFL_JOB_SECRET="from-env"))
    assert result.returncode == 0, result.stderr
    for lines in _rank_lines(result.stdout).values():
        env = json.loads(lines[0])["env"]
        assert (env["OMP_NUM_THREADS"], env["OFL_JOB_SECRET"]) == ("7", "from-env")


def test_worker_env_divides_the_cores_among_local_ranks():
    config = launch.parse_config(["--nproc_per_node", "64", __file__], environ={})
    assert launch.worker_env(config, 0, environ={})["OMP_NUM_THREADS"] == str(
        max(1, os.cpu_count() // 64))


# ---- output, arguments, logs -----------------------------------------------------------------

def test_output_lines_are_prefixed_and_never_interleaved(tmp_path):
    # Each line is written in three flushed pieces, so ranks race inside lines.
    script = _script(tmp_path, """
        import os, sys
        rank = int(os.environ["RANK"])
        for i in range(200):
            for stream in (sys.stdout, sys.stderr):
                for piece in (f"{i}:", chr(ord("a") + rank) * 500, "." * 500 + "\\n"):
                    stream.write(piece)
                    stream.flush()
        sys.stdout.write("no newline at the end")
        """)
    result = _launch("--nproc_per_node", "3", script)
    assert result.returncode == 0, result.stderr
    for output in (result.stdout, result.stderr):
        lines = _rank_lines(output)
        assert sorted(lines) == [0, 1, 2]
        for rank, rank_lines in lines.items():
            body = chr(ord("a") + rank) * 500 + "." * 500
            expected = [f"{i}:{body}" for i in range(200)]
            if output is result.stdout:
                expected.append("no newline at the end")
            assert rank_lines == expected


def test_arguments_after_the_script_pass_through_unchanged(tmp_path):
    script_args = ["--nproc_per_node", "7", "--", "-x", "a b", "--no_python", "--secret=s", ""]
    result = _launch("--nproc_per_node", "2", _script(tmp_path, _PRINT_ENV), *script_args)
    assert result.returncode == 0, result.stderr
    for lines in _rank_lines(result.stdout).values():
        assert json.loads(lines[0])["argv"] == script_args


def test_split_argv_stops_at_the_first_word_that_is_not_a_flag():
    assert launch.split_argv(["--nnodes", "2", "--no_python", "run", "--nnodes", "3"]) == (
        ["--nnodes", "2", "--no_python", "run"], ["--nnodes", "3"])
    assert launch.split_argv(["--master_port=1", "--", "-odd", "--"]) == (
        ["--master_port=1", "--", "-odd"], ["--"])
    assert launch.split_argv(["--node_rank", "-1", "t.py"]) == (["--node_rank", "-1", "t.py"], [])


def test_logdir_gets_each_ranks_output_without_prefix(tmp_path):
    script = _script(tmp_path, """
        import os, sys
        print("out", os.environ["RANK"])
        print("err", os.environ["RANK"], file=sys.stderr)
        """)
    logdir = tmp_path / "logs" / "run1"
    result = _launch("--nproc_per_node", "2", "--logdir", str(logdir), script)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(logdir)) == ["rank_0.log", "rank_1.log"]
    for rank in (0, 1):
        assert sorted((logdir / f"rank_{rank}.log").read_text().splitlines()) == [
            f"err {rank}", f"out {rank}"]
    assert "[rank 1] out 1" in result.stdout and "[rank 1] err 1" in result.stderr


def test_no_python_runs_the_script_as_an_executable(tmp_path):
    script = _script(tmp_path, """\
        #!/bin/sh
        echo "rank $RANK of $WORLD_SIZE: $*"
        """, name="worker.sh")
    os.chmod(script, 0o755)
    result = _launch("--no_python", "--nproc_per_node", "2", script, "a", "--b")
    assert result.returncode == 0, result.stderr
    assert _rank_lines(result.stdout) == {0: ["rank 0 of 2: a --b"], 1: ["rank 1 of 2: a --b"]}
    result = _launch("--no-python", "sh", "-c", "echo local $LOCAL_RANK")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[rank 0] local 0\n"


# ---- failures and signals --------------------------------------------------------------------

def test_first_failure_stops_the_other_ranks_and_sets_the_exit_code(tmp_path):
    script = _script(tmp_path, """
        import os, sys, time
        print(f"pid {os.getpid()}", flush=True)
        if os.environ["RANK"] == "1":
            time.sleep(0.3)
            sys.exit(7)
        time.sleep(60)
        """)
    start = time.monotonic()
    result = _launch("--nproc_per_node", "3", script)
    assert time.monotonic() - start < 4
    assert result.returncode == 7
    pids = {rank: int(lines[0].split()[1]) for rank, lines in _rank_lines(result.stdout).items()}
    assert (f"[launch] rank 1 (pid {pids[1]}) failed with exit code 7; stopping the other ranks"
            in result.stderr)
    assert _wait_gone(list(pids.values())) == []


def test_a_rank_killed_by_a_signal_gives_128_plus_the_signal(tmp_path):
    script = _script(tmp_path, """
        import os, signal, time
        if os.environ["RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
        """)
    result = _launch("--nproc_per_node", "2", script)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0 (pid" in result.stderr
    assert "was killed by SIGKILL (exit code 137)" in result.stderr


def test_a_rank_that_ignores_sigterm_gets_sigkill_after_the_grace_period(tmp_path):
    script = _script(tmp_path, """
        import os, signal, sys, time
        if os.environ["RANK"] == "1":
            time.sleep(0.5)
            sys.exit(3)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
        """)
    start = time.monotonic()
    result = _launch("--nproc_per_node", "2", "--grace_period", "0.5", script)
    assert time.monotonic() - start < 4
    assert result.returncode == 3
    assert "rank 0 still running 0.5 s after SIGTERM; sending SIGKILL" in result.stderr


# Note [Restarts]: a worker that says which attempt it is, and fails (rank 1) until attempt
# OFL_TEST_SUCCEED_AT; rank 0 waits to be stopped.
_FLAKY = """
    import os, sys, time
    attempt = int(os.environ["OFL_RESTART_COUNT"])
    print(f"attempt {attempt} of {os.environ['OFL_MAX_RESTARTS']} port {os.environ['MASTER_PORT']}",
          flush=True)
    if attempt >= int(os.environ["OFL_TEST_SUCCEED_AT"]):
        sys.exit(0)
    if os.environ["RANK"] == "1":
        time.sleep(0.2)
        sys.exit(5)
    time.sleep(60)
    """


def test_max_restarts_starts_a_failed_job_again_with_the_restart_count(tmp_path):
    script = _script(tmp_path, _FLAKY)
    result = _launch("--nproc_per_node", "2", "--max_restarts", "3", script,
                     env=_clean_env(OFL_TEST_SUCCEED_AT="2"))
    assert result.returncode == 0, result.stderr
    lines = _rank_lines(result.stdout)
    for rank in (0, 1):
        assert [line.split(" port")[0] for line in lines[rank]] == [
            "attempt 0 of 3", "attempt 1 of 3", "attempt 2 of 3"]
    assert result.stderr.count("failed with exit code 5; stopping the other ranks") == 2
    assert "[launch] restarting the job: restart 1 of 3 (OFL_RESTART_COUNT=1, MASTER_PORT=" in \
        result.stderr
    assert "[launch] restarting the job: restart 2 of 3 (OFL_RESTART_COUNT=2, MASTER_PORT=" in \
        result.stderr
    assert "restart 3" not in result.stderr
    # Each attempt's ranks meet at a port of their own (the last one's may be in TIME_WAIT).
    assert len({line.split(" port ")[1] for line in lines[0]}) == 3


def test_a_given_master_port_is_listened_on_again_at_once_after_a_restart(tmp_path):
    # What the launchers of several nodes meet at (Note [Restarts]): the port the last attempt
    # used, its connections perhaps in TIME_WAIT (UCX_TCP_CM_REUSEADDR). The workers connect,
    # so rank 0's UCX listener binds the port each time.
    script = _script(tmp_path, """
        import os, time
        import oneflowlike as flow
        flow.comm.barrier()  # rank 0 listened, rank 1 connected
        attempt = int(os.environ["OFL_RESTART_COUNT"])
        print(f"attempt {attempt} port {os.environ['MASTER_PORT']}", flush=True)
        if attempt < 2 and os.environ["RANK"] == "1":
            os._exit(5)  # lost (a clean exit would wait for rank 0 at the job's end)
        time.sleep(0 if attempt == 2 else 60)
        """)
    port = launch._free_port()
    result = _launch("--nproc_per_node", "2", "--max_restarts", "2", "--master_port",
                     str(port), script, env=_clean_env(OFL_TEST_SUCCEED_AT="2"), timeout=60)
    assert result.returncode == 0, result.stderr
    assert [line.split(" port ")[1] for line in _rank_lines(result.stdout)[0]] == [str(port)] * 3


def test_each_restarts_output_follows_the_last_ones_in_the_rank_logs(tmp_path):
    script = _script(tmp_path, _FLAKY)
    logs = tmp_path / "logs"
    result = _launch("--nproc_per_node", "2", "--max_restarts", "1", "--logdir", str(logs),
                     script, env=_clean_env(OFL_TEST_SUCCEED_AT="1"))
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        lines = (logs / f"rank_{rank}.log").read_text().splitlines()
        assert [line.split(" port")[0] for line in lines] == ["attempt 0 of 1", "attempt 1 of 1"]


def test_a_job_that_keeps_failing_exits_with_its_code_after_the_last_restart(tmp_path):
    script = _script(tmp_path, _FLAKY)
    result = _launch("--nproc_per_node", "2", "--max_restarts", "1", script,
                     env=_clean_env(OFL_TEST_SUCCEED_AT="9"))
    assert result.returncode == 5
    assert result.stderr.count("failed with exit code 5") == 2
    assert ("[launch] the job failed after 1 restart (--max_restarts 1); exiting with code 5"
            in result.stderr)
    # Without --max_restarts nothing starts again.
    result = _launch("--nproc_per_node", "2", script, env=_clean_env(OFL_TEST_SUCCEED_AT="9"))
    assert result.returncode == 5 and "restart" not in result.stderr
    assert [line.split(" port")[0] for line in _rank_lines(result.stdout)[1]] == ["attempt 0 of 0"]


def test_a_signal_to_the_launcher_stops_the_job_without_a_restart(tmp_path):
    process, pids = _start_sleepers(tmp_path, 2, "--max_restarts", "2")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=5)
    assert process.returncode == 143
    assert "restarting" not in stderr
    assert "ready pid" not in stdout  # (the first attempt's were read): no rank started again
    assert stdout.count("caught SIGTERM") == 2


def test_sigterm_to_the_launcher_stops_every_rank_and_exits_143(tmp_path):
    process, pids = _start_sleepers(tmp_path, 2)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=5)
    assert process.returncode == 143
    assert "[launch] got SIGTERM; stopping all ranks" in stderr
    assert sorted(_rank_lines(stdout).values()) == [["caught SIGTERM"]] * 2
    assert _wait_gone(pids) == []


def test_ctrl_c_reaches_only_the_launcher_which_stops_the_ranks_and_exits_130(tmp_path):
    # A terminal sends SIGINT to its whole foreground process group; the launcher leads one here.
    process, pids = _start_sleepers(tmp_path, 2, popen_options={"start_new_session": True})
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=5)
    assert process.returncode == 130
    assert "[launch] got SIGINT; stopping all ranks" in stderr
    assert sorted(_rank_lines(stdout).values()) == [["caught SIGTERM"]] * 2
    assert _wait_gone(pids) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ranks_die_with_a_launcher_killed_by_sigkill(tmp_path):
    process, pids = _start_sleepers(tmp_path, 2)
    process.kill()
    process.communicate(timeout=5)
    assert _wait_gone(pids) == []


# ---- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, phrase", [
    (["--nproc_per_node", "0"], "--nproc_per_node must be at least 1. However, got 0"),
    (["--nnodes", "0"], "--nnodes must be at least 1. However, got 0"),
    (["--nnodes", "2", "--node_rank", "2", "--secret", "s"],
     "--node_rank must be in [0, --nnodes)"),
    (["--node_rank", "-1"], "However, got --node_rank -1"),
    (["--master_port", "0"], "--master_port must be in [1, 65535]. However, got 0"),
    (["--master_port", "70000"], "However, got 70000"),
    (["--master_addr", " "], "--master_addr must name a host"),
    (["--timeout", "0"], "--timeout must be a positive number of seconds"),
    (["--fault_timeout", "-1"], "--fault_timeout must be a positive number of seconds"),
    (["--nnodes", "2"], "--secret (or OFL_JOB_SECRET) must be given when --nnodes > 1"),
    (["--secret", ""], "must not be empty"),
    (["--max_restarts", "-1"], "--max_restarts must be at least 0. However, got -1"),
])
def test_bad_flags_are_rejected_with_the_flag_and_value(args, phrase):
    with pytest.raises(launch.LaunchError) as error:
        launch.parse_config([*args, __file__], environ={})
    assert phrase in str(error.value)


def test_a_missing_script_is_rejected(tmp_path, monkeypatch):
    with pytest.raises(launch.LaunchError, match="SCRIPT must be an existing Python file.*nope.py"):
        launch.parse_config(["nope.py"], environ={})
    with pytest.raises(launch.LaunchError, match="command on PATH.*no-such-command-ofl"):
        launch.parse_config(["--no_python", "no-such-command-ofl"], environ={})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    with pytest.raises(launch.LaunchError, match="HINT: it is not executable; chmod \\+x run.sh"):
        launch.parse_config(["--no_python", "run.sh"], environ={})
    os.chmod(tmp_path / "run.sh", 0o755)
    with pytest.raises(launch.LaunchError, match="HINT: a file in this directory is written ./run"):
        launch.parse_config(["--no_python", "run.sh"], environ={})
    assert launch.parse_config(["--no_python", "./run.sh"], environ={}).script == "./run.sh"


@pytest.mark.parametrize("args, phrase", [
    (["--nproc_per_node", "0", "x.py"], "--nproc_per_node must be at least 1. However, got 0."),
    (["--master_port", "abc", "x.py"], "argument --master_port/--master-port: invalid int value: "
                                       "'abc'"),
    (["missing.py"], "SCRIPT must be an existing Python file. However, got 'missing.py'"),
    (["--nproc_per_node", "2"], "the following arguments are required: SCRIPT"),
    (["--nprocs", "2", "x.py"], "unrecognized arguments: --nprocs"),
    (["--logdir", "x.py/logs", "x.py"], "--logdir must be a directory that can be created"),
])
def test_the_command_line_reports_usage_errors_with_exit_code_2(tmp_path, args, phrase):
    (tmp_path / "x.py").write_text("")
    result = subprocess.run(_launch_command(*args), capture_output=True, text=True, timeout=20,
                            env=_clean_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert phrase in result.stderr
    assert result.stdout == ""


# ---- Slurm -----------------------------------------------------------------------------------

@pytest.mark.parametrize("nodelist, hosts", [
    ("host", ["host"]),
    ("a,b", ["a", "b"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("n[8-10],gpu-3,x[2]", ["n8", "n9", "n10", "gpu-3", "x2"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("r[1-2]n[0-1]", ["r1n0", "r1n1", "r2n0", "r2n1"]),
    ("c[1-2]-ib", ["c1-ib", "c2-ib"]),
    ("10.0.0.1", ["10.0.0.1"]),
])
def test_slurm_nodelists_expand(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts
    assert first_host(nodelist) == hosts[0]


@pytest.mark.parametrize("nodelist", ["", "node[01-04", "node01]", "a,,b", "n[4-2]", "n[a-b]",
                                      "n[]", "n[[1]]", "[1-2]"])
def test_malformed_slurm_nodelists_are_rejected(nodelist):
    with pytest.raises(ValueError, match=r"\[slurm\] SLURM_NODELIST"):
        expand_nodelist(nodelist)


def test_slurm_tasks_per_node_expand():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match=r"SLURM_TASKS_PER_NODE must look like '2\(x3\),1'"):
        expand_tasks_per_node("2x3")


_SLURM_NODE = {"SLURM_PROCID": "1", "SLURM_NNODES": "4", "SLURM_NODEID": "2",
               "SLURM_NODELIST": "gpu[07-10]", "OFL_JOB_SECRET": "s"}


def test_the_launcher_takes_nodes_and_master_from_slurm():
    config = launch.parse_config(["--nproc_per_node", "2", __file__], environ=_SLURM_NODE)
    assert (config.nnodes, config.node_rank, config.master_addr) == (4, 2, "gpu07")
    assert config.from_slurm
    config = launch.parse_config(["--master_addr", "head", __file__], environ=_SLURM_NODE)
    assert (config.nnodes, config.node_rank, config.master_addr) == (4, 2, "head")


def test_explicit_node_flags_override_slurm():
    config = launch.parse_config(["--nnodes", "2", __file__], environ=_SLURM_NODE)
    assert (config.nnodes, config.node_rank, config.master_addr) == (2, 0, "127.0.0.1")
    assert not config.from_slurm


def test_bad_slurm_variables_are_named():
    with pytest.raises(launch.LaunchError, match="SLURM_NNODES must be an integer >= 1.*'x'"):
        launch.parse_config([__file__], environ={**_SLURM_NODE, "SLURM_NNODES": "x"})
    with pytest.raises(launch.LaunchError, match="SLURM_NODEID must be an integer >= 0.*None"):
        launch.parse_config([__file__], environ={"SLURM_PROCID": "0", "SLURM_NNODES": "1"})


def test_a_launcher_under_srun_numbers_its_ranks_by_slurm_node(tmp_path):
    env = _clean_env(SLURM_PROCID="1", SLURM_NNODES="2", SLURM_NODEID="1",
                     SLURM_NODELIST="n[3-4]", OFL_JOB_SECRET="s")
    result = _launch("--nproc_per_node", "2", _script(tmp_path, _PRINT_ENV), env=env)
    assert result.returncode == 0, result.stderr
    assert "[launch] Slurm: node 1 of 2, master n3:29500" in result.stderr
    reports = {rank: json.loads(lines[0]) for rank, lines in _rank_lines(result.stdout).items()}
    assert sorted(reports) == [2, 3]
    assert {report["env"]["MASTER_ADDR"] for report in reports.values()} == {"n3"}
    assert {report["parsed"]["world_size"] for report in reports.values()} == {4}


# ---- launch_env ------------------------------------------------------------------------------

_LAUNCHED = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
             "NODE_RANK": "1", "MASTER_ADDR": "head", "MASTER_PORT": "1234",
             "OFL_JOB_SECRET": "s", "OFL_BOOTSTRAP_TIMEOUT": "5", "OFL_FAULT_TIMEOUT": "2.5"}
_SRUN = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
         "SLURM_NODELIST": "node[01-03]", "SLURM_TASKS_PER_NODE": "2(x3)", "OFL_JOB_SECRET": "s"}


def test_launch_env_reads_the_launchers_variables():
    assert launch_env(_LAUNCHED) == {
        "rank": 3, "world_size": 4, "local_rank": 1, "local_world_size": 2, "node_rank": 1,
        "master_addr": "head", "master_port": 1234, "secret": "s", "bootstrap_timeout": 5.0,
        "fault_timeout": 2.5}


def test_launch_env_defaults():
    env = launch_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                      "MASTER_ADDR": "localhost"})
    assert (env["node_rank"], env["master_port"], env["secret"]) == (0, 29500, None)
    assert (env["bootstrap_timeout"], env["fault_timeout"]) == (60.0, 10.0)


def test_launch_env_falls_back_to_slurm():
    env = launch_env(_SRUN)
    assert (env["rank"], env["world_size"], env["local_rank"], env["local_world_size"]) == (
        5, 6, 1, 2)
    assert (env["node_rank"], env["master_addr"], env["master_port"]) == (2, "node01", 29500)
    env = launch_env({**_SRUN, "SLURM_STEP_NODELIST": "b[2-3]", "MASTER_PORT": "4000"})
    assert (env["master_addr"], env["master_port"]) == ("b2", 4000)
    assert launch_env({**_SRUN, "MASTER_ADDR": "explicit"})["master_addr"] == "explicit"


def test_launch_env_prefers_the_launchers_variables_to_slurms():
    assert launch_env({**_SRUN, **_LAUNCHED})["rank"] == 3


def _without(environ, name):
    return {key: value for key, value in environ.items() if key != name}


@pytest.mark.parametrize("environ, phrase", [
    ({}, "RANK (or SLURM_PROCID, for ranks started by srun) must be set"),
    (_without(_LAUNCHED, "WORLD_SIZE"), "WORLD_SIZE must be set when RANK is"),
    (_without(_LAUNCHED, "LOCAL_RANK"), "LOCAL_RANK must be set when RANK is"),
    (_without(_LAUNCHED, "MASTER_ADDR"), "MASTER_ADDR must be set when RANK is"),
    ({**_LAUNCHED, "RANK": "x"}, "RANK must be an integer. However, got 'x'"),
    ({**_LAUNCHED, "RANK": "-1"}, "RANK must be at least 0. However, got '-1'"),
    ({**_LAUNCHED, "RANK": "4"}, "RANK must be less than WORLD_SIZE. However, got RANK=4 and "
                                 "WORLD_SIZE=4"),
    ({**_LAUNCHED, "LOCAL_RANK": "2"}, "LOCAL_RANK must be less than LOCAL_WORLD_SIZE"),
    ({**_LAUNCHED, "LOCAL_WORLD_SIZE": "8"}, "LOCAL_WORLD_SIZE must be at most WORLD_SIZE"),
    ({**_LAUNCHED, "MASTER_PORT": "70000"}, "MASTER_PORT must be in [1, 65535]"),
    ({**_LAUNCHED, "MASTER_ADDR": ""}, "MASTER_ADDR must not be empty"),
    (_without(_LAUNCHED, "OFL_JOB_SECRET"), "OFL_JOB_SECRET must be set when WORLD_SIZE > 1"),
    ({**_LAUNCHED, "OFL_FAULT_TIMEOUT": "soon"}, "OFL_FAULT_TIMEOUT must be a positive number"),
    ({**_LAUNCHED, "OFL_BOOTSTRAP_TIMEOUT": "0"}, "OFL_BOOTSTRAP_TIMEOUT must be a positive"),
    (_without(_SRUN, "SLURM_NTASKS"), "SLURM_NTASKS must be set when SLURM_PROCID is"),
    ({**_SRUN, "SLURM_PROCID": "6"}, "SLURM_PROCID must be less than SLURM_NTASKS"),
    ({**_SRUN, "SLURM_LOCALID": "2"}, "SLURM_LOCALID must be less than tasks on this node. "
                                      "However, got SLURM_LOCALID=2 and tasks on this node=2"),
    (_without(_SRUN, "SLURM_NODELIST"), "MASTER_ADDR or a Slurm node list"),
    ({**_SRUN, "SLURM_NODELIST": "node[1-"}, "SLURM_NODELIST must be a host list"),
    ({**_SRUN, "SLURM_TASKS_PER_NODE": "2"}, "SLURM_NODEID must be less than the number of nodes"),
])
def test_launch_env_names_the_missing_or_malformed_variable(environ, phrase):
    with pytest.raises(ValueError) as error:
        launch_env(environ)
    assert phrase in str(error.value)


def test_importing_the_distributed_package_does_not_load_the_cpp_module():
    package = os.path.dirname(os.path.dirname(launch.__file__))
    code = ("import sys, types\n"  # an empty stand-in for oneflowlike/__init__.py
            "sys.modules['oneflowlike'] = types.ModuleType('oneflowlike')\n"
            f"sys.modules['oneflowlike'].__path__ = [{package!r}]\n"
            "import oneflowlike.distributed, oneflowlike.distributed.launch\n"
            "assert 'oneflowlike._C' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)


# ---- logging (issue 14, item 7) ----------------------------------------------------------------
_GLOBAL_ONE_OP = """
import numpy as np
import oneflowlike as flow
both = flow.placement("cpu", ranks=[0, 1])
x = flow.tensor(np.ones(4, np.float32), placement=both, sbp=flow.sbp.split(0))
print("sum", float(x.sum().numpy()))
"""


def test_ranks_log_only_warnings_and_errors_unless_asked(tmp_path):
    script = _script(tmp_path, _GLOBAL_ONE_OP)
    quiet = _launch("--nproc_per_node", "2", script, timeout=60)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout.count("sum 4.0") == 2, quiet.stdout
    # glog is set up once per process: no "before InitGoogleLogging" warning, no INFO lines.
    assert quiet.stderr == "", quiet.stderr
    verbose = _launch("--nproc_per_node", "2", "--verbose", script, timeout=60)
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "[ucx] rank 0 listening on" in verbose.stderr, verbose.stderr
    assert "before InitGoogleLogging" not in verbose.stderr, verbose.stderr
