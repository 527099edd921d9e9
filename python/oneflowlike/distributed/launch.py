"""Starts the ranks of one node of a job, torchrun-style.

    python -m oneflowlike.distributed.launch [flags] SCRIPT [script args...]
    scripts/oneflowlike-launch [flags] SCRIPT [script args...]      (the same, from .venv)

Every argument after SCRIPT goes to the script unchanged, even ones that look like flags.
Each local rank i runs ``python SCRIPT args`` (or ``SCRIPT args`` with --no_python) with the
variables of ``oneflowlike.distributed.env`` set: RANK = node_rank * nproc_per_node + i,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT, OFL_JOB_SECRET,
OFL_BOOTSTRAP_TIMEOUT, OFL_FAULT_TIMEOUT, plus OMP_NUM_THREADS (cores / nproc_per_node) and
PYTHONUNBUFFERED=1 unless already set. Their output comes back line by line as
``[rank N] ...``.

Two nodes, two ranks each (the same secret on both; any 32 hex characters):

    node0$ python -m oneflowlike.distributed.launch --nnodes 2 --node_rank 0 \\
               --nproc_per_node 2 --master_addr node0 --secret $S train.py --lr 0.1
    node1$ python -m oneflowlike.distributed.launch --nnodes 2 --node_rank 1 \\
               --nproc_per_node 2 --master_addr node0 --secret $S train.py --lr 0.1

Under Slurm (one launcher per node: ``srun --ntasks-per-node=1``), nnodes, node_rank and
master_addr come from SLURM_NNODES, SLURM_NODEID and the first host of the node list.

When a rank fails, the launcher stops the others (SIGTERM, then SIGKILL after the grace
period) and exits with that rank's exit code (128 + signal for a signal). SIGINT or SIGTERM to
the launcher stops every rank the same way and exits 130 or 143. See Note [Process groups].

With --max_restarts N (torchrun's flag) a failed job is started again, every rank of this node,
up to N times: each attempt's ranks see OFL_RESTART_COUNT (0 for the first) and
OFL_MAX_RESTARTS, and a script continues from its last checkpoint (the examples' --save DIR
--save-every K --resume auto). Note [Restarts]: the job restarts as a whole, since a rank's
state is only consistent with its peers' at a checkpoint; on several nodes each node's
launcher restarts its ranks (the others' ranks fail too, naming the rank that died, so every
launcher sees the failure) and they meet again at MASTER_ADDR:MASTER_PORT, the same port: the
ranks' UCX listeners take it though the last attempt's connections may hold it in TIME_WAIT
(UCX_TCP_CM_REUSEADDR=y, which the launcher sets unless given; an address still listened on
stays refused). A node that learns of the failure later than the others' bootstrap timeout
(--timeout) costs them an attempt (each waits, fails, restarts on the same port), so give every
node the same --max_restarts, and a timeout longer than a step. One node picks a fresh free port
for each attempt anyway. A signal to the launcher stops the job without a restart.
"""

import argparse
import ctypes
import dataclasses
import os
import secrets
import shutil
import random
import signal
import socket
import subprocess
import sys
import threading
import time

from oneflowlike.distributed.env import slurm_master_addr

_PROG = "python -m oneflowlike.distributed.launch"
_POLL_SECONDS = 0.05
_PR_SET_PDEATHSIG = 1

# Note [Process groups]
# Each rank starts in its own session (so its own process group). A terminal's Ctrl-C then
# reaches only the launcher, which stops the ranks itself: every rank sees one SIGTERM, the
# launcher reports once and exits 130, instead of racing the ranks' own KeyboardInterrupt
# exits. Signals go to a rank's whole group, so processes a rank started stop too. If the
# launcher dies without cleaning up (SIGKILL), Linux's PR_SET_PDEATHSIG kills each rank.


class LaunchError(ValueError):
    """A bad flag or environment: reported as a usage error (exit code 2)."""


@dataclasses.dataclass
class LaunchConfig:
    """What one launcher starts; built by ``parse_config``."""

    nproc_per_node: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    secret: str
    bootstrap_timeout: float  # seconds
    fault_timeout: float  # seconds
    grace_period: float  # seconds between SIGTERM and SIGKILL when stopping ranks
    logdir: str  # or None
    no_python: bool
    verbose: bool  # OFL_VERBOSE=1 for the ranks (Note [Logging] in oneflowlike/common/logging.h)
    memory_per_rank: int  # bytes, 0: no limit (OFL_MEMORY_PER_RANK, Note [Memory limit])
    max_restarts: int  # Note [Restarts]
    free_port: bool  # master_port was picked free here: pick again for a restart
    script: str
    script_args: list
    from_slurm: bool  # nnodes, node_rank (and maybe master_addr) came from Slurm


# (option strings, add_argument keywords). None defaults mark "not given" so Slurm can fill in.
_FLAGS = [
    (("--nproc_per_node", "--nproc-per-node"),
     dict(type=int, default=1, metavar="N", help="ranks on this node (default 1)")),
    (("--nnodes",),
     dict(type=int, default=None, metavar="N", help="nodes in the job (default 1)")),
    (("--node_rank", "--node-rank"),
     dict(type=int, default=None, metavar="R", help="this node's index (default 0)")),
    (("--master_addr", "--master-addr"),
     dict(default=None, metavar="ADDR", help="host of rank 0 (default 127.0.0.1)")),
    (("--master_port", "--master-port"),
     dict(type=int, default=None, metavar="PORT",
          help="rank 0's port (default: a free port on one node, 29500 on several)")),
    (("--logdir", "--log_dir", "--log-dir"),
     dict(default=None, metavar="DIR", help="also write each rank's output to DIR/rank_<N>.log")),
    (("--no_python", "--no-python"),
     dict(action="store_true", help="run SCRIPT as an executable, not with this python")),
    (("--secret",),
     dict(default=None, metavar="S", help="job secret, the same on every node (default: "
          "OFL_JOB_SECRET, or a fresh random one when --nnodes is 1). Other users can read "
          "command lines, so prefer exporting OFL_JOB_SECRET")),
    (("--timeout",),
     dict(type=float, default=60.0, metavar="SECONDS",
          help="bootstrap timeout, as OFL_BOOTSTRAP_TIMEOUT (default 60)")),
    (("--fault_timeout", "--fault-timeout"),
     dict(type=float, default=10.0, metavar="SECONDS",
          help="fault-detection timeout, as OFL_FAULT_TIMEOUT (default 10)")),
    (("--verbose",),
     dict(action="store_true", help="show the ranks' INFO log lines (bootstrap, runtime), as "
          "OFL_VERBOSE=1; by default only warnings and errors")),
    (("--memory_per_rank", "--memory-per-rank"),
     dict(default=None, metavar="SIZE",
          help="every rank's memory limit (e.g. 6GiB; 0: none): graphs whose plan does not fit "
               "refuse to compile on every rank, saying what would fit (OFL_MEMORY_PER_RANK)")),
    (("--max_restarts", "--max-restarts"),
     dict(type=int, default=0, metavar="N",
          help="start the whole job again after a failure, up to N times (default 0); the "
               "ranks see OFL_RESTART_COUNT and resume from their checkpoints")),
    (("--grace_period", "--grace-period"),
     dict(type=float, default=5.0, metavar="SECONDS",
          help="wait this long after SIGTERM before SIGKILL when stopping ranks (default 5)")),
]


def make_parser():
    parser = argparse.ArgumentParser(
        prog=_PROG, allow_abbrev=False, usage=f"{_PROG} [flags] SCRIPT [script args...]",
        description="Starts nproc_per_node ranks of a oneflowlike job on this node. Every "
                    "argument after SCRIPT goes to the script unchanged.")
    for names, keywords in _FLAGS:
        parser.add_argument(*names, **keywords)
    parser.add_argument("script", metavar="SCRIPT", help="the training script (or executable)")
    return parser


def split_argv(argv):
    """Splits at SCRIPT, the first word that is not a launcher flag or a flag's value.

    The script's arguments are cut off here and never parsed: argparse would drop a ``--``
    meant for the script.
    """
    takes_value = {name for names, keywords in _FLAGS if keywords.get("action") != "store_true"
                   for name in names}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[:i + 2], argv[i + 2:]
        if not word.startswith("-") or word == "-":
            return argv[:i + 1], argv[i + 1:]
        i += 2 if word in takes_value else 1
    return argv, []


def parse_config(argv, environ=os.environ):
    """Parses the launcher's flags; raises LaunchError for a bad value, SystemExit from argparse."""
    parser = make_parser()
    head, script_args = split_argv(list(argv))
    args = parser.parse_args(head)
    args.script_args = script_args

    from_slurm = "SLURM_PROCID" in environ and args.nnodes is None and args.node_rank is None
    if from_slurm:
        nnodes = _slurm_int(environ, "SLURM_NNODES", minimum=1)
        node_rank = _slurm_int(environ, "SLURM_NODEID", minimum=0)
        if args.master_addr is None:
            try:
                args.master_addr = slurm_master_addr(environ)
            except ValueError as error:
                raise LaunchError(str(error)) from None
    else:
        nnodes = 1 if args.nnodes is None else args.nnodes
        node_rank = 0 if args.node_rank is None else args.node_rank
    master_addr = "127.0.0.1" if args.master_addr is None else args.master_addr

    if args.nproc_per_node < 1:
        raise LaunchError(f"--nproc_per_node must be at least 1. However, got "
                          f"{args.nproc_per_node}.")
    if nnodes < 1:
        raise LaunchError(f"--nnodes must be at least 1. However, got {nnodes}.")
    if not 0 <= node_rank < nnodes:
        raise LaunchError(f"--node_rank must be in [0, --nnodes) = [0, {nnodes}). However, got "
                          f"--node_rank {node_rank}.")
    free_port = args.master_port is None and nnodes == 1
    if args.master_port is None:
        # One node: any free port (a port a finished run used may still be in TIME_WAIT, which
        # UCX's listener cannot reuse). Several nodes must agree on one: 29500 as torchrun.
        args.master_port = _free_port() if nnodes == 1 else 29500
    if not 1 <= args.master_port <= 65535:
        raise LaunchError(f"--master_port must be in [1, 65535]. However, got {args.master_port}.")
    if args.max_restarts < 0:
        raise LaunchError(f"--max_restarts must be at least 0. However, got {args.max_restarts}.")
    if not master_addr.strip():
        raise LaunchError(f"--master_addr must name a host. However, got {master_addr!r}.")
    for flag, seconds in (("--timeout", args.timeout), ("--fault_timeout", args.fault_timeout),
                          ("--grace_period", args.grace_period)):
        if not 0 < seconds < float("inf"):
            raise LaunchError(f"{flag} must be a positive number of seconds. However, got "
                              f"{seconds:g}.")

    if args.no_python:
        if shutil.which(args.script) is None:
            hint = ""
            if os.path.isfile(args.script) and not os.access(args.script, os.X_OK):
                hint = f" HINT: it is not executable; chmod +x {args.script}."
            elif os.path.isfile(args.script) and os.sep not in args.script:
                hint = f" HINT: a file in this directory is written ./{args.script}."
            raise LaunchError(f"SCRIPT must be an executable file or a command on PATH with "
                              f"--no_python. However, got {args.script!r}.{hint}")
    elif not os.path.isfile(args.script):
        raise LaunchError(f"SCRIPT must be an existing Python file. However, got {args.script!r} "
                          f"(no such file from {os.getcwd()}).")

    from oneflowlike.framework.sizes import parse_limit

    try:  # 0: no limit, as OFL_MEMORY_PER_RANK=0 and set_memory_limit(0)
        memory_per_rank = parse_limit(args.memory_per_rank, "--memory-per-rank")
    except ValueError as error:
        raise LaunchError(str(error)) from None

    secret = args.secret if args.secret is not None else environ.get("OFL_JOB_SECRET")
    if secret is None and nnodes == 1:
        secret = secrets.token_hex(16)
    if secret is None:
        raise LaunchError(
            f"--secret (or OFL_JOB_SECRET) must be given when --nnodes > 1, the same on every "
            f"node. However, got --nnodes {nnodes} and neither. HINT: make one with "
            "`python3 -c 'import secrets; print(secrets.token_hex(16))'` and pass it to every "
            "node's launcher.")
    if not secret.strip():
        raise LaunchError("--secret (or OFL_JOB_SECRET) must not be empty. However, got ''.")

    return LaunchConfig(
        nproc_per_node=args.nproc_per_node, nnodes=nnodes, node_rank=node_rank,
        master_addr=master_addr.strip(), master_port=args.master_port, secret=secret,
        bootstrap_timeout=args.timeout, fault_timeout=args.fault_timeout,
        grace_period=args.grace_period, logdir=args.logdir, no_python=args.no_python,
        verbose=args.verbose, memory_per_rank=memory_per_rank, max_restarts=args.max_restarts,
        free_port=free_port, script=args.script, script_args=args.script_args,
        from_slurm=from_slurm)


def _slurm_int(environ, name, minimum):
    value = environ.get(name)
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum:
        raise LaunchError(f"{name} must be an integer >= {minimum} when SLURM_PROCID is set and "
                          f"neither --nnodes nor --node_rank is given. However, got {value!r}. "
                          "HINT: pass --nnodes and --node_rank to skip Slurm's variables.")
    return number


def worker_env(config, local_rank, environ=os.environ, restart=0):
    """The environment of local rank ``local_rank`` in restart ``restart`` (0: the first
    attempt): the launcher's plus the env contract."""
    env = dict(environ)
    env.update({
        "RANK": str(config.node_rank * config.nproc_per_node + local_rank),
        "WORLD_SIZE": str(config.nnodes * config.nproc_per_node),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(config.nproc_per_node),
        "NODE_RANK": str(config.node_rank),
        "MASTER_ADDR": config.master_addr,
        "MASTER_PORT": str(config.master_port),
        "OFL_JOB_SECRET": config.secret,
        "OFL_BOOTSTRAP_TIMEOUT": f"{config.bootstrap_timeout:g}",
        "OFL_FAULT_TIMEOUT": f"{config.fault_timeout:g}",
        "OFL_RESTART_COUNT": str(restart),
        "OFL_MAX_RESTARTS": str(config.max_restarts),
    })
    if config.verbose:
        env["OFL_VERBOSE"] = "1"
    if config.memory_per_rank:
        env["OFL_MEMORY_PER_RANK"] = str(config.memory_per_rank)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // config.nproc_per_node)))
    # Rank 0 listens on MASTER_PORT again after a restart (Note [Restarts]).
    env.setdefault("UCX_TCP_CM_REUSEADDR", "y")
    # A rank stopped by SIGTERM would lose block-buffered output, often the part that explains.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def worker_command(config):
    prefix = [] if config.no_python else [sys.executable]
    return prefix + [config.script] + list(config.script_args)


class _Output:
    """Writes whole lines to the launcher's stdout/stderr and the rank logs, one at a time."""

    def __init__(self):
        self._lock = threading.Lock()

    def line(self, stream, data, log=None, raw=b""):
        with self._lock:
            if log is not None:
                try:
                    log.write(raw)
                    log.flush()
                except (OSError, ValueError):
                    pass
            try:
                binary = getattr(stream, "buffer", None)
                if binary is not None:
                    binary.write(data)
                    binary.flush()
                else:
                    stream.write(data.decode(errors="replace"))
                    stream.flush()
            except (OSError, ValueError):
                pass  # a closed or broken stdout must not stop the ranks' pipes from draining

    def message(self, text):
        self.line(sys.stderr, f"[launch] {text}\n".encode())

    def close_log(self, log):
        with self._lock:  # a pump may still be writing to it
            log.close()


class _Rank:
    def __init__(self, rank, process, log):
        self.rank = rank
        self.process = process
        self.log = log
        self.pumps = []

    def signal(self, signal_number):
        if self.process.returncode is not None:
            return
        try:
            os.killpg(self.process.pid, signal_number)  # the rank leads its group
        except ProcessLookupError:
            pass
        except PermissionError:
            self.process.send_signal(signal_number)

    def start_pumps(self, output):
        for pipe, stream in ((self.process.stdout, sys.stdout), (self.process.stderr, sys.stderr)):
            thread = threading.Thread(target=_pump, args=(pipe, stream, self, output),
                                      name=f"rank {self.rank} output", daemon=True)
            thread.start()
            self.pumps.append(thread)


def _pump(pipe, stream, rank, output):
    prefix = f"[rank {rank.rank}] ".encode()
    with pipe:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            output.line(stream, prefix + line, rank.log, line)


class _Signals:
    """Counts SIGINT/SIGTERM to the launcher; the supervising loop acts on them."""

    def __init__(self):
        self.first = None
        self.count = 0
        self._previous = {}

    def install(self):
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signal_number] = signal.signal(signal_number, self._handle)
            except ValueError:
                pass  # not the main thread: the caller owns signals

    def restore(self):
        for signal_number, handler in self._previous.items():
            signal.signal(signal_number, handler)

    def _handle(self, signal_number, frame):
        self.first = self.first or signal_number
        self.count += 1


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _child_setup(launcher_pid, prctl):
    def setup():  # runs in the child between fork and exec; see Note [Process groups]
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
            os._exit(1)
    return setup


def _describe_exit(code):
    if code >= 0:
        return f"failed with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name} (exit code {128 - code})"


def _stop(ranks, grace_period, signals, output):
    """SIGTERM, then SIGKILL for ranks still running after the grace period or a 2nd signal."""
    for rank in ranks:
        rank.signal(signal.SIGTERM)
    signals_before = signals.count
    deadline = time.monotonic() + grace_period
    while time.monotonic() < deadline and signals.count == signals_before:
        if all(rank.process.poll() is not None for rank in ranks):
            return
        time.sleep(_POLL_SECONDS)
    stragglers = [rank for rank in ranks if rank.process.poll() is None]
    if not stragglers:
        return
    why = ("got a second signal" if signals.count != signals_before
           else f"still running {grace_period:g} s after SIGTERM")
    output.message(f"rank{'s' if len(stragglers) > 1 else ''} "
                   f"{', '.join(str(rank.rank) for rank in stragglers)} {why}; sending SIGKILL")
    for rank in stragglers:
        rank.signal(signal.SIGKILL)
    for rank in stragglers:
        try:
            rank.process.wait(timeout=grace_period)
        except subprocess.TimeoutExpired:
            output.message(f"rank {rank.rank} (pid {rank.process.pid}) did not exit after "
                           "SIGKILL; leaving it")


def _supervise(ranks, config, signals, output):
    """Waits for every rank; returns the launcher's exit code."""
    running = list(ranks)
    while running:
        if signals.first is not None:
            name = signal.Signals(signals.first).name
            output.message(f"got {name}; stopping all ranks")
            _stop(running, config.grace_period, signals, output)
            return 128 + signals.first
        exited = [(rank, rank.process.poll()) for rank in running]
        exited = [(rank, code) for rank, code in exited if code is not None]
        for rank, _ in exited:
            running.remove(rank)
        failed = [(rank, code) for rank, code in exited if code != 0]
        # Several ranks may have ended since the last look: a rank killed by a signal is the
        # likelier cause of the others' errors (they report its death), so it is named first.
        failed.sort(key=lambda item: (item[1] > 0, item[0].rank))
        if failed:
            rank, code = failed[0]
            text = f"rank {rank.rank} (pid {rank.process.pid}) {_describe_exit(code)}"
            if running:
                text += "; stopping the other ranks"
            if config.logdir is not None:
                text += f". Its output is in {_log_path(config.logdir, rank.rank)}"
            output.message(text)
            _stop(running, config.grace_period, signals, output)
            return code if code > 0 else 128 - code
        time.sleep(_POLL_SECONDS)
    return 0


def _free_port():
    """A port nothing is bound to, for MASTER_PORT, chosen below the kernel's ephemeral range: a
    port from that range can become the local port of some outgoing connection between this
    check and rank 0's listener binding it ("Address already in use", seen once in CI)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    pick = random.SystemRandom()
    for _ in range(64):
        port = pick.randrange(10000, max(10001, first_ephemeral))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # everything below the range is taken: any free port
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _log_path(logdir, rank):
    return os.path.join(logdir, f"rank_{rank}.log")


def run(config):
    """Starts the ranks of ``config``, relays their output and returns the exit code; a failed
    attempt starts again up to config.max_restarts times (Note [Restarts])."""
    output = _Output()
    signals = _Signals()
    signals.install()
    prctl = _load_prctl()
    try:
        restart = 0
        while True:
            code = _attempt(config, restart, output, signals, prctl)
            if code == 0 or signals.first is not None:
                return code
            if restart == config.max_restarts:
                if config.max_restarts:
                    output.message(f"the job failed after {restart} restart"
                                   f"{'s' if restart > 1 else ''} (--max_restarts "
                                   f"{config.max_restarts}); exiting with code {code}")
                return code
            restart += 1
            # Several nodes meet at the one port they were given (Note [Restarts]).
            port = _free_port() if config.free_port else config.master_port
            config = dataclasses.replace(config, master_port=port)
            output.message(f"restarting the job: restart {restart} of {config.max_restarts} "
                           f"(OFL_RESTART_COUNT={restart}, MASTER_PORT={port})")
    finally:
        signals.restore()


def _attempt(config, restart, output, signals, prctl):
    """One start of this node's ranks; returns the exit code."""
    ranks = []
    try:
        # Every rank is started before any pump thread exists, so forking with a
        # preexec_fn is safe.
        for local_rank in range(config.nproc_per_node):
            rank = config.node_rank * config.nproc_per_node + local_rank
            log = None
            try:
                if config.logdir is not None:  # a restart's output follows the last attempt's
                    log = open(_log_path(config.logdir, rank), "ab" if restart else "wb")
                process = subprocess.Popen(
                    worker_command(config), env=worker_env(config, local_rank, restart=restart),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                    preexec_fn=_child_setup(os.getpid(), prctl))
            except OSError as error:
                if log is not None:
                    log.close()
                output.message(f"could not start rank {rank} ({' '.join(worker_command(config))}):"
                               f" {error}")
                _stop(ranks, config.grace_period, signals, output)
                return 1
            ranks.append(_Rank(rank, process, log))
        for rank in ranks:
            rank.start_pumps(output)
        return _supervise(ranks, config, signals, output)
    finally:
        for rank in ranks:
            if rank.process.poll() is None:  # an exception escaped: leave no rank behind
                rank.signal(signal.SIGKILL)
                rank.process.wait()
        for rank in ranks:
            for thread in rank.pumps:
                # A grandchild outside the rank's group may hold the pipe open; do not wait on it.
                thread.join(timeout=config.grace_period)
            if rank.log is not None:
                output.close_log(rank.log)


def main(argv=None):
    parser = make_parser()
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
        if config.logdir is not None:
            try:
                os.makedirs(config.logdir, exist_ok=True)
            except OSError as error:
                raise LaunchError(f"--logdir must be a directory that can be created. However, "
                                  f"got {config.logdir!r}: {error.strerror}.") from None
    except LaunchError as error:
        parser.error(str(error))
    if config.from_slurm:
        print(f"[launch] Slurm: node {config.node_rank} of {config.nnodes}, master "
              f"{config.master_addr}:{config.master_port}", file=sys.stderr, flush=True)
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
