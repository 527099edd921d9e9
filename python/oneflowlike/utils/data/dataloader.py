"""DataLoader: batches of a dataset in a sampler's order, loaded ahead by worker processes, with
a position that a checkpoint can carry."""

import math
import numbers
import weakref
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from oneflowlike.utils.data.collate import default_collate
from oneflowlike.utils.data.sampler import RandomSampler, SequentialSampler
from oneflowlike.utils.data.worker import WorkerPool, worker_seed


class DataLoader:
    """torch.utils.data.DataLoader's map-style loading: ``batch_size`` samples per batch in the
    sampler's order (``shuffle=True``: a RandomSampler seeded by ``seed``), the last partial batch
    kept or dropped (``drop_last``), collated to tensors (``collate_fn``, default_collate).

    ``num_workers`` > 0 loads and collates batches in that many worker processes,
    ``prefetch_factor`` per worker ahead of the consumer, handed over in order, as torch's
    (Note [Worker processes] in worker.py: started by ``multiprocessing_context``, fork by
    default as torch's on Linux, forkserver or spawn on request; ``worker_init_fn(worker_id)`` and
    ``get_worker_info()`` as torch's; ``timeout`` > 0 bounds the wait for a batch; a worker's
    exception, or its death, is raised in the loop; ``persistent_workers=True`` keeps them
    between epochs). ``worker_type="thread"`` (ours) loads on threads of this process instead:
    for datasets whose work releases the GIL (a memory-mapped TokenDataset, numpy slicing), no
    process starts and nothing is pickled (the examples' token loader waits 0.3% of a step
    so, against 1.5% without workers and 2.2% with a worker process on two cores;
    docs/benchmarks.md). Each ``iter()``
    is one epoch; a sampler with ``set_epoch`` (RandomSampler, DistributedSampler) gets the
    epoch first.

    ``pin_memory=True`` puts each batch's tensors in page-locked host memory (Tensor.pin_memory)
    as it is handed out, so their copies to a GPU are DMA transfers; without a real GPU it does
    nothing (torch only warns there too).

    Note [Loader position]: ``state_dict()`` is {"epoch", "batches_done"}: the epoch under way and
    the batches handed out of it. An ``iter()`` continues from there (a loop left early resumes
    where it stopped, as torchdata's StatefulDataLoader), so a run that saves the state with its
    checkpoint and loads it on resume sees the batches an uninterrupted run would have seen.
    The position is the loader's, so the newest iterator owns it (from its first batch): an
    older one still iterating raises at its next batch (zip(loader, loader), or a loop nested in
    one over the same loader, would each have seen every other batch), where torch's iterators
    are independent. A loop that took every batch of an epoch without reaching its end leaves
    the next iter() at the next epoch.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, drop_last=False,
                 collate_fn=None, num_workers=0, prefetch_factor=2, seed=0, pin_memory=False,
                 persistent_workers=False, worker_init_fn=None, multiprocessing_context=None,
                 timeout=0, worker_type="process"):
        def integer(name, value, least=None):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"[DataLoader] {name} must be an int. However, got "
                                f"{value!r} ({type(value).__name__}).")
            if least is not None and value < least:
                raise ValueError(f"[DataLoader] {name} must be >= {least}. However, got "
                                 f"{value}.")
            return int(value)

        for name, value in (("shuffle", shuffle), ("drop_last", drop_last),
                            ("pin_memory", pin_memory),
                            ("persistent_workers", persistent_workers)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"[DataLoader] {name} must be a bool. However, got {value!r} "
                                f"({type(value).__name__}).")
        batch_size = integer("batch_size", batch_size, 1)
        num_workers = integer("num_workers", num_workers, 0)
        prefetch_factor = integer("prefetch_factor", prefetch_factor, 1)
        seed = integer("seed", seed)
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout < 0:
            raise ValueError(f"[DataLoader] timeout must be a number of seconds >= 0 (0: wait "
                             f"as long as it takes). However, got {timeout!r}.")
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"[DataLoader] worker_init_fn must be callable. However, got "
                            f"{worker_init_fn!r}.")
        methods = ("fork", "spawn", "forkserver")
        if isinstance(multiprocessing_context, str) and multiprocessing_context not in methods:
            raise ValueError(f"[DataLoader] multiprocessing_context must be one of {methods} or a "
                             f"multiprocessing context. However, got {multiprocessing_context!r}.")
        if worker_type not in ("process", "thread"):
            raise ValueError(f"[DataLoader] worker_type must be 'process' or 'thread'. However, "
                             f"got {worker_type!r}.")
        if worker_type == "thread" and (worker_init_fn is not None
                                        or multiprocessing_context is not None):
            raise ValueError("[DataLoader] worker_init_fn and multiprocessing_context are for "
                             "worker processes: worker_type='thread' takes neither.")
        if sampler is not None and shuffle:
            raise ValueError("[DataLoader] sampler and shuffle=True are mutually exclusive: the "
                             "sampler decides the order.")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.num_workers, self.prefetch_factor = int(num_workers), int(prefetch_factor)
        self.seed, self.timeout, self.worker_type = seed, float(timeout), worker_type
        self.worker_init_fn, self.multiprocessing_context = worker_init_fn, multiprocessing_context
        self.persistent_workers = bool(persistent_workers) and self.num_workers > 0
        self._pool = None  # the persistent workers, once started
        # Pinning needs a real GPU (simulated devices have no locked memory).
        from oneflowlike import cuda

        self.pin_memory = bool(pin_memory) and cuda.is_available() and not cuda.is_simulated()
        if sampler is None:
            sampler = RandomSampler(dataset, seed) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        self.epoch = 0
        self.batches_done = 0
        self._iterators = 0  # iterators made: the newest owns the position

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def state_dict(self):
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state):
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        if epoch < 0 or not 0 <= done <= len(self):
            raise ValueError(f"[DataLoader] a position must have epoch >= 0 and batches_done in "
                             f"[0, {len(self)}]. However, got {state!r}.")
        self.epoch, self.batches_done = epoch, done

    def _batches_of_epoch(self):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)
        indices = list(self.sampler)
        batches = [indices[i:i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def _fetch(self, indices):
        batch = self.collate_fn([self.dataset[i] for i in indices])
        return _pinned(batch) if self.pin_memory else batch

    def __iter__(self):
        return self._iterate()

    def _check_owner(self, mine):
        if self._iterators != mine:
            raise RuntimeError(
                "[DataLoader] a newer iterator of this DataLoader took over its position (Note "
                "[Loader position]): two live iterators would each see every other batch. "
                "Finish or drop one loop before starting another, or use two DataLoaders.")

    def _iterate(self):
        # The position is taken at the first batch asked for, not at iter(): an iterator made
        # and never advanced takes nothing from a loop running.
        self._iterators += 1
        mine = self._iterators
        batches = self._batches_of_epoch()
        if batches and self.batches_done >= len(batches):
            # Every batch of the epoch was handed out by a loop that stopped before the end
            # (islice(loader, len(loader))): the next epoch begins, not an empty one.
            self.epoch += 1
            self.batches_done = 0
            batches = self._batches_of_epoch()
        start = self.batches_done
        if self.num_workers == 0:
            for k in range(start, len(batches)):
                self._check_owner(mine)
                batch = self._fetch(batches[k])
                self.batches_done = k + 1
                yield batch
        elif self.worker_type == "thread":
            pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="ofl-dataloader")
            window = self.num_workers * self.prefetch_factor
            pending = {}
            try:
                for k in range(start, len(batches)):
                    self._check_owner(mine)
                    for ahead in range(k, min(k + window, len(batches))):
                        if ahead not in pending:
                            pending[ahead] = pool.submit(self._fetch, batches[ahead])
                    future = pending.pop(k)
                    if not wait([future], timeout=self.timeout or None).done:
                        raise RuntimeError(f"[DataLoader] timed out after {self.timeout} s "
                                           f"waiting for batch {k} (timeout=).")
                    batch = future.result()  # in order; a worker's error raises here
                    self.batches_done = k + 1
                    yield batch
            finally:
                pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool = self._workers()
            window = self.num_workers * self.prefetch_factor
            sent = start
            try:
                for k in range(start, len(batches)):
                    self._check_owner(mine)
                    while sent < min(k + window, len(batches)):
                        pool.put(mine, sent, batches[sent])
                        sent += 1
                    batch = pool.get(mine, k)  # in order; a worker's error raises here
                    if self.pin_memory:
                        batch = _pinned(batch)
                    self.batches_done = k + 1
                    yield batch
            finally:
                if not self.persistent_workers:
                    pool.shutdown()
        self._check_owner(mine)
        self.epoch += 1
        self.batches_done = 0


    def _workers(self):
        """The worker processes of this iteration: the persistent ones, or new ones seeded for
        the epoch."""
        if self._pool is not None:
            return self._pool
        pool = WorkerPool(self, worker_seed(self.seed, self.epoch), self.multiprocessing_context)
        if self.persistent_workers:
            self._pool = pool
            weakref.finalize(self, pool.shutdown)
        return pool


def _pinned(batch):
    """``batch`` with every CPU tensor in it (nested in tuples, lists, dicts) page-locked."""
    from oneflowlike import _C

    if isinstance(batch, _C.Tensor):
        return batch.pin_memory() if batch.device.type == "cpu" else batch
    if isinstance(batch, dict):
        return {k: _pinned(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        items = [_pinned(v) for v in batch]
        return type(batch)(items) if not hasattr(batch, "_fields") else type(batch)(*items)
    return batch
