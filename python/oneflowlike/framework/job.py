"""This process's part of a job: its link to the other ranks and the runtimes it runs.

Every compiled graph (each nn.Graph, each eager op on global tensors) runs on an actor runtime
of its own; all of them share the process's one UCX transport through transport sessions
(Note [Session ids] in actor/session_transport.h): a runtime's session id is derived from its
compiled job and how many runtimes of that same job this process made before, so every process
of the job computes the same id without talking.
"""

import atexit
import os
import sys
import threading
import weakref
import zlib

from oneflowlike import _C
from oneflowlike import env
from oneflowlike.framework import async_runs

_lock = threading.Lock()
_job = None


class Job:
    def __init__(self):
        self.rank = env.get_rank()
        self.world_size = env.get_world_size()
        self._transport = None
        self._sessions = None
        self._connecting = threading.Lock()
        self._session_counts = {}
        # Creation order: every process ends the runtimes it shares with others in the same
        # order, since a runtime's end passes between its ranks (Runtime::shutdown). A
        # one-process job's runtimes share nothing: weak references, so that a graph dropped
        # frees its runtime's memory (and the module tensors bound to it) at once, not at exit.
        self._runtimes = []
        self._left = False

    def connect(self):
        """Joins the other processes (once; every process of a job must): done when the first
        placement is made, so that ranks with nothing to run still join. Under a lock: the
        runs thread may make the first placement (Note [Asynchronous collectives])."""
        with self._connecting:
            if self.world_size > 1 and self._transport is None:
                transport = _C.UcxTransport.connect()
                self._sessions = _C.TransportSessions(transport, [self.rank])
                self._transport = transport
                _exit_at_once_on_error()

    def runtime(self, plan, trace=False, caller_runs=False, gpu=-1, session_name=None,
                bindable_variables=()):
        """A runtime of ``plan`` (compiled for this rank) hosting this process's rank; with
        ``trace``, it records every act (chrome_trace()); with ``caller_runs`` (a host plan),
        run() acts for its actors on the calling thread (Note [Caller-run runtimes]); ``gpu``
        (>= 0) is the GPU of the rank's CUDA tasks instead of LOCAL_RANK's (Note [The GPU of a
        rank]). ``session_name`` (the same on every rank) names the transport session instead
        of the plan's bytes, for plans that differ at every call (Note [Eager global draws]).
        ``bindable_variables``: Note [Variables bound to the caller's tensors]."""
        async_runs.drain()  # Note [Asynchronous collectives]: made after the runs before it
        self.connect()
        transport = None
        session = None
        if self._sessions is not None:
            crc = zlib.crc32(session_name.encode() if session_name else plan.job_bytes())
            count = self._session_counts.get(crc, 0)
            self._session_counts[crc] = count + 1
            session = (crc + count * 0x9E3779B1) & 0xFFFFFFFF
            transport = self._sessions.open(session)
        spin = float(os.environ.get("OFL_SPIN_US", -1))  # how long idle actor threads spin
        holder = RuntimeHolder(_C.Runtime(plan, [self.rank], transport, trace=trace,
                                          spin_microseconds=spin, caller_runs=caller_runs,
                                          first_gpu=gpu,
                                          bindable_variables=list(bindable_variables)),
                               session)
        if session is None and len(self._runtimes) % 256 == 255:
            self._runtimes = [h for h in self._runtimes
                              if not isinstance(h, weakref.ref) or h() is not None]
        self._runtimes.append(holder if session is not None else weakref.ref(holder))
        return holder

    def barrier(self):
        """Returns once every process of the job has called it (flow.comm.barrier), after this
        process's runs submitted with async_op=True (Note [Asynchronous collectives])."""
        async_runs.drain()
        self.connect()
        if self._transport is not None:
            self._transport.barrier()

    def shutdown(self):
        """Ends every runtime, then leaves the job. This process first tells the others how far
        it got (Note [Departures]: one still waiting for it ends at once, naming it), then all
        processes meet, so none ends a runtime it shares with a process still using it."""
        try:
            async_runs.drain()  # Note [Asynchronous collectives]: ended after they are
        except BaseException as e:  # nobody waited for it: said here, as the job ends anyway
            print(f"[oneflowlike] a run started with async_op=True and never waited for failed: "
                  f"{e}", file=sys.stderr)
        holders = [h() if isinstance(h, weakref.ref) else h for h in self._runtimes]
        holders = [h for h in holders if h is not None]
        if self._transport is not None and not self._left:
            progress = {h.session: h.iterations for h in holders if h.session is not None}
            self._sessions.announce_departure(progress, list(range(self.world_size)))
            self._transport.barrier()
        for holder in holders:
            holder.shutdown()
        if self._transport is not None and not self._left:
            self._left = True
            self._sessions = None
            self._transport.leave()


class RuntimeHolder:
    """Owns a runtime so that the job can end it before the transport goes."""

    def __init__(self, runtime, session=None):
        self.runtime = runtime
        self.session = session  # the transport session (None in a one-process job)
        self._iterations = 0  # kept once the runtime has ended

    @property
    def iterations(self):
        """The iterations its runtime ran (Note [Departures]), also after it ended early (an
        eager op compiled again: global_tensor.retire)."""
        runtime = self.__dict__.get("runtime")
        return runtime.iterations if runtime is not None else self._iterations

    def shutdown(self):
        if self.runtime is not None:
            self._iterations = self.runtime.iterations
            self.runtime.shutdown()
            self.runtime = None

    def __del__(self):
        # Dropped in a one-process job (a graph gone): ended here, through the binding that
        # releases Python's lock while the threads are joined, not in the runtime's destructor.
        if self.__dict__.get("runtime") is not None:
            self.shutdown()

    def run(self, inputs):
        async_runs.drain()  # Note [Asynchronous collectives]: runs start in submission order
        return self.__getattr__("run")(inputs)

    def run_local(self, pieces):
        async_runs.drain()
        return self.__getattr__("run_local")(pieces)

    def __getattr__(self, name):
        runtime = self.__dict__.get("runtime")
        if runtime is None:
            raise RuntimeError("[runtime] the job has ended: this graph cannot run any more.")
        return getattr(runtime, name)


def _exit_at_once_on_error():
    """An uncaught exception in a process of a multi-process job ends the process at once: a
    clean end would wait for the other ranks to end their runtimes too, which they may never do
    (the launcher stops them and reports this rank)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    sys.excepthook = hook


def current():
    global _job
    with _lock:
        if _job is None:
            _job = Job()
            atexit.register(_job.shutdown)
        return _job
