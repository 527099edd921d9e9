"""DataLoader worker processes (torch.utils.data's ``num_workers``): each loads and collates the
batches it is sent, in a process of its own, so Python work in ``__getitem__`` and ``collate_fn``
runs beside training instead of under its GIL.

Note [Worker processes]
-----------------------
- Start method: ``fork`` unless the DataLoader is told otherwise, as torch's on Linux, so that
  scripts without a ``__main__`` guard, lambdas and local classes work as they do there. A
  training process holds the runtime's threads (actors, UCX progress, the kernels' OpenMP
  pool), which a fork does not copy; what a worker touches is safe without them: it runs its
  kernels serially (no OpenMP region), the allocator takes no lock, malloc is fork-safe, and it
  never uses UCX and ends with os._exit (multiprocessing's), so no atexit handler or C++
  destructor of the runtime runs in it. ``multiprocessing_context="forkserver"`` (Python 3.14's
  default) or ``"spawn"`` starts workers from a fresh interpreter instead; the dataset,
  ``collate_fn`` and ``worker_init_fn`` must then pickle (a TokenDataset pickles as its path)
  and a script needs the ``if __name__ == "__main__":`` guard.
- Each worker runs its CPU kernels on one thread, seeds Python's, numpy's and the library's
  generators with ``seed`` (from the loader's seed and the epoch its workers start in, plus the
  worker's id: the same every run; persistent workers keep their first epoch's, as torch's),
  sets ``get_worker_info()``, calls ``worker_init_fn(worker_id)``, and ignores SIGINT: Ctrl-C
  is the loop's to handle (a persistent pool survives a caught KeyboardInterrupt).
- Batch k goes to worker k % num_workers, at most ``prefetch_factor`` ahead per worker; results
  come back tagged with their batch and the iteration that asked, and the loader hands them out
  in order. Tensors travel pickled (CPU tensors pickle as their values, ``Tensor.__reduce__``).
  The worker pickles each batch itself, so one that does not pickle (a lambda, a lazy tensor)
  is an error raised in the loop, not a batch dropped by the queue's feeder thread.
- Failures reach the loop that iterates: an exception in a worker is raised again there, of its
  type where that can be made from a message, with the worker's traceback; a worker that dies
  (killed, a crash in native code) is named with its exit code; ``timeout`` > 0 bounds the wait
  for a batch. The workers end at the end of the epoch, or with the loader under
  ``persistent_workers=True``. A worker whose loader's process is gone (killed: no shutdown
  came) ends by itself within a second instead of waiting for tasks forever: it holds the read
  end of a pipe whose only write end is the loader's, which reads as closed once that process
  has ended (a zombie not yet reaped included, which kill(pid, 0) would still find). Every
  process forked later closes its copies of the live pools' write ends (os.register_at_fork),
  and a worker ending drops what it could not send (cancel_join_thread), so that neither a
  full result pipe nor a later fork keeps it alive.
- Not done: batches go through pipes, not shared memory (torch's way for large batches); a
  run resumed in the middle of an epoch starts its workers' generators afresh, so random
  augmentations differ from the uninterrupted run's (the samples are the same, Note [Loader
  position]).
"""

import os
import pickle
import queue
import random
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import numpy as np


@dataclass(frozen=True)
class WorkerInfo:
    """torch.utils.data.get_worker_info()'s: this worker's id, how many there are, its seed and
    its copy of the dataset."""

    id: int
    num_workers: int
    seed: int
    dataset: object


_INFO = None


def get_worker_info():
    """In a DataLoader worker process, its WorkerInfo; None in the main process."""
    return _INFO


class WorkerError:
    """An exception raised in a worker, sent back to the loop: its type and the worker's
    formatted traceback (exceptions themselves need not pickle)."""

    def __init__(self, worker_id, where):
        kind, value, _ = sys.exc_info()
        self.name, self.worker_id, self.where = kind.__name__, worker_id, where
        self.text = "".join(traceback.format_exception(kind, value, value.__traceback__))
        try:  # the type itself where it pickles (a class defined in a function does not)
            pickle.dumps(kind)
            self.kind = kind
        except Exception:  # noqa: BLE001
            self.kind = RuntimeError

    def reraise(self):
        message = (f"[DataLoader] caught {self.name} in worker process {self.worker_id} "
                   f"{self.where}. Its traceback:\n{self.text}")
        try:
            error = self.kind(message)
        except Exception:  # noqa: BLE001  a type that takes other arguments
            error = RuntimeError(message)
        raise error


# The write ends of the live pools' owner pipes, closed in every process forked from this one
# (Note [Worker processes]).
_OWNER_ENDS = {}


def _close_owner_ends():
    for end in list(_OWNER_ENDS.values()):
        try:
            end.close()
        except OSError:
            pass
    _OWNER_ENDS.clear()


os.register_at_fork(after_in_child=_close_owner_ends)


def _send(results, iteration, k, worker_id, batch):
    """Puts (iteration, k, the pickled batch) on ``results``; a batch that does not pickle is
    sent as the error it raised."""
    try:
        payload = bytes(ForkingPickler.dumps(batch))
    except Exception:  # noqa: BLE001
        payload = bytes(ForkingPickler.dumps(WorkerError(worker_id, f"sending batch {k}")))
    results.put((iteration, k, payload))


def _loop(worker_id, num_workers, seed, dataset, collate_fn, init_fn, tasks, results, owner):
    """A worker's life: set up, then (iteration, batch index, indices) -> (iteration, batch
    index, the pickled batch or WorkerError) until a None task."""
    global _INFO
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import oneflowlike as flow  # noqa: PLC0415  the library in this process

    owner_r, owner_w = owner
    owner_w.close()  # a forked worker's copy of the loader's end: only the loader may hold it
    flow.set_num_threads(1)  # the loader's workers share the cores with training
    random.seed(seed)
    np.random.seed(seed % 2**32)
    flow.manual_seed(seed)
    _INFO = WorkerInfo(worker_id, num_workers, seed, dataset)
    if init_fn is not None:
        try:
            init_fn(worker_id)
        except Exception:  # noqa: BLE001  sent to the loop, raised there
            _send(results, None, None, worker_id, WorkerError(worker_id, "in worker_init_fn"))
            return
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if owner_r.poll():  # the loader's end closed: its process died without a shutdown
                break
            continue
        if task is None:
            break
        iteration, k, indices = task
        try:
            batch = collate_fn([dataset[i] for i in indices])
        except Exception:  # noqa: BLE001
            batch = WorkerError(worker_id, f"loading batch {k}")
        _send(results, iteration, k, worker_id, batch)
    # Ending with results unread (a loop left early, a loader killed) must not wait for the
    # queue's feeder thread to write them into a pipe nobody reads. (A worker_init_fn's error
    # above is flushed: the loop is reading then.)
    results.cancel_join_thread()


class WorkerPool:
    """``num_workers`` worker processes of one loader, with a task queue each and one result
    queue. ``get(iteration, k)`` waits for batch k of an iteration, checking that every worker
    lives and the timeout."""

    def __init__(self, loader, seed, context):
        import multiprocessing  # noqa: PLC0415

        self.n = loader.num_workers
        self.timeout = loader.timeout
        if context is None or isinstance(context, str):
            ctx = multiprocessing.get_context(context or "fork")
        else:
            ctx = context  # a multiprocessing context object
        self.results = ctx.Queue()
        self.tasks, self.workers = [], []
        self.ready = {}  # (iteration, k) -> batch, come back ahead of their turn
        self.owner = ctx.Pipe(duplex=False)  # (read, write): the workers watch it close
        _OWNER_ENDS[id(self)] = self.owner[1]
        try:
            for i in range(self.n):
                tasks = ctx.Queue()
                worker = ctx.Process(
                    target=_loop, name=f"ofl-dataloader-{i}", daemon=True,
                    args=(i, self.n, seed + i, loader.dataset, loader.collate_fn,
                          loader.worker_init_fn, tasks, self.results, self.owner))
                worker.start()
                self.tasks.append(tasks)
                self.workers.append(worker)
        except Exception as e:
            self.shutdown()
            method = ctx.get_start_method()
            kind = type(e)
            try:
                kind("")
            except Exception:  # noqa: BLE001  a type that takes other arguments
                kind = RuntimeError
            raise kind(
                f"[DataLoader] num_workers={self.n} starts worker processes ({method}; Note "
                f"[Worker processes] in oneflowlike/utils/data/worker.py), which get the "
                f"dataset, collate_fn and worker_init_fn pickled, and this failed: {e}. Define "
                f"them at module level (no lambdas or local classes) and guard the script's main "
                f"code with if __name__ == '__main__', or use num_workers=0, or the default "
                f"multiprocessing_context 'fork'.") from e

    def put(self, iteration, k, indices):
        self.tasks[k % self.n].put((iteration, k, indices))

    def get(self, iteration, k):
        """Batch k of ``iteration``; results of older iterations (a loop left early) are
        dropped."""
        start = time.monotonic()
        if any(key[0] != iteration for key in self.ready):  # of a loop left early
            self.ready = {key: b for key, b in self.ready.items() if key[0] == iteration}
        while (iteration, k) not in self.ready:
            waited = time.monotonic() - start
            if self.timeout and waited > self.timeout:
                raise RuntimeError(f"[DataLoader] timed out after {self.timeout} s waiting for "
                                   f"batch {k} from worker process {k % self.n} (timeout=).")
            try:
                it, j, payload = self.results.get(timeout=0.5)
            except queue.Empty:
                dead = self._dead_worker()
                if dead is None:
                    continue
                try:  # what it sent before it ended may be arriving still
                    it, j, payload = self.results.get(timeout=1.0)
                except queue.Empty:
                    raise dead from None
            if it is None:  # worker_init_fn failed
                pickle.loads(payload).reraise()
            if it == iteration:
                self.ready[(it, j)] = payload
        batch = pickle.loads(self.ready.pop((iteration, k)))
        if isinstance(batch, WorkerError):
            batch.reraise()
        return batch

    def _dead_worker(self):
        """The error naming the first worker that has ended, or None."""
        for i, worker in enumerate(self.workers):
            if not worker.is_alive():
                code = worker.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else \
                    f"exit code {code}"
                return RuntimeError(f"[DataLoader] worker process {i} (pid {worker.pid}) "
                                    f"exited unexpectedly ({how}; what it printed, if anything, "
                                    f"is on stderr): an error before it could report one, a "
                                    f"crash in native code, the out-of-memory killer, or a kill.")
        return None

    def shutdown(self):
        for tasks in self.tasks:
            try:
                tasks.put(None)
            except Exception:  # noqa: BLE001,S110  a closed queue: the worker is ending anyway
                pass
        deadline = time.monotonic() + 5.0
        for worker in self.workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=1.0)
        for q in [*self.tasks, self.results]:
            q.cancel_join_thread()  # never block interpreter exit on undelivered items
            q.close()
        self.tasks, self.workers = [], []
        self.ready.clear()
        for end in self.owner:
            end.close()
        _OWNER_ENDS.pop(id(self), None)


def worker_seed(seed, epoch):
    """The base seed of an epoch's workers (worker i adds i): the loader's seed and the epoch,
    mixed, so that epochs and loaders differ and runs repeat."""
    return int(np.random.SeedSequence([seed % 2**64, epoch]).generate_state(1)[0])

