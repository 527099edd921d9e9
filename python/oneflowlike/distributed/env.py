"""The environment contract between the launcher and each rank, and Slurm's variables.

A rank started by ``python -m oneflowlike.distributed.launch`` finds these variables:

=======================  =====================================================
RANK                     global rank, in [0, WORLD_SIZE)
WORLD_SIZE               number of ranks in the job (nnodes * nproc_per_node)
LOCAL_RANK               rank on this node, in [0, LOCAL_WORLD_SIZE)
LOCAL_WORLD_SIZE         ranks on this node (nproc_per_node)
NODE_RANK                this node's index, in [0, nnodes) (default RANK // LOCAL_WORLD_SIZE)
MASTER_ADDR              host of rank 0's bootstrap server
MASTER_PORT              its port (default 29500)
OFL_JOB_SECRET           shared secret; peers that do not know it are refused
OFL_BOOTSTRAP_TIMEOUT    seconds to wait for every rank to join (default 60)
OFL_FAULT_TIMEOUT        seconds without a heartbeat before a peer is declared dead (default 10)
=======================  =====================================================

When RANK is absent but SLURM_PROCID is set (ranks started directly by ``srun``), the same
values come from Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, the step's
tasks per node, and the first host of the node list for MASTER_ADDR. MASTER_ADDR, MASTER_PORT,
OFL_JOB_SECRET and the timeouts may still be exported by hand and then take precedence.
"""

import itertools
import math
import os
import re
import types

DEFAULT_MASTER_PORT = 29500
DEFAULT_BOOTSTRAP_TIMEOUT = 60.0
DEFAULT_FAULT_TIMEOUT = 10.0

_TAG = "[launch_env]"
_HINT = ("HINT: start the script with `python -m oneflowlike.distributed.launch "
         "--nproc_per_node N script.py` or with `srun`.")
# Slurm sets several node lists; the step's list comes first because srun places rank 0 on
# the first node of its step.
_NODELIST_VARIABLES = ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
_TASKS_PER_NODE_VARIABLES = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def launch_env(environ=os.environ) -> dict:
    """Reads this rank's place in the job from the environment.

    Returns a dict with keys rank, world_size, local_rank, local_world_size, node_rank (int),
    master_addr (str), master_port (int), secret (str, or None for a one-rank job without
    OFL_JOB_SECRET), bootstrap_timeout and fault_timeout (float seconds).

    The launcher's variables are used as a set when RANK is present; otherwise Slurm's when
    SLURM_PROCID is present. Raises ValueError naming the variable when one is missing or
    malformed.
    """
    if "RANK" in environ:
        rank = _int_variable(environ, "RANK", minimum=0)
        world_size = _int_variable(environ, "WORLD_SIZE", minimum=1, needed_by="RANK")
        local_rank = _int_variable(environ, "LOCAL_RANK", minimum=0, needed_by="RANK")
        local_world_size = _int_variable(environ, "LOCAL_WORLD_SIZE", minimum=1,
                                         needed_by="RANK")
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
        if "NODE_RANK" in environ:
            node_rank = _int_variable(environ, "NODE_RANK", minimum=0)
        else:
            node_rank = rank // local_world_size
        master_addr = _string_variable(environ, "MASTER_ADDR", needed_by="RANK")
    elif "SLURM_PROCID" in environ:
        rank = _int_variable(environ, "SLURM_PROCID", minimum=0)
        world_size = _int_variable(environ, "SLURM_NTASKS", minimum=1, needed_by="SLURM_PROCID")
        local_rank = _int_variable(environ, "SLURM_LOCALID", minimum=0, needed_by="SLURM_PROCID")
        node_rank = _int_variable(environ, "SLURM_NODEID", minimum=0, needed_by="SLURM_PROCID")
        local_world_size = slurm_tasks_on_node(environ, node_rank)
        names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "tasks on this node")
        if "MASTER_ADDR" in environ:
            master_addr = _string_variable(environ, "MASTER_ADDR")
        else:
            master_addr = slurm_master_addr(environ)
    else:
        raise ValueError(f"{_TAG} RANK (or SLURM_PROCID, for ranks started by srun) must be "
                         f"set. However, neither is in the environment. {_HINT}")

    for index, size, index_name, size_name in ((rank, world_size, names[0], names[1]),
                                               (local_rank, local_world_size, names[2], names[3])):
        if index >= size:
            raise ValueError(f"{_TAG} {index_name} must be less than {size_name}. However, got "
                             f"{index_name}={index} and {size_name}={size}.")
    if local_world_size > world_size:
        raise ValueError(f"{_TAG} {names[3]} must be at most {names[1]}. However, got "
                         f"{names[3]}={local_world_size} and {names[1]}={world_size}.")

    if "MASTER_PORT" in environ:
        master_port = _int_variable(environ, "MASTER_PORT", minimum=1)
        if master_port > 65535:
            raise ValueError(f"{_TAG} MASTER_PORT must be in [1, 65535]. However, got "
                             f"{environ['MASTER_PORT']!r}.")
    else:
        master_port = DEFAULT_MASTER_PORT

    secret = environ.get("OFL_JOB_SECRET")
    if not secret:
        if world_size > 1:
            raise ValueError(
                f"{_TAG} OFL_JOB_SECRET must be set when WORLD_SIZE > 1, to the same value on "
                f"every rank. However, it is {'empty' if secret == '' else 'missing'} "
                f"(world size {world_size}). HINT: the launcher sets it; under srun, "
                "`export OFL_JOB_SECRET=$(python3 -c 'import secrets; "
                "print(secrets.token_hex(16))')` before srun.")
        secret = None

    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "local_world_size": local_world_size,
        "node_rank": node_rank,
        "master_addr": master_addr,
        "master_port": master_port,
        "secret": secret,
        "bootstrap_timeout": _seconds_variable(environ, "OFL_BOOTSTRAP_TIMEOUT",
                                               DEFAULT_BOOTSTRAP_TIMEOUT),
        "fault_timeout": _seconds_variable(environ, "OFL_FAULT_TIMEOUT", DEFAULT_FAULT_TIMEOUT),
    }


# The environment as bytes: os.environ's own dict on POSIX CPython (a lookup there took 0.04 us
# against 0.8 through os.environb's Mapping methods, and a collective asks for its rank about
# ten times), else os.environb. Both see every change made through os.environ. (POSIX only, as
# the project is: Windows has no bytes environment.)
_RAW = getattr(os.environ, "_data", None)
if not (os.supports_bytes_environ and isinstance(_RAW, dict)):
    _RAW = os.environb


class _Recording(dict):
    """os.environ, noting each name read from it with its value then (as bytes)."""

    def __init__(self):
        super().__init__()
        self.read = {}

    def _note(self, name):
        key = name.encode()
        self.read.setdefault(key, _RAW.get(key))

    def __contains__(self, name):
        self._note(name)
        return name in os.environ

    def __getitem__(self, name):
        self._note(name)
        return os.environ[name]

    def get(self, name, default=None):
        self._note(name)
        return os.environ.get(name, default)


_parsed = None  # (names read, as bytes; their values then; launch_env's result, read-only)


def process_is_launched() -> bool:
    """Whether this process has a place in a job to read (RANK or SLURM_PROCID is set)."""
    return b"RANK" in _RAW or b"SLURM_PROCID" in _RAW


def process_launch_env() -> dict:
    """launch_env() of this process's environment, parsed again only when a variable the last
    parse read has changed (compared as bytes, without decoding). flow.env's rank and
    world size are asked for several times per collective call, and parsing every time was 40%
    of a small all_reduce's Python time. The result depends on nothing but the variables the
    parse read, so it stays right when others change; a parse that raises is not kept. The
    mapping is shared, so it is read-only."""
    global _parsed
    if _parsed is not None:
        names, values, result = _parsed
        raw = _RAW
        if all(raw.get(n) == v for n, v in zip(names, values)):
            return result
    recording = _Recording()
    result = types.MappingProxyType(launch_env(recording))
    _parsed = (tuple(recording.read), tuple(recording.read.values()), result)
    return result


def expand_nodelist(nodelist: str, name: str = "SLURM_NODELIST") -> list:
    """Expands a Slurm host list: ``node[01-03,07],gpu5`` -> node01, node02, node03, node07, gpu5.

    Zero padding follows the lower bound (``[08-10]`` -> 08, 09, 10). Several bracket groups in
    one name expand to their product (``r[1-2]n[1-2]``). ``name`` labels error messages.
    """
    return list(_iterate_nodelist(nodelist, name))


def first_host(nodelist: str, name: str = "SLURM_NODELIST") -> str:
    """The first host of a Slurm host list, without expanding the rest."""
    return next(_iterate_nodelist(nodelist, name))


def slurm_master_addr(environ=os.environ) -> str:
    """The first host of the Slurm step's (or else the job's) node list."""
    for name in _NODELIST_VARIABLES:
        if environ.get(name):
            return first_host(environ[name], name)
    raise ValueError(f"[slurm] MASTER_ADDR or a Slurm node list ({', '.join(_NODELIST_VARIABLES)}) "
                     "must be set. However, none is in the environment.")


def slurm_tasks_on_node(environ, node_id: int) -> int:
    """Slurm's task count on node ``node_id``, from a list like ``2(x3),1`` (2, 2, 2, 1)."""
    for name in _TASKS_PER_NODE_VARIABLES:
        if environ.get(name):
            counts = expand_tasks_per_node(environ[name], name)
            if node_id >= len(counts):
                raise ValueError(f"[slurm] SLURM_NODEID must be less than the number of nodes in "
                                 f"{name}. However, got SLURM_NODEID={node_id} and "
                                 f"{name}={environ[name]!r}.")
            return counts[node_id]
    raise ValueError(f"[slurm] LOCAL_WORLD_SIZE needs the Slurm tasks per node "
                     f"({' or '.join(_TASKS_PER_NODE_VARIABLES)}). However, neither is set.")


def expand_tasks_per_node(value: str, name: str = "SLURM_TASKS_PER_NODE") -> list:
    counts = []
    for item in value.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match is None:
            raise ValueError(f"[slurm] {name} must look like '2(x3),1'. However, got {value!r}.")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _iterate_nodelist(nodelist, name):
    for pattern in _split_outside_brackets(nodelist, name):
        # "r[1-2]n[3]" -> pieces ["r", ["1", "2"], "n", ["3"]]; one host per combination.
        pieces = []
        for text, ranges in re.findall(r"([^\[\]]+)|\[([^\[\]]*)\]", pattern):
            pieces.append([text] if text else _expand_ranges(ranges, nodelist, name))
        for combination in itertools.product(*pieces):
            yield "".join(combination)


def _split_outside_brackets(nodelist, name):
    def malformed(why):
        return ValueError(f"[slurm] {name} must be a host list like 'node[01-04,07],other'. "
                          f"However, got {nodelist!r} ({why}).")

    items, depth, start = [], 0, 0
    for i, character in enumerate(nodelist):
        if character == "[":
            depth += 1
            if depth > 1:
                raise malformed("nested '['")
        elif character == "]":
            depth -= 1
            if depth < 0:
                raise malformed("']' without '['")
        elif character == "," and depth == 0:
            items.append(nodelist[start:i])
            start = i + 1
    if depth != 0:
        raise malformed("'[' without ']'")
    items.append(nodelist[start:])
    for item in items:
        if not item.strip() or item.startswith("["):
            raise malformed("empty host name")
    return [item.strip() for item in items]


def _expand_ranges(ranges, nodelist, name):
    numbers = []
    for part in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None or (match.group(2) is not None
                             and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"[slurm] {name} ranges must look like '01-04' or '7' with low <= "
                             f"high. However, got '[{ranges}]' in {nodelist!r}.")
        low_text = match.group(1)
        high = int(match.group(2) if match.group(2) is not None else low_text)
        numbers.extend(str(n).zfill(len(low_text)) for n in range(int(low_text), high + 1))
    return numbers


def _missing(name, needed_by):
    why = f" when {needed_by} is" if needed_by else ""
    return ValueError(f"{_TAG} {name} must be set{why}. However, it is not in the environment. "
                      f"{_HINT}")


def _string_variable(environ, name, needed_by=None):
    value = environ.get(name)
    if value is None:
        raise _missing(name, needed_by)
    if not value.strip():
        raise ValueError(f"{_TAG} {name} must not be empty. However, got {value!r}.")
    return value.strip()


def _int_variable(environ, name, minimum, needed_by=None):
    value = environ.get(name)
    if value is None:
        raise _missing(name, needed_by)
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"{_TAG} {name} must be an integer. However, got {value!r}.") from None
    if number < minimum:
        raise ValueError(f"{_TAG} {name} must be at least {minimum}. However, got {value!r}.")
    return number


def _seconds_variable(environ, name, default):
    value = environ.get(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{_TAG} {name} must be a positive number of seconds. However, got "
                         f"{value!r}.")
    return seconds
