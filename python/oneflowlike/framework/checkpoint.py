"""flow.save / flow.load: checkpoints of global (and local) tensors, written by every rank in
parallel and read back onto any placement and SBP.

Layout of a checkpoint directory:

    manifest.json          the commit marker, written last by rank 0: every tensor's logical
                           shape, dtype, placement and SBP, the world size, the entries
                           that are not tensors (an optimizer's step count, an LR
                           scheduler's state: numbers, strings, lists and dicts, as JSON),
                           and the shape of nested entries (Note [Nested entries])
    rank<r>.json           rank r's pieces: per tensor, the region of the logical tensor it
                           holds, its file and the file's SHA-256
    rank<r>/<i>.npy        the pieces themselves

Every file is written under a temporary name and renamed into place, and rank 0 writes the
manifest only after every rank reported its pieces written (an all-reduce of one number over
all ranks), so a checkpoint without manifest.json is incomplete and is refused. A piece is
written once: along a broadcast dimension of the placement only coordinate 0 writes, and a
partial-sum tensor is first made broadcast. Nothing is gathered onto one rank.

Loading reads, for each tensor, only the saved pieces that overlap the region this rank needs
(``like`` gives the target layouts), copying the overlaps; each file read is verified against
its checksum first.
"""

import hashlib
import io
import json
import os

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.framework import agreement as _agreement
from oneflowlike.framework import global_tensor as _gt

__all__ = ["save", "async_save", "load"]

_FORMAT = "oneflowlike-checkpoint-1"


def _atomic_write(path, write):
    """write(f) into a temporary file, synced, then renamed to ``path``; returns what write
    returned."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        result = write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return result


def _write_npy(f, array):
    """np.save's bytes of ``array`` into file ``f``; returns their SHA-256, hashed from memory
    as they are written (not read back from the file: that would read every byte again)."""
    h = hashlib.sha256()
    array = np.require(array, requirements="C")  # keeps 0-d arrays 0-d
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    # As a flat array: a memoryview of a shape with a zero in it cannot be cast.
    for chunk in (header.getvalue(), memoryview(array.reshape(-1)).cast("B")):
        h.update(chunk)
        f.write(chunk)
    return h.hexdigest()


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dtype_name(dtype):
    return repr(dtype).split(".")[-1]


def _writes_piece(t, rank):
    coord = t.placement._c.coordinate(t.placement._c.parallel_id_of(rank))
    return all(c == 0 for s, c in zip(t.sbp, coord) if str(s) == "B")


def _check_json_value(name, value):
    """A non-tensor entry must survive JSON unchanged in kind (numbers, strings, bools, None,
    lists, tuples and dicts with string keys), since every rank reads it back from the
    manifest."""
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise TypeError(f"[save] '{name}' must be a tensor or a JSON value (numbers, strings, "
                        f"lists, dicts with string keys). However, got {type(value).__name__}: "
                        f"{e}.") from None


# Note [Nested entries]
# An entry may nest tensors in dicts, lists and tuples, as torch.save's users write
# {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": n}. Each nested tensor
# is saved as a tensor of its own under its path ("optimizer.state.0.exp_avg"), and the
# manifest's "trees" keeps the entry's shape as JSON, with {"__tensor__": path} where a tensor
# was, dicts as {"__dict__": [[key, value], ...]} (keys stay ints where they were: an
# optimizer's parameter indices) and tuples as {"__tuple__": [...]}. load() rebuilds the entry.
# Every dict, list and tuple entry is kept so, with or without tensors, so what comes back has
# the kinds that were saved. Checkpoints from before keep such entries in "values" as plain
# JSON, which load() still reads.
_TENSOR, _DICT, _TUPLE = "__tensor__", "__dict__", "__tuple__"
_KEY_TYPES = (str, int, float, bool, type(None))


def _is_tensor(value):
    return isinstance(value, (_gt.GlobalTensor, _C.Tensor))


def _tree(path, value, tensors):
    """``value``'s shape as JSON, each tensor replaced by its path; appends (path, tensor) to
    ``tensors``."""
    if _is_tensor(value):
        tensors.append((path, value))
        return {_TENSOR: path}
    if isinstance(value, dict):
        items = []
        for key, v in value.items():
            if not isinstance(key, _KEY_TYPES):
                raise TypeError(f"[save] '{path}' has a key of type {type(key).__name__}: keys "
                                "must be strings, numbers, bools or None.")
            items.append([key, _tree(f"{path}.{key}", v, tensors)])
        return {_DICT: items}
    if isinstance(value, (list, tuple)):
        items = [_tree(f"{path}.{i}", v, tensors) for i, v in enumerate(value)]
        return {_TUPLE: items} if isinstance(value, tuple) else items
    _check_json_value(path, value)
    return value


def _rebuild(tree, tensor):
    """The entry ``tree`` describes, each tensor from tensor(path)."""
    if isinstance(tree, list):
        return [_rebuild(v, tensor) for v in tree]
    if isinstance(tree, dict):
        if _TENSOR in tree:
            return tensor(tree[_TENSOR])
        if _TUPLE in tree:
            return tuple(_rebuild(v, tensor) for v in tree[_TUPLE])
        if _DICT in tree:
            return {key: _rebuild(v, tensor) for key, v in tree[_DICT]}
    return tree


def _leaves(value, path):
    """{path: tensor} of the tensors nested in ``value`` (a load target's layouts)."""
    tensors = []
    _tree(path, value, tensors)
    return dict(tensors)


def save(state, path):
    """Writes ``state`` (a dict of name -> Tensor or global tensor, e.g. graph.state_dict() or
    module.state_dict(); entries that are not tensors, such as graph.state_dict()'s optimizer
    step and LR scheduler state, are kept as JSON; entries may nest tensors in dicts, lists and
    tuples, e.g. an optimizer's state_dict(): Note [Nested entries]) to directory ``path``.
    Every rank of the job must call it, with the same path (Note [Ranks agree] in agreement.py:
    else every rank raises, naming each rank's)."""
    _begin("save", state, path).wait()


def _begin(op, state, path, background=False):
    """The save's handle, once the ranks agree on ``path`` and every earlier save to it is
    committed."""
    try:
        entries, trees = _entries(state)
        error = None
    except (TypeError, ValueError) as e:
        if env.get_world_size() == 1:
            raise
        entries, trees, error = {}, {}, e
    # The entries may differ: a rank outside a tensor's placement holds none of it (an
    # optimizer's state there is empty).
    _agreement.agree(op, {"path": os.path.normpath(str(path))},
                     "every rank must save to one path (a directory every rank can write)",
                     error)
    _after_pending(path)
    return _start(entries, trees, path, background)


# Saves not waited for yet, by real path: a second save to the path commits the first before
# it starts (two sets of files written at once into one directory would mix).
_pending = {}


def _after_pending(path):
    """Commits an earlier save to ``path`` not waited for yet (collective: every rank saves in
    one order, so every rank has it)."""
    prior = _pending.get(os.path.realpath(path))
    if prior is not None:
        prior.wait()


class SaveHandle:
    """What flow.async_save returns: the save's files are written on a thread of their own while
    the caller trains on (Note [Asynchronous saves]); ``wait()`` finishes it."""

    def __init__(self, path, manifest, write, background):
        self.path = path
        self._manifest = manifest
        self._error = None
        self._thread = None
        self._waited = False
        self._outcome = None  # the error wait() raised
        self._key = os.path.realpath(path)
        _pending[self._key] = self
        if background:
            import threading

            self._thread = threading.Thread(target=self._run, args=(write,),
                                            name="flow.async_save", daemon=True)
            self._thread.start()
        else:
            self._run(write)

    def _run(self, write):
        try:
            write()
        except Exception as e:  # reported by wait(), on every rank
            self._error = e

    def done(self):
        """Whether this rank's files are written (wait() still commits the checkpoint)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self):
        """Waits for this rank's files, then commits the checkpoint once every rank has written
        its own (rank 0 writes manifest.json). Collective: every rank calls it, at the same point
        of its program; raises on every rank if any rank failed to write."""
        if self._waited:
            if self._outcome is not None:
                raise self._outcome  # a failed save stays failed
            return self.path
        self._waited = True
        _pending.pop(self._key, None)
        try:
            self._commit()
        except Exception as e:
            self._outcome = e
            raise
        return self.path

    def _commit(self):
        if self._thread is not None:
            self._thread.join()
        everyone_ok = _agreement.count_ok(self._error is None) == env.get_world_size()
        if self._error is not None:
            raise self._error
        if not everyone_ok:
            raise RuntimeError(f"[save] another rank failed to write its pieces of "
                               f"'{self.path}'; the checkpoint is incomplete (no manifest.json).")
        committed = None
        if env.get_rank() == 0:
            body = json.dumps(self._manifest, indent=1).encode()
            try:
                _atomic_write(os.path.join(self.path, "manifest.json"), lambda f: f.write(body))
            except OSError as e:  # every rank learns of it, none waits
                committed = e
        if _agreement.count_ok(committed is None) != env.get_world_size():
            if committed is not None:
                raise committed
            raise RuntimeError(f"[save] rank 0 could not write the manifest of '{self.path}'; "
                               "the checkpoint is incomplete (no manifest.json).")


def async_save(state, path):
    """flow.save, with the files written on a thread of their own (torch's
    dcp.async_save; Note [Asynchronous saves]): returns once each rank's pieces are copied to
    host memory, so training may change the tensors at once; ``handle.wait()`` (every rank, at
    one point of the program) commits the checkpoint, which is complete only after it: a process
    that ends without waiting leaves no checkpoint at ``path`` (and the one there before is gone,
    its manifest removed at the call). A later save to the same path waits for this one first."""
    return _begin("async_save", state, path, background=True)


def _entries(state):
    """The tensors and JSON values of ``state`` by name, and the nested entries' trees."""
    if not isinstance(state, dict):
        raise TypeError(f"[save] expects a dict of tensors. However, got {type(state).__name__}.")
    entries, trees = {}, {}  # name -> tensor or JSON value; name -> nested entry's tree
    for name, value in state.items():
        if isinstance(value, (dict, list, tuple)):
            nested = []
            trees[name] = _tree(name, value, nested)
            for inner, tensor in nested:
                if inner in state or inner in entries:
                    raise ValueError(f"[save] '{inner}' names both an entry and a tensor nested "
                                     f"in '{name}'. Rename one of them.")
                entries[inner] = tensor
        else:
            if not _is_tensor(value):
                _check_json_value(name, value)
            entries[name] = value
    return entries, trees


def _start(entries, trees, path, background=False):
    """Note [Asynchronous saves]: what needs the other ranks happens here, in the caller's
    program order: the old manifest goes (every rank waits for that), partial sums are laid out
    again, and each rank's pieces are copied to host memory (numpy() copies). Only file writes
    are left to the handle, on a thread when ``background``: a second thread running collectives
    would interleave with the training's (Note [Program positions]). wait() then agrees that
    every rank wrote its files and commits."""
    rank, world = env.get_rank(), env.get_world_size()
    try:
        os.makedirs(os.path.join(path, f"rank{rank}"), exist_ok=True)
        # Overwriting a checkpoint: its manifest goes first (and every rank waits for that), so
        # a save that fails half-way leaves an incomplete checkpoint, never a mixed one.
        if rank == 0 and os.path.exists(os.path.join(path, "manifest.json")):
            os.remove(os.path.join(path, "manifest.json"))
        made = None
    except OSError as e:  # on every rank, or the others would wait for this one
        made = e
    if _agreement.count_ok(made is None) != world:
        if made is not None:
            raise made
        raise RuntimeError(f"[save] another rank could not make its directory in '{path}'; "
                           "nothing was saved.")
    manifest = {"format": _FORMAT, "world_size": world, "tensors": {}, "values": {},
                "trees": trees}
    arrays = []  # (name, file, region, array) this rank writes
    error = None
    for i, (name, value) in enumerate(sorted(entries.items())):
        if isinstance(value, _gt.GlobalTensor) and _sbp.summed(value.sbp) != tuple(value.sbp):
            # Collective: every rank lays each partial sum out again, whatever failed on it
            # before, so the ranks' runs stay in one order.
            value = value.to_global(sbp=_sbp.summed(value.sbp))
        if error is not None:
            continue
        try:  # this rank's own work: an error is reported by wait(), on every rank
            if isinstance(value, _gt.GlobalTensor):
                entry = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype),
                         "placement": value.placement.flat_ranks,
                         "hierarchy": list(value.placement.hierarchy),
                         "sbp": [str(s) for s in value.sbp]}
                local = value._local if rank in value.placement and _writes_piece(value, rank) \
                    else None
                region = None
                if local is not None:
                    region = [[r.start, r.stop] for r in _gt._region(
                        value.shape, value.placement, value.sbp, rank)]
            elif isinstance(value, _C.Tensor):
                entry = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype),
                         "placement": None, "sbp": None}
                # A local tensor is the same on every rank (replicated): rank 0 writes it.
                local = value.detach() if rank == 0 else None
                region = [[0, d] for d in value.shape]
            else:
                manifest["values"][name] = value  # checked above
                continue
            manifest["tensors"][name] = entry
            if local is not None:
                arrays.append((name, os.path.join(f"rank{rank}", f"{i}.npy"), region,
                               local.numpy()))
        except Exception as e:
            error = e

    def write():
        if error is not None:
            raise error
        pieces = {}
        for name, file, region, array in arrays:
            digest = _atomic_write(os.path.join(path, file), lambda f: _write_npy(f, array))
            pieces[name] = {"region": region, "file": file, "sha256": digest}
        body = json.dumps({"rank": rank, "pieces": pieces}, indent=1).encode()
        _atomic_write(os.path.join(path, f"rank{rank}.json"), lambda f: f.write(body))

    return SaveHandle(path, manifest, write, background)


def _read_manifest(path):
    file = os.path.join(path, "manifest.json")
    if not os.path.isdir(path):
        what = "is a file, not a checkpoint directory" if os.path.exists(path) else \
            "does not exist"
        raise FileNotFoundError(f"[load] there is no checkpoint at '{path}': the path {what}.")
    if not os.path.exists(file):
        if not any(name.startswith("rank") for name in os.listdir(path)):
            raise FileNotFoundError(f"[load] there is no checkpoint at '{path}': the directory "
                                    "holds no manifest.json and no rank pieces.")
        raise FileNotFoundError(f"[load] '{path}' is not a complete checkpoint: it has pieces but "
                                "no manifest.json (a save did not finish).")
    manifest = _read_json(file, path)
    if manifest.get("format") != _FORMAT:
        raise ValueError(f"[load] '{file}' is not a {_FORMAT} manifest.")
    saved = {}  # name -> list of (region, file, sha256)
    for r in range(manifest["world_size"]):
        rank_file = os.path.join(path, f"rank{r}.json")
        if not os.path.exists(rank_file):
            raise FileNotFoundError(f"[load] checkpoint '{path}' lacks {os.path.basename(rank_file)}.")
        for name, piece in _read_json(rank_file, path).get("pieces", {}).items():
            saved.setdefault(name, []).append(piece)
    return manifest, saved


def _read_json(file, path):
    """A checkpoint's JSON file, or a ValueError naming it where it is not JSON (cut short or
    overwritten)."""
    with open(file) as f:
        try:
            value = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"[load] checkpoint '{path}' is corrupt: "
                             f"{os.path.basename(file)} is not valid JSON ({e}).") from None
    if not isinstance(value, dict):
        raise ValueError(f"[load] checkpoint '{path}' is corrupt: {os.path.basename(file)} "
                         "does not hold a JSON object.")
    return value


class _Reader:
    def __init__(self, path):
        self.path = path
        self.verified = set()

    def array(self, piece):
        file = os.path.join(self.path, piece["file"])
        if file not in self.verified:
            if not os.path.exists(file) or _sha256(file) != piece["sha256"]:
                raise RuntimeError(f"[load] '{file}' is missing or corrupt: its SHA-256 does not "
                                   "match the checkpoint's record.")
            self.verified.add(file)
        return np.load(file, mmap_mode="r")


def _assemble(reader, pieces, shape, region, numpy_dtype):
    """The part ``region`` (slices) of a tensor of ``shape`` from the saved pieces that overlap."""
    out = np.zeros(tuple(r.stop - r.start for r in region), dtype=numpy_dtype)
    covered = np.zeros(out.shape, dtype=bool)
    target = [(r.start, r.stop) for r in region]
    for piece in pieces:
        overlap = _C.region_overlap([tuple(r) for r in piece["region"]], target)
        if overlap is None:  # Note [Region overlap] in oneflowlike/sbp.h
            continue
        src = tuple(slice(a, b) for a, b in overlap[0])
        dst = tuple(slice(a, b) for a, b in overlap[1])
        out[dst] = reader.array(piece)[src]
        covered[dst] = True
    if not covered.all():
        raise RuntimeError("[load] the checkpoint's pieces do not cover the tensor: a rank's "
                           "pieces are missing.")
    return out


_NUMPY = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
          "int8": np.int8, "bool": np.bool_, "float16": np.float16,
          # numpy has no bfloat16: Tensor.numpy() widens it to float32 exactly, so its pieces are
          # float32 files whose values narrow back to bfloat16 exactly (_to_tensor).
          "bfloat16": np.float32}


def _to_tensor(array, dtype_name):
    """A local tensor of the saved dtype from an assembled array."""
    tensor = _C.from_numpy(np.require(array, requirements="C"))  # 0-d stays 0-d
    return _C.cast(tensor, _C.dtype.bfloat16) if dtype_name == "bfloat16" else tensor


def load(path, like=None):
    """Reads a checkpoint. With ``like`` (a dict of name -> Tensor or global tensor, e.g. the
    state_dict of the model or graph to restore), every tensor comes back in the layout of its
    entry in ``like`` — any placement and SBP, whatever the saving layout — each rank reading only
    the pieces it needs. Without ``like``, every tensor comes back whole as a local tensor.
    Entries saved as JSON values (not tensors) come back as they were saved, and nested entries
    as they were nested (Note [Nested entries]; with ``like``, a nested tensor takes the layout
    of the tensor at the same place in ``like``'s entry)."""
    manifest, saved = _read_manifest(path)
    reader = _Reader(path)
    values = manifest.get("values", {})
    trees = manifest.get("trees", {})
    nested = set()  # the paths of the tensors nested in entries
    for tree in trees.values():
        _rebuild(tree, nested.add)
    tops = [n for n in manifest["tensors"] if n not in nested] + list(values) + list(trees)
    names = tops if like is None else list(like)
    out = {}
    for name in names:
        target = None if like is None else like[name]
        if name in trees:
            targets = {} if target is None else _leaves(target, name)
            out[name] = _rebuild(trees[name], lambda inner: _load_tensor(
                path, manifest, saved, reader, inner, targets.get(inner)))
            continue
        if like is not None and name not in values and name not in manifest["tensors"] \
                and not _is_tensor(target):
            continue  # a value the checkpoint predates (a graph's step count): the caller decides
        if name in values:
            if _is_tensor(target):
                raise ValueError(f"[load] '{name}' was saved as a value, not a tensor. However, "
                                 "the target is a tensor.")
            out[name] = values[name]
            continue
        if target is not None and not _is_tensor(target):
            raise ValueError(f"[load] '{name}' was saved as a tensor. However, the target is "
                             f"a {type(target).__name__}.")
        out[name] = _load_tensor(path, manifest, saved, reader, name, target)
    return out


def _load_tensor(path, manifest, saved, reader, name, target):
    """Tensor ``name`` of the checkpoint: in ``target``'s layout, or whole and local."""
    entry = manifest["tensors"].get(name)
    if entry is None:
        raise KeyError(f"[load] checkpoint '{path}' has no entry '{name}'.")
    shape = tuple(entry["shape"])
    if entry["dtype"] not in _NUMPY:
        raise NotImplementedError(f"[load] dtype {entry['dtype']} of '{name}'.")
    numpy_dtype = _NUMPY[entry["dtype"]]
    if target is not None and tuple(target.shape) != shape:
        raise ValueError(f"[load] '{name}' was saved with shape {shape}. However, the "
                         f"target has shape {tuple(target.shape)}.")
    if target is not None and _dtype_name(target.dtype) != entry["dtype"]:
        raise ValueError(f"[load] '{name}' was saved as {entry['dtype']}. However, the "
                         f"target is {_dtype_name(target.dtype)}.")
    pieces = saved.get(name, [])
    if isinstance(target, _gt.GlobalTensor):
        rank = env.get_rank()
        local = None
        if rank in target.placement:
            region = _gt._region(shape, target.placement, target.sbp, rank)
            array = _assemble(reader, pieces, shape, region, numpy_dtype)
            if _gt.holds_zero_addend(target.placement, target.sbp, rank):
                array = np.zeros_like(array)  # a partial sum: the first coordinate holds it
            local = _to_tensor(array, entry["dtype"])
        return _gt.GlobalTensor(local, shape, target.dtype, target.placement, target.sbp)
    whole = tuple(slice(0, d) for d in shape)
    return _to_tensor(_assemble(reader, pieces, shape, whole, numpy_dtype), entry["dtype"])
