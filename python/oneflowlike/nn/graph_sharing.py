"""Note [Graphs sharing modules]: a graph keeps its modules' parameters and buffers as variables
of its runtime, and its optimizer updates those, not the module's tensors. Two graphs built on
one model (a training graph and an evaluation graph, as OneFlow's users write them), or a graph
and the eager model, would each see their own copy: the evaluation graph would evaluate the
initial weights, and module.state_dict() would save them, without a word.

So the module's tensor stays the one value every user of it sees, brought up to date lazily:
- after each call, a graph that trains (it has an optimizer) becomes the holder of its
  variables' newest values; one that only writes buffers (Note [Buffers written in build]),
  of those buffers' (a decoder's step writing its KV caches leaves the weights to the modules,
  so an eager call between steps copies the caches, not the model);
- before a graph runs, the values another graph holds are copied from that graph's runtime into
  the modules' tensors (sync), and every variable whose module tensor changed since this graph
  last wrote or read it (that sync, load_state_dict, an eager write) is written into this
  graph's runtime;
- eager reads through the module (calling it outside a graph, state_dict) sync first;
- a module tensor written since its holder last saw it (load_state_dict, an eager write after
  a step) is newer than the holder's copy: the hold ends without a copy, and the holder takes
  the written value at its next call.
A copy happens only when another user of a value needs it, so a training loop of one graph
copies nothing. Reads of a parameter tensor itself (model.weight.numpy()) between graph steps
do not sync: graph.sync_to_modules() does that explicitly. Where the graph lays a value out
otherwise than its module (ZeRO), the copy is a collective: after such a graph trained, an
eager call or state_dict() of its modules must be made on every rank.

Most variables need none of this: the runtime takes the module tensor itself as the variable
(Note [Variables bound to the caller's tensors] in actor/runtime_variables.cpp), so the graph
reads and updates the module's memory, as OneFlow's nn.Graph does, and holds no copy (a second
copy of every weight doubled the model's memory). A graph binds each variable whose module
tensor it can (bindable_pieces: host memory, the plan's layout, a storage of its own, no SEND
reading it); the others (ZeRO's shards of whole module tensors, GPU tensors, tensors sharing a
storage) keep a copy in the runtime, synced as below. A bound variable is never held: after a
call, the graph counts its writes into the module tensors' versions (claim), which tells every
other user of them (another graph's copy, eager autograd's saved tensors) that they changed;
before a call, a module tensor whose memory changed (`t.data = ...`, a global tensor given a new
piece) is bound again (refresh). So model.weight.numpy() after a step shows the step's values where the variable
is bound, and the last synced ones where it is not (graph.sync_to_modules() gives both).

What a graph holds outlives the graph as long as any of its modules lives: a _Holder (the
runtime, the variables' names, layouts and module tensors; nothing that leads back to a
module or the graph) is kept by every module of the graph (in _anchors) while it holds
values. So `del graph` after training, then model.state_dict(), gives the trained values (the
graph went with its hold, and state_dict gave the initial ones, without a word); the runtime
goes once the holds end (that state_dict, or graph.sync_to_modules() before the del), and a
model and its graph dropped together go at once, by reference counts, no cycle waiting for the
collector. Whether values are held never depends on when a rank's collector ran, so every rank
syncs (and, under ZeRO, gathers) alike.
"""

import weakref

from oneflowlike import _C, env
from oneflowlike.autograd import no_grad
from oneflowlike.framework import global_tensor as _gt

# id(module tensor) -> (its holder (weak), its variable name, the tensor: kept, so that its id
# names no other tensor while the entry lives). A holder's entries go when it does.
_holders = {}
# Bumped at every claim: a module released at the current epoch has nothing held (module_call).
_epoch = 0


def stamp(value):
    """What changes when a module tensor's values are written: its memory (`t.data = ...`: the
    storage's serial number and the address) and its storage's version, and for a global tensor
    which piece it holds (a counter, not an id: a freed piece's id comes back)."""
    if isinstance(value, _gt.GlobalTensor):
        local = value._local
        return (value._generation, None if local is None else local._stamp)
    return value._stamp


def _held_here(value):
    """What this process holds of module tensor ``value``: its local piece (None for a rank
    outside a global tensor's placement)."""
    return value._local if isinstance(value, _gt.GlobalTensor) else value


def counted_write(value):
    """Counts a write into module tensor ``value`` made outside its ops (Note [Versions]): a
    graph's run or write into the memory it is bound to."""
    _held_here(value)._bump_version()


def _piece(graph, full, value):
    """The tensor the runtime may take as this rank's piece of variable ``full`` (module tensor
    ``value``), or None: a piece in host memory laid out as the plan lays the variable out."""
    piece = _held_here(value)
    if piece is None or (isinstance(value, _gt.GlobalTensor) and graph._plan_layout(full, value)
                         != (value.placement, value.sbp)):
        return None  # ZeRO shards what the module holds whole
    return piece if str(piece.device).startswith("cpu") else None


def bindable_pieces(graph, names):
    """The pieces of the variables ``names`` the graph's runtime may bind, by name (Note
    [Variables bound to the caller's tensors]): those in host memory, in the plan's layout, on a
    storage no other of them has."""
    pieces, by_storage, declined = {}, {}, []
    for full, value, *_ in graph._variables:
        if full not in names:
            continue
        piece = _piece(graph, full, value)
        if piece is not None:
            pieces[full] = piece
            by_storage.setdefault(piece._storage_id, []).append(full)
        else:
            declined.append(f"'{full}' (not in host memory in the plan's layout)")
    for shared in by_storage.values():
        if len(shared) > 1:
            for full in shared:
                del pieces[full]
            declined.append(f"{shared} (one storage)")
    if declined and graph._debug >= 1:
        print(f"[nn.Graph] rank {env.get_rank()}: variables keeping a copy of their own: "
              + ", ".join(declined))
    return pieces


def bind(graph, full, value):
    """Makes the module tensor ``value`` the runtime's piece of variable ``full``; returns
    whether it is (otherwise the runtime has memory of its own for it, to be written)."""
    piece = _piece(graph, full, value)
    # Without a piece the runtime gives the variable memory of its own (it may hold an old one).
    why = graph._runtime.bind_variable_pieces(full, {} if piece is None else
                                              {env.get_rank(): piece})
    if why:
        graph._bound.pop(full, None)
        if graph._debug >= 1:
            print(f"[nn.Graph] rank {env.get_rank()}: {why}")
    else:
        graph._bound[full] = (piece._data_ptr, piece._storage_id)
    graph._bound_storages = {storage for _, storage in graph._bound.values()}
    return not why


def refresh(graph, full, value):
    """Module tensor ``value`` of variable ``full`` changed since the graph last saw it: its
    values into the runtime, or, bound, the runtime's piece onto its memory where that moved."""
    if full in graph._bound:
        if _moved(graph, full, value) and not bind(graph, full, value):
            graph._write_variable(full, value)
        return  # bound: the runtime reads the module's memory
    graph._write_variable(full, value)


def _moved(graph, full, value):
    """Whether bound variable ``full``'s module tensor ``value`` is no longer where the runtime
    reads it."""
    piece = _piece(graph, full, value)
    return piece is None or piece._data_ptr != graph._bound[full][0]


def rebind_moved(graph):
    """Binds again the bound variables whose module tensors moved since the graph last looked
    (before a write into them outside a call: load_state_dict)."""
    for full in list(graph._bound):
        value = graph._module_values[full]
        if _moved(graph, full, value):
            refresh(graph, full, value)


def count_writes(graph, names=None):
    """Counts a call's writes into bound module tensors (Note [Versions]): of the variables
    ``names`` (None: all) the call writes. Also after a failed call, which may have written
    some."""
    for full in graph._writes:
        if full in graph._bound and (names is None or full in names):
            counted_write(graph._module_values[full])


class _Holder:
    """What a graph's sync to its modules needs, and nothing that leads back to a module or to
    the graph: its runtime, its variables' layouts and module tensors, and its record of what
    it last saw (the graph's own dict, shared)."""

    def __init__(self, graph):
        self.runtime = graph._runtime
        self.rank = env.get_rank()
        self.local_variables = graph._local_variables
        self.local_device = graph._local_device
        self.seen = graph._seen_stamps
        self.values = {full: value for full, value, *_ in graph._variables}
        self.layouts = {full: graph._plan_layout(full, value)
                        for full, value in self.values.items()
                        if isinstance(value, _gt.GlobalTensor)}
        self.held = set()  # ids of the module tensors it holds
        self.anchored = []  # weak references to the modules keeping it
        weakref.finalize(self, _forget, [id(value) for value in self.values.values()])

    def sync(self, names):
        """The runtime's values of the variables ``names`` into their module tensors."""
        for full in names:
            value = self.values[full]
            end_hold(value)
            local = None
            if full in self.local_variables:
                local = self.runtime.read_variable_pieces(full).get(self.rank)
            if isinstance(value, _gt.GlobalTensor):
                placement, sbp = self.layouts[full]
                new = _gt.GlobalTensor(local, value.shape, value.dtype, placement, sbp)
                if placement != value.placement or sbp != value.sbp:
                    new = new.to_global(placement=value.placement, sbp=value.sbp)
                value._local = new._local
            elif local is not None:
                from oneflowlike.nn.graph import on_local_device

                local = on_local_device(local, self.local_device)
                with no_grad():  # as an optimizer's step writes them
                    _C._assign_(value, local, "sync_to_modules")
            self.seen[full] = stamp(value)  # the runtime holds these


def _forget(ids):
    """A holder has gone: its holds end (the values stay as the modules hold them)."""
    for key in ids:
        held = _holders.get(key)
        if held is not None and held[0]() is None:
            del _holders[key]


def holder_of(graph):
    """The graph's holder for its current runtime."""
    holder = graph.__dict__.get("_sharing_holder")
    if holder is None or holder.runtime is not graph._runtime:
        holder = graph.__dict__["_sharing_holder"] = _Holder(graph)
    return holder


def claim(graph, names=None):
    """After a call of ``graph`` that changed its variables (``names``; None: all of them): it
    holds the newest values of those it keeps a copy of, and counts its writes into the bound
    ones."""
    global _epoch
    count_writes(graph, names)
    holder = holder_of(graph)
    ref = weakref.ref(holder)
    ids = []
    for full, value in holder.values.items():
        if names is not None and full not in names:
            continue
        if full in graph._bound:  # written in the module's memory: counted (above), not held
            if not _moved(graph, full, value):  # else the next call binds it again
                graph._seen_stamps[full] = stamp(value)
            continue
        # The runtime's value is the newest, whatever the module's tensor had become (an eager
        # write before graph.load_state_dict is older than what it loaded).
        graph._seen_stamps[full] = stamp(value)
        before = _holders.get(id(value))
        if before is not None and before[0]() is not holder:
            end_hold(value)  # load_state_dict's values replace another graph's
        _holders[id(value)] = (ref, full, value)
        ids.append(id(value))
    if ids and not holder.held:
        for module in graph._modules.values():
            for m in module.modules():
                m.__dict__.setdefault("_anchors", {})[id(holder)] = holder
                holder.anchored.append(weakref.ref(m))
    holder.held.update(ids)
    _epoch += 1


def end_hold(value):
    """The hold on module tensor ``value`` ends (its module or the reading graph has the value
    now); a holder holding nothing more is no longer kept by its modules."""
    held = _holders.pop(id(value), None)
    if held is None or held[2] is not value:
        if held is not None:
            _holders[id(value)] = held  # another tensor's entry under a reused id
        return
    holder = held[0]()
    if holder is None:
        return
    holder.held.discard(id(value))
    if not holder.held:
        for ref in holder.anchored:
            m = ref()
            if m is not None:
                m.__dict__.get("_anchors", {}).pop(id(holder), None)
        holder.anchored.clear()


def release(values, reader=None):
    """Brings the module tensors ``values`` up to date from the graphs holding newer values
    (other than graph ``reader``, which holds its own)."""
    if not _holders:
        return
    mine = None if reader is None else reader.__dict__.get("_sharing_holder")
    by_holder = {}
    for value in values:
        held = _holders.get(id(value))
        if held is None or held[2] is not value:
            continue
        holder = held[0]()
        if holder is None:
            del _holders[id(value)]
            continue
        if holder is mine:
            continue
        end_hold(value)
        if stamp(value) != holder.seen.get(held[1]):
            continue  # written since the holder saw it: the module's value is the newer one
        by_holder.setdefault(id(holder), (holder, []))[1].append(held[1])
    for holder, names in by_holder.values():
        holder.sync(names)


def before_call(graph):
    """Before ``graph`` runs: the values other graphs hold, then every module tensor changed
    since ``graph`` last saw it, into its runtime."""
    release([value for _, value, *_ in graph._variables], reader=graph)
    mine = graph.__dict__.get("_sharing_holder")
    for full, value, *_ in graph._variables:
        now = stamp(value)
        if graph._seen_stamps.get(full) != now:
            refresh(graph, full, value)
            graph._seen_stamps[full] = now
            held = _holders.get(id(value))
            if held is not None and mine is not None and held[0]() is mine:
                end_hold(value)  # the runtime now holds the module's value


def module_call(module):
    """Before an eager call of ``module``: the values graphs hold of it and its submodules,
    once per claim (its submodules' calls inside it find them released)."""
    if module.__dict__.get("_sharing_epoch") == _epoch:
        return
    release(module_values(module))
    for m in module.modules():
        m.__dict__["_sharing_epoch"] = _epoch


def module_values(module):
    """The parameters and buffers of ``module`` and its submodules."""
    return [t for m in module.modules() for registry in (m._parameters, m._buffers)
            for t in registry.values() if t is not None]
