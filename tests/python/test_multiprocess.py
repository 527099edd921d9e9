"""Multi-process training over UCX: one process per rank (build/tests/cpp/ofl_train_worker).

Every run is checked against the same job run in one process (--in-process): the pieces each
rank holds after training, printed with 9 significant digits, must match bit for bit. Then the
failures a job can meet: a rank that dies mid-run, a rank with the wrong WORLD_SIZE or job
secret, a master port already taken, a master that never comes up. Last, two "hosts" made of
network namespaces joined by a veth pair, with UCX over TCP only (skipped unless `ip netns add`
works, i.e. as root).
"""

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oneflowlike.distributed.launch import _free_port

_WORKER = Path(__file__).resolve().parents[2] / "build" / "tests" / "cpp" / "ofl_train_worker"

pytestmark = pytest.mark.skipif(
    not os.access(_WORKER, os.X_OK),
    reason=f"{_WORKER} is not built (cmake --build build --target ofl_train_worker)")

# The launch contract; a developer's own values must not leak into the ranks we start.
_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT")
_BOOTSTRAP_TIMEOUT = 10  # seconds; every healthy run here connects in well under one
_RUN_TIMEOUT = 60  # seconds; a run that takes this long is hung


def _clean_env(**extra):
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("SLURM_", "OFL_")) and name not in _CONTRACT}
    env.update(extra)
    return env


def _worker_args(model, layout, out, steps=3):
    return [str(_WORKER), "--model", model, "--layout", layout, "--steps", str(steps),
            "--out", str(out)]


def _launch_command(*launcher_flags):
    return [sys.executable, "-m", "oneflowlike.distributed.launch", *launcher_flags, "--no_python"]


def _reference_pieces(tmp_path, model, layout, steps=3):
    """The sorted lines of the in-process run: what every multi-process run must reproduce."""
    out = tmp_path / "in_process"
    out.mkdir()
    result = subprocess.run(_worker_args(model, layout, out, steps) + ["--in-process"],
                            capture_output=True, text=True, timeout=_RUN_TIMEOUT, env=_clean_env())
    assert result.returncode == 0, f"the in-process reference failed:\n{result.stderr}"
    return sorted((out / "all.txt").read_text().splitlines())


def _rank_pieces(out, world_size):
    """The sorted lines of every rank's file; each rank writes only its own pieces."""
    lines = []
    for rank in range(world_size):
        path = out / f"rank{rank}.txt"
        assert path.is_file(), f"rank {rank} wrote no {path.name}; found {sorted(os.listdir(out))}"
        own = path.read_text().splitlines()
        assert own, f"{path.name} is empty"
        strangers = [line.split(" ", 1)[0] for line in own if not line.startswith(f"rank{rank}/")]
        assert not strangers, f"{path.name} holds other ranks' pieces: {strangers[:5]}"
        lines += own
    return sorted(lines)


def _assert_same_pieces(actual, expected):
    if actual == expected:
        return
    def by_name(lines):
        return {line.split(" ", 1)[0]: line for line in lines}
    got, want = by_name(actual), by_name(expected)
    report = [f"{len(actual)} pieces from the ranks, {len(expected)} in process"]
    report += [f"missing: {name}" for name in sorted(set(want) - set(got))][:5]
    report += [f"extra: {name}" for name in sorted(set(got) - set(want))][:5]
    differing = [name for name in sorted(set(got) & set(want)) if got[name] != want[name]]
    for name in differing[:3]:
        report += [f"differs: {name}", f"  ranks:      {got[name][:200]}",
                   f"  in process: {want[name][:200]}"]
    if len(differing) > 3:
        report.append(f"... and {len(differing) - 3} more differing pieces")
    pytest.fail("multi-process pieces are not bit-identical to the in-process ones:\n"
                + "\n".join(report))


def _processes_mentioning(text, seconds=2.0):
    """Pids of live processes whose command line contains ``text``, after waiting up to
    ``seconds`` for them to go. A zombie has an empty command line, so it counts as gone."""
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if text.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                pass  # gone meanwhile
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


class _Ranks:
    """Ranks started directly (no launcher), each with its output in files under ``logs``.

    Leaving the ``with`` block kills any rank still running, so a failing test leaves nothing.
    """

    def __init__(self, logs):
        self.logs = Path(logs)
        self.logs.mkdir(exist_ok=True)
        self.processes = {}
        self.exit_times = {}  # rank -> time.monotonic() when it was seen to exit

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def start(self, rank, args, env):
        with open(self.logs / f"rank{rank}.stdout", "wb") as stdout, \
                open(self.logs / f"rank{rank}.stderr", "wb") as stderr:
            self.processes[rank] = subprocess.Popen(args, env=env, stdout=stdout, stderr=stderr)

    def wait(self, timeout=_RUN_TIMEOUT):
        """Waits for every rank, noting when each exits; fails the test if one hangs."""
        deadline = time.monotonic() + timeout
        while len(self.exit_times) < len(self.processes) and time.monotonic() < deadline:
            for rank, process in self.processes.items():
                if rank not in self.exit_times and process.poll() is not None:
                    self.exit_times[rank] = time.monotonic()
            time.sleep(0.01)
        hung = sorted(set(self.processes) - set(self.exit_times))
        if hung:
            self.__exit__()
            pytest.fail(f"ranks {hung} still running after {timeout} s:\n{self.report()}")

    def code(self, rank):
        return self.processes[rank].returncode

    def stderr(self, rank):
        return (self.logs / f"rank{rank}.stderr").read_text(errors="replace")

    def report(self):
        return "\n".join(f"--- rank {rank} (exit code {process.returncode}) stderr:\n"
                         f"{self.stderr(rank)}" for rank, process in self.processes.items())


def _rank_env(rank, world_size, port, secret="0" * 32, bootstrap_timeout=_BOOTSTRAP_TIMEOUT,
              fault_timeout=5):
    return _clean_env(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OFL_JOB_SECRET=secret,
                      OFL_BOOTSTRAP_TIMEOUT=str(bootstrap_timeout),
                      OFL_FAULT_TIMEOUT=str(fault_timeout))


# ---- training through the launcher matches the in-process run ---------------------------------

_MLP_WORLD_SIZES = {"dp2": 2, "dp4": 4, "tp2": 2, "dp2_tp2": 4, "pp2_micro4": 2,
                    "dp2_pp2_micro2": 4, "pp4_micro4": 4, "pp4_micro8": 4}
_GPT_LAYOUTS = ["dp2", "dp4", "tp2", "pp2_m4", "pp2_m8", "dp2_tp2", "dp2_pp2_m4",
                "dp2_tp2_pp2_m2"]


def _gpt_world_size(layout):
    sizes = {key: int(value) for key, value in re.findall(r"(dp|tp|pp)(\d+)", layout)}
    return sizes.get("dp", 1) * sizes.get("tp", 1) * sizes.get("pp", 1)


_LAYOUTS = ([("mlp", layout, size) for layout, size in _MLP_WORLD_SIZES.items()]
            + [("gpt", layout, _gpt_world_size(layout)) for layout in _GPT_LAYOUTS])


@pytest.mark.parametrize("model, layout, world_size", _LAYOUTS,
                         ids=[f"{model}-{layout}" for model, layout, _ in _LAYOUTS])
def test_launched_ranks_train_bit_identically_to_one_process(tmp_path, model, layout, world_size):
    expected = _reference_pieces(tmp_path, model, layout)
    out = tmp_path / "ranks"
    out.mkdir()
    command = _launch_command("--nproc_per_node", str(world_size), "--master_port",
                              str(_free_port()), "--timeout", str(_BOOTSTRAP_TIMEOUT))
    result = subprocess.run(command + _worker_args(model, layout, out), capture_output=True,
                            text=True, timeout=_RUN_TIMEOUT, env=_clean_env())
    assert result.returncode == 0, f"launcher exit code {result.returncode}:\n{result.stderr}"
    _assert_same_pieces(_rank_pieces(out, world_size), expected)


# ---- the transport conformance suite on UCX ----------------------------------------------------

_CONFORMANCE = _WORKER.parent / "ofl_ucx_conformance"


def test_the_ucx_transport_passes_the_transport_conformance_suite():
    if not _CONFORMANCE.exists():
        pytest.skip(f"{_CONFORMANCE} is not built (run scripts/setup.sh)")
    command = _launch_command("--nproc_per_node", "2", "--master_port", str(_free_port()),
                              "--timeout", str(_BOOTSTRAP_TIMEOUT))
    result = subprocess.run(command + [str(_CONFORMANCE), "--gtest_filter=TransportConformance.*"],
                            capture_output=True, text=True,
                            timeout=_RUN_TIMEOUT, env=_clean_env())
    assert result.returncode == 0, f"exit code {result.returncode}:\n{result.stdout}\n{result.stderr}"
    for rank in (0, 1):
        assert f"[rank {rank}] [  PASSED  ] 1 test." in result.stdout, result.stdout


def test_small_transfers_to_a_stopped_rank_give_up_naming_it_and_let_go_of_their_piece():
    """Rank 0 stops (SIGSTOP) while rank 1 streams 4 KiB transfers to it: rank 1's send waits on
    a full queue, gives up within the fault timeout naming rank 0, and UCX reads nothing of the
    piece afterwards (ofl_ucx_conformance's UcxFaults test, run alone: it ends the transports)."""
    if not _CONFORMANCE.exists():
        pytest.skip(f"{_CONFORMANCE} is not built (run scripts/setup.sh)")
    command = _launch_command("--nproc_per_node", "2", "--master_port", str(_free_port()),
                              "--timeout", str(_BOOTSTRAP_TIMEOUT), "--fault_timeout", "2")
    result = subprocess.run(command + [str(_CONFORMANCE), "--gtest_filter=UcxFaults.*"],
                            capture_output=True, text=True, timeout=_RUN_TIMEOUT,
                            env=_clean_env(OFL_TEST_STOPPED_PEER="1"))
    assert result.returncode == 0, f"exit code {result.returncode}:\n{result.stdout}\n{result.stderr}"
    for rank in (0, 1):
        assert f"[rank {rank}] [  PASSED  ] 1 test." in result.stdout, result.stdout
        assert f"[rank {rank}] [  SKIPPED ]" not in result.stdout, result.stdout
    assert "rank 1 sees rank 0 (" in result.stderr, result.stderr


# ---- a rank that dies mid-run ------------------------------------------------------------------

_DIE_ARGS = ["--step-sleep-ms", "20", "--die-rank", "1", "--die-at-step", "5"]


def test_survivors_fail_naming_the_rank_that_died_mid_run(tmp_path):
    port = _free_port()
    args = _worker_args("mlp", "dp3_uneven", tmp_path, steps=200) + _DIE_ARGS
    with _Ranks(tmp_path / "logs") as ranks:
        for rank in range(3):
            ranks.start(rank, args, _rank_env(rank, 3, port, fault_timeout=3))
        ranks.wait()
    assert ranks.code(1) == -signal.SIGKILL, ranks.report()
    assert "rank 1 kills itself before step 5" in ranks.stderr(1)
    for survivor in (0, 2):
        assert ranks.code(survivor) == 1, ranks.report()
        seconds = ranks.exit_times[survivor] - ranks.exit_times[1]
        assert seconds < 10, f"rank {survivor} exited {seconds:.1f} s after rank 1 died"
        assert "[train_worker] error: [runtime] rank 1 failed: " in ranks.stderr(survivor), \
            ranks.report()


def test_the_launcher_exits_137_and_stops_every_rank_when_one_is_killed(tmp_path):
    out = tmp_path / "launcher_fault"
    out.mkdir()
    command = _launch_command("--nproc_per_node", "3", "--master_port", str(_free_port()),
                              "--timeout", str(_BOOTSTRAP_TIMEOUT), "--fault_timeout", "3",
                              "--grace_period", "2")
    start = time.monotonic()
    result = subprocess.run(command + _worker_args("mlp", "dp3_uneven", out, steps=200)
                            + _DIE_ARGS, capture_output=True, text=True, timeout=_RUN_TIMEOUT,
                            env=_clean_env())
    seconds = time.monotonic() - start
    assert "[rank 1] [train_worker] rank 1 kills itself before step 5" in result.stderr
    assert re.search(r"\[launch\] rank 1 \(pid \d+\) was killed by SIGKILL \(exit code 137\)",
                     result.stderr), result.stderr
    assert result.returncode == 128 + signal.SIGKILL
    assert seconds < 10, f"the launcher took {seconds:.1f} s"
    assert _processes_mentioning(str(out)) == []


# ---- bootstrap failures ------------------------------------------------------------------------


def test_a_rank_with_another_world_size_is_refused_by_the_master(tmp_path):
    port = _free_port()
    with _Ranks(tmp_path / "logs") as ranks:
        for rank, world_size in ((0, 2), (1, 3)):
            ranks.start(rank, _worker_args("mlp", "dp2", tmp_path),
                        _rank_env(rank, world_size, port))
        ranks.wait()
    reason = (re.escape("[ucx] every rank must have the master's WORLD_SIZE 2. However, rank 1 on ")
              + r"\S+" + re.escape(" has WORLD_SIZE 3."))
    assert ranks.code(0) == 1 and ranks.code(1) == 1, ranks.report()
    assert re.search(r"\[train_worker\] error: " + reason, ranks.stderr(0)), ranks.report()
    assert re.search(re.escape(f"[ucx] rank 1 was refused by the master 127.0.0.1:{port}: ")
                     + reason, ranks.stderr(1)), ranks.report()


def test_the_master_fails_when_its_port_is_taken(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with _Ranks(tmp_path / "logs") as ranks:
            ranks.start(0, _worker_args("mlp", "dp2", tmp_path), _rank_env(0, 2, port))
            ranks.wait(timeout=20)
    assert ranks.code(0) == 1, ranks.report()
    # After "However," comes UCX's own status text ("Device is busy" in UCX 1.13), then ours.
    must_listen = (f"[train_worker] error: [ucx] rank 0 must listen on 127.0.0.1:{port} "
                   "(MASTER_ADDR:MASTER_PORT). However, ")
    assert re.search(re.escape(must_listen) + r".*"
                     + re.escape("the port is taken: pick another MASTER_PORT"),
                     ranks.stderr(0)), ranks.report()


def test_a_rank_without_the_job_secret_is_refused_and_never_joins(tmp_path):
    port = _free_port()
    with _Ranks(tmp_path / "logs") as ranks:
        for rank, secret in ((0, "a" * 32), (1, "b" * 32)):
            ranks.start(rank, _worker_args("mlp", "dp2", tmp_path),
                        _rank_env(rank, 2, port, secret=secret, bootstrap_timeout=3))
        ranks.wait()
    assert ranks.code(0) == 1 and ranks.code(1) == 1, ranks.report()
    assert (f"[train_worker] error: [ucx] rank 1 was refused by the master 127.0.0.1:{port}: the "
            "job secret does not match (OFL_JOB_SECRET)") in ranks.stderr(1), ranks.report()
    master = ranks.stderr(0)
    assert re.search(r"\[ucx\] refused a connection from \S+ claiming rank 1: it did not present "
                     r"the job secret \(OFL_JOB_SECRET\)", master), ranks.report()
    assert (f"[train_worker] error: [ucx] every rank must join the master 127.0.0.1:{port} within "
            "3 s (OFL_BOOTSTRAP_TIMEOUT). However, ranks [1] of 2 never joined.") in master, \
        ranks.report()


def test_a_rank_that_cannot_reach_the_master_gives_up_after_the_bootstrap_timeout(tmp_path):
    port = _free_port()  # nobody listens there
    with _Ranks(tmp_path / "logs") as ranks:
        start = time.monotonic()
        ranks.start(1, _worker_args("mlp", "dp2", tmp_path),
                    _rank_env(1, 2, port, bootstrap_timeout=2))
        ranks.wait(timeout=20)
    seconds = ranks.exit_times[1] - start
    assert ranks.code(1) == 1, ranks.report()
    assert (f"[train_worker] error: [ucx] rank 1 must reach the master 127.0.0.1:{port} within 2 s "
            "(OFL_BOOTSTRAP_TIMEOUT). However, it could not connect, or the master did not "
            "answer.") in ranks.stderr(1), \
        ranks.report()
    assert 1.8 <= seconds < 10, f"rank 1 gave up after {seconds:.1f} s"


# ---- two hosts: network namespaces joined by a veth pair ---------------------------------------


@pytest.mark.parametrize("model, layout, nproc_per_node", [("mlp", "dp2", 1),
                                                           ("gpt", "dp2_tp2", 2)])
def test_two_hosts_over_tcp_train_bit_identically_to_one_process(tmp_path, two_hosts, model,
                                                                  layout, nproc_per_node):
    expected = _reference_pieces(tmp_path, model, layout)
    out = tmp_path / "ranks"
    out.mkdir()
    job_secret = secrets.token_hex(16)
    launchers = []
    try:
        for node_rank, host in enumerate(two_hosts):
            command = ["ip", "netns", "exec", host.namespace] + _launch_command(
                "--nnodes", "2", "--node_rank", str(node_rank), "--nproc_per_node",
                str(nproc_per_node), "--master_addr", two_hosts[0].address, "--secret",
                job_secret, "--timeout", str(_BOOTSTRAP_TIMEOUT), "--verbose")
            # TCP only: shared memory would cross the "hosts", which share one kernel.
            env = _clean_env(UCX_TLS="tcp,self", UCX_NET_DEVICES=host.device)
            with open(tmp_path / f"host{node_rank}.log", "wb") as log:
                launchers.append(subprocess.Popen(command + _worker_args(model, layout, out),
                                                  env=env, stdout=log, stderr=subprocess.STDOUT))
        for launcher in launchers:
            launcher.wait(timeout=_RUN_TIMEOUT)
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                launcher.kill()  # its ranks die with it (PR_SET_PDEATHSIG)
                launcher.wait()
    logs = "\n".join(f"--- host {i} (exit code {launcher.returncode}):\n"
                     + (tmp_path / f"host{i}.log").read_text(errors="replace")
                     for i, launcher in enumerate(launchers))
    assert [launcher.returncode for launcher in launchers] == [0, 0], logs
    assert f"listening on {two_hosts[0].address}:" in logs
    _assert_same_pieces(_rank_pieces(out, 2 * nproc_per_node), expected)
