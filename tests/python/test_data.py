"""flow.utils.data: datasets, samplers, DataLoader (batching, seeded shuffling, drop_last,
worker processes, collation, a resumable position), DistributedSampler against torch's rule,
the memory-mapped TokenDataset and the tokenizing script."""

import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import oneflowlike as flow

data = flow.utils.data
_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _values(loader):
    return [tuple(t.numpy().tolist() for t in batch) for batch in loader]


def test_batches_in_order_with_the_last_partial_kept_or_dropped():
    ds = data.TensorDataset(np.arange(10), np.arange(10) * 0.5)
    batches = _values(data.DataLoader(ds, batch_size=4))
    assert [b[0] for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][1] == [0.0, 0.5, 1.0, 1.5]
    assert len(data.DataLoader(ds, batch_size=4)) == 3
    dropped = data.DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [b[0] for b in _values(dropped)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_collation_gives_int64_and_float32_tensors_and_keeps_structure():
    samples = [{"x": np.ones(3, np.float64), "y": 1, "pair": (2.5, np.int32(3))} for _ in range(2)]
    batch = data.default_collate(samples)
    assert batch["x"].dtype == flow.float32 and tuple(batch["x"].shape) == (2, 3)
    assert batch["y"].dtype == flow.int64 and batch["y"].numpy().tolist() == [1, 1]
    assert isinstance(batch["pair"], tuple) and batch["pair"][1].dtype == flow.int32
    with pytest.raises(TypeError, match=r"\[default_collate\] cannot batch samples of type str"):
        data.default_collate(["a", "b"])


def test_shuffling_is_seeded_per_epoch_and_covers_every_sample():
    ds = data.TensorDataset(np.arange(20))
    a = data.DataLoader(ds, batch_size=5, shuffle=True, seed=3)
    b = data.DataLoader(ds, batch_size=5, shuffle=True, seed=3)
    epoch0, epoch1 = _values(a), _values(a)
    assert epoch0 == _values(b)  # same seed, same order
    assert epoch0 != epoch1  # another epoch, another permutation
    for epoch in (epoch0, epoch1):
        assert sorted(v for batch in epoch for v in batch[0]) == list(range(20))
    assert _values(data.DataLoader(ds, batch_size=5, shuffle=True, seed=4)) != epoch0


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_workers_hand_batches_over_in_order(worker_type):
    ds = data.TensorDataset(np.arange(50))
    plain = _values(data.DataLoader(ds, batch_size=3, shuffle=True, seed=1))
    loaded = _values(data.DataLoader(ds, batch_size=3, shuffle=True, seed=1, num_workers=3,
                                     prefetch_factor=2, worker_type=worker_type))
    assert plain == loaded


# Datasets of the worker tests: at module level, so that they pickle (Note [Worker processes]).
class Broken(data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise KeyError(f"sample {i} is missing")
        return np.float32(i)


class WhoLoads(data.Dataset):
    """Each sample: the loading worker's id, its pid, a draw of numpy's generator and the
    worker_init_fn's mark."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = data.get_worker_info()
        return np.array([info.id, os.getpid(), np.random.randint(1 << 30), MARK.get("mark", -1)])


MARK = {}


def mark_worker(worker_id):
    MARK["mark"] = 100 + worker_id


class Dies(data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.float32(i)


class Slow(data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            time.sleep(30)
        return np.float32(i)


class Fast(Slow):
    """Slow for a thread: sleeps 2 s on sample 2 (a thread cannot be stopped)."""

    def __getitem__(self, i):
        if i == 2:
            time.sleep(2)
        return np.float32(i)


class Unpicklable(data.Dataset):
    """Sample 3 holds a lambda: its batch cannot cross to the loop; sample 5 raises an error of a
    class defined in a function (which does not pickle either)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            return {"x": np.float32(i), "f": lambda: i}
        if i == 5:
            class LocalError(Exception):
                pass

            raise LocalError(f"sample {i}")
        return {"x": np.float32(i), "f": None}


def unpicklable_collate(samples):
    return samples  # the lambda reaches the batch


class Big(data.Dataset):
    """Samples of 1 MiB, so that unread batches fill a pipe."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full(1 << 18, i, np.float32)


class TimesOut(data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise TimeoutError(f"sample {i}'s server did not answer")


def fails_to_start(worker_id):
    raise OSError(f"worker {worker_id} cannot open its shard")


def test_a_workers_error_reaches_the_consumer_with_its_traceback():
    with pytest.raises(KeyError, match=r"sample 5 is missing"):  # a thread's: the exception itself
        _values(data.DataLoader(Broken(), batch_size=2, num_workers=2, worker_type="thread"))
    loader = data.DataLoader(Broken(), batch_size=2, num_workers=2)
    with pytest.raises(KeyError, match=r"caught KeyError in worker process 0 loading batch 2"
                                       r"(.|\n)*in __getitem__(.|\n)*sample 5 is missing"):
        _values(loader)
    with pytest.raises(OSError, match=r"in worker_init_fn(.|\n)*cannot open its shard"):
        _values(data.DataLoader(Broken(), batch_size=2, num_workers=2,
                                worker_init_fn=fails_to_start))


def test_what_cannot_cross_to_the_loop_is_an_error_not_a_hang():
    loader = data.DataLoader(Unpicklable(), batch_size=2, num_workers=2,
                             collate_fn=unpicklable_collate)
    with pytest.raises(Exception, match=r"caught \w+ in worker process 1 sending batch 1"
                                        r"(.|\n)*lambda"):
        list(loader)
    loader = data.DataLoader(Unpicklable(), batch_size=2, num_workers=2,
                             collate_fn=unpicklable_collate)
    loader.load_state_dict({"epoch": 0, "batches_done": 2})
    with pytest.raises(RuntimeError, match=r"caught LocalError in worker process 0 loading "
                                           r"batch 2(.|\n)*sample 5"):
        list(loader)
    # A thread's own TimeoutError is the dataset's, not the loader's timeout.
    with pytest.raises(TimeoutError, match=r"sample 0's server did not answer"):
        list(data.DataLoader(TimesOut(), num_workers=1, worker_type="thread"))


def test_a_loop_left_early_ends_its_workers_at_once():
    for persistent in (False, True):
        loader = data.DataLoader(Big(), batch_size=4, num_workers=2, persistent_workers=persistent)
        batches = iter(loader)
        next(batches)
        time.sleep(1.0)  # the workers fill the result pipe with unread megabytes
        start = time.monotonic()
        batches.close()
        if persistent:
            loader._pool.shutdown()
        assert time.monotonic() - start < 2.5, persistent


def test_workers_are_processes_seeded_by_loader_and_epoch_with_their_info():
    def loads(loader):
        return np.concatenate([b.numpy() for b in loader])

    loader = data.DataLoader(WhoLoads(), batch_size=2, num_workers=3, seed=5,
                             worker_init_fn=mark_worker)
    first = loads(loader)
    assert data.get_worker_info() is None  # in the main process
    ids, pids, draws, marks = first.T
    assert np.array_equal(ids, np.repeat([0, 1, 2, 0, 1, 2], 2))  # batch k on worker k % 3
    assert os.getpid() not in set(pids) and len(set(pids)) == 3
    assert np.array_equal(marks, 100 + ids)
    # The same seed and epoch draw the same numbers in a new run; the next epoch others.
    again = loads(data.DataLoader(WhoLoads(), batch_size=2, num_workers=3, seed=5))
    assert np.array_equal(again[:, 2], draws)
    assert not np.array_equal(loads(loader)[:, 2], draws)


def test_persistent_workers_outlive_the_epoch_and_others_do_not():
    persistent = data.DataLoader(WhoLoads(), batch_size=3, num_workers=2, persistent_workers=True)
    fresh = data.DataLoader(WhoLoads(), batch_size=3, num_workers=2)
    for loader, same in ((persistent, True), (fresh, False)):
        pids = [set(np.concatenate([b.numpy() for b in loader])[:, 1]) for _ in range(2)]
        assert (pids[0] == pids[1]) is same
    # A loop left early: its batches still in flight are not handed to the next one.
    for batch in persistent:
        break
    assert [b.numpy()[:, 0].tolist() for b in persistent][0] == [1, 1, 1]  # batch 1 of 4


def test_a_dead_worker_or_a_late_batch_ends_the_loop_naming_it():
    with pytest.raises(RuntimeError, match=r"\[DataLoader\] worker process 0 \(pid \d+\) exited "
                                           r"unexpectedly \(killed by signal 9;"):
        _values(data.DataLoader(Dies(), batch_size=2, num_workers=2))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"timed out after 1.0 s waiting for batch 1 from "
                                           r"worker process 1"):
        _values(data.DataLoader(Slow(), batch_size=2, num_workers=2, timeout=1))
    assert time.monotonic() - start < 15  # the sleeping worker is stopped, not waited for
    with pytest.raises(RuntimeError, match=r"timed out after 0.5 s waiting for batch 1"):
        _values(data.DataLoader(Fast(), batch_size=2, num_workers=1, timeout=0.5,
                                worker_type="thread"))


def test_workers_started_afresh_need_what_they_get_to_pickle():
    class Local(data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.float32(i)

    with pytest.raises(AttributeError, match=r"num_workers=2 starts worker processes \(forkserver"
                                             r"(.|\n)*Can't pickle local object(.|\n)*Define them "
                                             r"at module level"):
        _values(data.DataLoader(Local(), batch_size=2, num_workers=2,
                                multiprocessing_context="forkserver"))
    forked = data.DataLoader(Local(), batch_size=2, num_workers=2)  # fork, as torch on Linux
    assert [b.numpy().tolist() for b in forked] == [[0.0, 1.0], [2.0, 3.0]]
    fresh = data.DataLoader(WhoLoads(), batch_size=4, num_workers=2,
                            multiprocessing_context="spawn")
    assert len(set(np.concatenate([b.numpy() for b in fresh])[:, 1])) == 2


def test_tensors_pickle_as_their_values():
    for t in (flow.tensor([1.5, -2.0]).to(flow.bfloat16), flow.arange(6).reshape(2, 3),
              flow.tensor([True, False]), flow.ones(2, 2, requires_grad=True)):
        back = pickle.loads(pickle.dumps(t))
        assert back.dtype == t.dtype and back.requires_grad == t.requires_grad
        np.testing.assert_array_equal(back.numpy(), t.detach().numpy())

    with pytest.raises(RuntimeError, match=r"\[pickle\] a tensor computed from others that "
                                           r"requires grad would lose its graph"):
        pickle.dumps(flow.ones(2, requires_grad=True) * 2)

    class Graph(flow.nn.Graph):
        def build(self, x):
            pickle.dumps(x)
            return x

    with pytest.raises(TypeError, match=r"\[pickle\] a value of nn.Graph's build\(\) has no data"):
        Graph()(flow.ones(2))


def test_a_token_dataset_pickles_as_its_path(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(100000, dtype=np.uint16).tofile(path)
    ds = data.TokenDataset(str(path), 8)
    copy = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 1000
    np.testing.assert_array_equal(copy[3][0], ds[3][0])


def test_kernel_threads_are_set_and_read_as_in_torch():
    before = flow.get_num_threads()
    try:
        flow.set_num_threads(1)
        assert flow.get_num_threads() == 1
        with pytest.raises(ValueError, match=r"\[set_num_threads\] the CPU kernels need at least "
                                             r"one thread. However, got 0"):
            flow.set_num_threads(0)
    finally:
        flow.set_num_threads(before)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_resumed_from_its_state_continues_the_uninterrupted_sequence(num_workers):
    ds = data.TensorDataset(np.arange(23))

    def make():
        return data.DataLoader(ds, batch_size=4, shuffle=True, seed=7, drop_last=True,
                               num_workers=num_workers)

    def stream(loader, n):
        out = []
        while len(out) < n:
            for batch in loader:
                out.append(batch[0].numpy().tolist())
                if len(out) == n:
                    break
        return out

    whole = stream(make(), 12)  # 5 batches per epoch: crosses two epoch boundaries
    first = make()
    head = stream(first, 7)
    state = first.state_dict()
    assert state == {"epoch": 1, "batches_done": 2}
    resumed = make()
    resumed.load_state_dict(state)
    assert head + stream(resumed, 5) == whole
    with pytest.raises(ValueError, match=r"batches_done in \[0, 5\]"):
        resumed.load_state_dict({"epoch": 0, "batches_done": 9})


def test_distributed_sampler_shards_as_torch_does():
    torch = pytest.importorskip("torch")
    ds = list(range(11))
    for drop_last in (False, True):
        for rank in range(3):
            ours = list(data.DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=False,
                                                drop_last=drop_last))
            theirs = list(torch.utils.data.DistributedSampler(ds, num_replicas=3, rank=rank,
                                                              shuffle=False, drop_last=drop_last))
            assert ours == theirs
    shards = [list(data.DistributedSampler(ds, num_replicas=4, rank=r, seed=5)) for r in range(4)]
    assert all(len(s) == 3 for s in shards)  # 11 padded to 12
    assert set().union(*shards) == set(ds)
    again = data.DistributedSampler(ds, num_replicas=4, rank=0, seed=5)
    again.set_epoch(1)
    assert list(again) != shards[0]
    with pytest.raises(ValueError, match=r"rank must be in \[0, num_replicas\)"):
        data.DistributedSampler(ds, num_replicas=2, rank=2)


def test_token_dataset_reads_windows_of_a_memory_mapped_file(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(40)) * 3)
    out = tmp_path / "t.bin"
    subprocess.run([sys.executable, str(_ROOT / "examples" / "common" / "prepare_tokens.py"),
                    str(text), str(out)], check=True, capture_output=True)
    tokens = np.fromfile(out, dtype=np.uint16)
    assert tokens.tolist() == list(range(40)) * 3
    ds = data.TokenDataset(str(out), block_size=8)
    assert len(ds) == (120 - 9) // 8 + 1
    x, y = ds[2]
    assert x.dtype == np.int64 and x.tolist() == tokens[16:24].tolist()
    assert y.tolist() == tokens[17:25].tolist()
    overlapping = data.TokenDataset(str(out), block_size=8, stride=1)
    assert len(overlapping) == 120 - 8 and overlapping[-1][1][-1] == tokens[-1]
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    with pytest.raises(FileNotFoundError, match="no token file"):
        data.TokenDataset(str(tmp_path / "missing.bin"), 8)


def test_a_dataset_without_getitem_or_len_names_itself():
    class Empty(flow.utils.data.Dataset):
        pass

    with pytest.raises(NotImplementedError, match=r"\[Dataset\] Empty must define __getitem__"):
        Empty()[0]
    with pytest.raises(NotImplementedError, match=r"\[Dataset\] Empty must define __len__"):
        len(Empty())


def test_loader_arguments_of_the_wrong_type_or_range_are_refused_naming_them():
    dataset = data.TensorDataset(flow.arange(10))
    for kwargs, error, phrase in [
            (dict(batch_size="a"), TypeError, r"batch_size must be an int. However, got 'a'"),
            (dict(batch_size=2.5), TypeError, r"batch_size must be an int. However, got 2.5"),
            (dict(batch_size=0), ValueError, r"batch_size must be >= 1. However, got 0"),
            (dict(shuffle="yes"), TypeError, r"shuffle must be a bool"),
            (dict(drop_last=1), TypeError, r"drop_last must be a bool"),
            (dict(num_workers=-1), ValueError, r"num_workers must be >= 0"),
            (dict(prefetch_factor=0), ValueError, r"prefetch_factor must be >= 1"),
            (dict(seed="x"), TypeError, r"seed must be an int"),
            (dict(timeout=-1), ValueError, r"timeout must be a number of seconds >= 0"),
            (dict(worker_init_fn=3), TypeError, r"worker_init_fn must be callable"),
            (dict(multiprocessing_context="threads"), ValueError,
             r"multiprocessing_context must be one of \('fork', 'spawn', 'forkserver'\)"),
            (dict(worker_type="greenlet"), ValueError,
             r"worker_type must be 'process' or 'thread'. However, got 'greenlet'"),
            (dict(worker_type="thread", worker_init_fn=print), ValueError,
             r"worker_init_fn and multiprocessing_context are for worker processes")]:
        with pytest.raises(error, match=rf"\[DataLoader\] {phrase}"):
            data.DataLoader(dataset, **kwargs)


def test_two_live_iterators_of_one_loader_are_refused_not_interleaved():
    """Note [Loader position]: the newest iterator owns the position; an older one raises at
    its next batch instead of seeing every other batch."""
    data = flow.utils.data
    for workers in (0, 2):
        loader = data.DataLoader(data.TensorDataset(flow.arange(10)), batch_size=2,
                                 num_workers=workers)
        with pytest.raises(RuntimeError, match=r"a newer iterator of this DataLoader took over"):
            list(zip(loader, loader))
        loader.load_state_dict({"epoch": 0, "batches_done": 0})
        first = iter(loader)
        next(first)
        rest = [b[0].numpy().tolist() for b in loader]  # the newest continues the position
        assert rest == [[2, 3], [4, 5], [6, 7], [8, 9]]
        with pytest.raises(RuntimeError, match=r"took over its position"):
            next(first)
        assert [b[0].numpy().tolist() for b in loader][0] == [0, 1]  # the next epoch


def test_an_epoch_taken_whole_without_its_end_is_followed_by_the_next_and_idle_iterators_take_nothing():
    import itertools

    data = flow.utils.data
    loader = data.DataLoader(data.TensorDataset(flow.arange(6)), batch_size=2)
    for epoch in range(3):
        got = [b[0].numpy().tolist() for b in itertools.islice(loader, len(loader))]
        assert got == [[0, 1], [2, 3], [4, 5]], (epoch, got)
    idle = iter(loader)  # never advanced
    assert [b[0].numpy().tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]
    del idle


def test_workers_of_a_killed_loader_end_by_themselves(tmp_path):
    # No shutdown reaches them: each sees its loader's process gone and ends within a second
    # (Note [Worker processes]) instead of waiting for tasks forever.
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "import numpy as np\n"
        "import oneflowlike as flow\n"
        "from test_data import WhoLoads\n"
        "if __name__ == '__main__':\n"
        "    loader = flow.utils.data.DataLoader(WhoLoads(), batch_size=2, num_workers=2,\n"
        "                                        persistent_workers=True)\n"
        "    pids = set(np.concatenate([b.numpy() for b in loader])[:, 1].tolist())\n"
        "    from test_data import Big\n"  # and a pool whose unread batches fill its pipe
        "    big = iter(flow.utils.data.DataLoader(Big(), batch_size=4, num_workers=2))\n"
        "    next(big)\n"
        "    pids |= set(p.pid for p in big.gi_frame.f_locals['pool'].workers)\n"
        "    import time; time.sleep(1.0)\n"
        "    print(' '.join(map(str, sorted(pids))), flush=True)\n"
        "    os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == -9, out.stderr[-2000:]
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 4

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids), pids
