"""Runs started now and waited for later: torch's async_op=True, with the overlap it promises.

Note [Asynchronous collectives]: `dist.all_reduce(t, async_op=True)` (any torch.distributed
collective with async_op=True) returns a Work while the sum is still being made, so that the
caller computes meanwhile (gradient buckets, clipping's norms, a custom FSDP). The whole call
(the ranks' agreement check, the eager op's compiled graph of Note [Local collectives] in
comm.py, the write into the caller's tensor) goes to this process's one runs thread; the caller
gets a Pending and goes on. The runtime releases Python's lock while it runs, so the caller's
kernels and the collective's sends, receives and sums proceed together.

Order is what keeps the ranks paired: every rank must start its runs that exchange data, and
make its runtimes and their transport sessions, in the same order (Note [Program positions] in
actor/program_positions.h, Note [Session ids] in actor/session_transport.h). So the runs thread
takes calls in the order they were submitted, and anything else of this process that runs or
compiles a graph first waits for every submitted call to end (drain): RuntimeHolder.run and
run_local (nn.Graph calls, eager ops on global tensors, synchronous collectives), the compiled
graph cache (global_tensor.cached), every trace, making a runtime, barrier and the job's end.
Calls submitted one after another overlap the caller's work; anything else waits for them, as
torch's NCCL collectives queue behind each other on one stream. The tracing stack is per thread
(global_tensor._trace_stack), as the C++ tracer is, since the runs thread traces the eager ops
of the calls it runs.

A call that fails raises from its Pending's wait(), or, when nobody waited for it, from the
next drain: the next run of this process, which would otherwise pair with the wrong run of a
peer. The runs thread keeps its own grad mode and autocast state (both per thread): the
collectives write under no_grad and cast nothing, so the caller's do not matter. What follows
the run (an avg's division, the write into the caller's tensor) is part of what the runs thread
does, so a Pending that is complete has its result where it belongs.
"""

import os
import queue
import threading

_lock = threading.Lock()
_pending = []  # Pendings submitted and not yet waited for, in submission order
_queue = None
_thread = None
_local = threading.local()


class Pending:
    """A run submitted to the runs thread: wait() returns its value or raises its error."""

    def __init__(self, run):
        self._run = run
        self._done = threading.Event()
        self._value = None
        self._error = None
        self._traceback = None

    def is_completed(self):
        return self._done.is_set()

    def wait(self):
        self._done.wait()
        with _lock:
            if self in _pending:
                _pending.remove(self)
        if self._error is not None:  # with its own traceback each time, not a growing one
            raise self._error.with_traceback(self._traceback)
        return self._value

    def _execute(self):
        _local.runs_thread = True
        try:
            self._value = self._run()
        except BaseException as e:  # raised to whoever waits
            self._error, self._traceback = e, e.__traceback__
        finally:
            self._run = None
            self._done.set()


def _forget_after_fork():
    """A forked child (a DataLoader worker) has no runs thread: it starts its own if it must."""
    global _queue, _thread, _lock
    _lock = threading.Lock()
    _pending.clear()
    _queue = None
    _thread = None


os.register_at_fork(after_in_child=_forget_after_fork)


def _serve():
    while True:
        pending = _queue.get()
        pending._execute()


def submit(run):
    """run() on the runs thread, after every run submitted before it; a Pending of its value."""
    global _queue, _thread
    pending = Pending(run)
    with _lock:
        if _thread is None:
            _queue = queue.SimpleQueue()
            _thread = threading.Thread(target=_serve, name="oneflowlike-runs", daemon=True)
            _thread.start()
        _pending.append(pending)
        _queue.put(pending)
    return pending


def drain():
    """Waits for every submitted run, in order (Note [Asynchronous collectives]); raises the
    first error of one nobody had waited for. Nothing on the runs thread itself."""
    if getattr(_local, "runs_thread", False):
        return
    while True:
        with _lock:
            if not _pending:
                return
            first = _pending[0]
        first.wait()
