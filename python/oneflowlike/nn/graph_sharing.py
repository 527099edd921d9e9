"""Note [Graphs sharing modules]: a graph keeps its modules' parameters and buffers as variables
of its runtime, and its optimizer updates those, not the module's tensors. Two graphs built on
one model (a training graph and an evaluation graph, as OneFlow's users write them), or a graph
and the eager model, would each see their own copy: the evaluation graph would evaluate the
initial weights, and module.state_dict() would save them, without a word.

So the module's tensor stays the one value every user of it sees, brought up to date lazily:
- after each call, a graph that trains (it has an optimizer) becomes the holder of its
  variables' newest values;
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

A graph holding values lives as long as any of its modules does (each module keeps it, in
_anchors): `del graph` after training, then model.state_dict(), gives the trained values (the
graph went with its hold, and state_dict gave the initial ones, without a word). Its memory
goes once its holds end (that state_dict, or graph.sync_to_modules() before the del). The
anchor is on the modules, not in this file's tables, so a model and its graph dropped together
are still collected; and whether a graph is alive never depends on when the garbage collector
ran, which differs between ranks, so every rank syncs (and, under ZeRO, gathers) alike.
"""

import weakref

from oneflowlike.framework import global_tensor as _gt

# id(module tensor) -> (the holding graph (weak), its variable name, the tensor: kept, so that
# its id names no other tensor while the entry lives). A graph's entries go when it does, which
# its modules' anchors put off until they go too.
_holders = {}
# Bumped at every claim: a module released at the current epoch has nothing held (module_call).
_epoch = 0


def stamp(value):
    """What changes when a module tensor's values are written: its storage version, and for a
    global tensor which piece it holds (a counter, not an id: a freed piece's id comes back)."""
    if isinstance(value, _gt.GlobalTensor):
        local = value._local
        return (value._generation, -1 if local is None else local._version)
    return value._version


def _forget(graph_id, ids):
    """A graph has gone: its holds end (the values stay as the modules hold them)."""
    for key in ids:
        held = _holders.get(key)
        if held is not None and held[0]() is None:
            del _holders[key]


def claim(graph):
    """After a call of ``graph`` that changed its variables: it holds their newest values."""
    global _epoch
    ref = weakref.ref(graph)
    ids = []
    for full, value, *_ in graph._variables:
        before = _holders.get(id(value))
        if before is not None and before[0]() is not graph:
            end_hold(value)  # load_state_dict's values replace another graph's
        _holders[id(value)] = (ref, full, value)
        ids.append(id(value))
    held = graph.__dict__.setdefault("_sharing_held", set())
    if not held:
        _anchor(graph)
    held.update(ids)
    if "_sharing_forget" not in graph.__dict__:
        graph.__dict__["_sharing_forget"] = weakref.finalize(graph, _forget, id(graph), ids)
    _epoch += 1


def end_hold(value):
    """The hold on module tensor ``value`` ends (its module or the reading graph has the value
    now); a graph holding nothing more is no longer kept by its modules."""
    held = _holders.pop(id(value), None)
    if held is None or held[2] is not value:
        if held is not None:
            _holders[id(value)] = held  # another tensor's entry under a reused id
        return
    graph = held[0]()
    if graph is None:
        return
    ids = graph.__dict__.get("_sharing_held")
    if ids:
        ids.discard(id(value))
        if not ids:
            for m in graph.__dict__.pop("_sharing_anchored", ()):
                m.__dict__.get("_anchors", {}).pop(id(graph), None)


def _anchor(graph):
    """Every module of ``graph`` keeps it alive (until end_hold ends its last hold)."""
    anchored = graph.__dict__.setdefault("_sharing_anchored", [])
    for module in graph._modules.values():
        for m in module.modules():
            m.__dict__.setdefault("_anchors", {})[id(graph)] = graph
            anchored.append(m)


def release(values, reader=None):
    """Brings the module tensors ``values`` up to date from the graphs holding newer values
    (other than ``reader``, which holds its own)."""
    if not _holders:
        return
    by_graph = {}
    for value in values:
        held = _holders.get(id(value))
        if held is None or held[2] is not value:
            continue
        graph = held[0]()
        if graph is None:
            del _holders[id(value)]
            continue
        if graph is reader:
            continue
        end_hold(value)
        if stamp(value) != graph._seen_stamps.get(held[1]):
            continue  # written since the holder saw it: the module's value is the newer one
        by_graph.setdefault(id(graph), (graph, []))[1].append(held[1])
    for graph, names in by_graph.values():
        graph._sync_variables(set(names))


def before_call(graph):
    """Before ``graph`` runs: the values other graphs hold, then every module tensor changed
    since ``graph`` last saw it, into its runtime."""
    release([value for _, value, *_ in graph._variables], reader=graph)
    for full, value, *_ in graph._variables:
        now = stamp(value)
        if graph._seen_stamps.get(full) != now:
            graph._write_variable(full, value)
            graph._seen_stamps[full] = now
            held = _holders.get(id(value))
            if held is not None and held[0]() is graph:
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
