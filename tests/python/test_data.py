"""flow.utils.data: datasets, samplers, DataLoader (batching, seeded shuffling, drop_last,
prefetch threads, collation, a resumable position), DistributedSampler against torch's rule,
the memory-mapped TokenDataset and the tokenizing script."""

import pathlib
import subprocess
import sys

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


def test_prefetch_threads_hand_batches_over_in_order():
    ds = data.TensorDataset(np.arange(50))
    plain = _values(data.DataLoader(ds, batch_size=3, shuffle=True, seed=1))
    threaded = _values(data.DataLoader(ds, batch_size=3, shuffle=True, seed=1, num_workers=3,
                                       prefetch_factor=2))
    assert plain == threaded


def test_a_workers_error_reaches_the_consumer():
    class Broken(data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                raise KeyError(f"sample {i} is missing")
            return np.float32(i)

    loader = data.DataLoader(Broken(), batch_size=2, num_workers=2)
    with pytest.raises(KeyError, match="sample 5 is missing"):
        _values(loader)


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
            (dict(seed="x"), TypeError, r"seed must be an int")]:
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
