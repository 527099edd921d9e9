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
- eager reads through the module (calling it outside a graph, state_dict) sync first.
A copy happens only when another user of a value needs it, so a training loop of one graph
copies nothing. Reads of a parameter tensor itself (model.weight.numpy()) between graph steps
do not sync: graph.sync_to_modules() does that explicitly.
"""

import weakref

from oneflowlike.framework import global_tensor as _gt

# id(module tensor) -> (the holding graph (weak), its variable name, the tensor).
_holders = {}


def stamp(value):
    """What changes when a module tensor's values are written (in place, or, for a global
    tensor, its piece replaced)."""
    if isinstance(value, _gt.GlobalTensor):
        local = value._local
        return (id(local), -1 if local is None else local._version)
    return (id(value), value._version)


def claim(graph):
    """After a call of ``graph`` that changed its variables: it holds their newest values."""
    ref = weakref.ref(graph)
    for full, value, *_ in graph._variables:
        _holders[id(value)] = (ref, full, value)


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
        if graph is None or graph is reader:
            continue
        del _holders[id(value)]
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


def module_values(module):
    """The parameters and buffers of ``module`` and its submodules."""
    return [t for m in module.modules() for registry in (m._parameters, m._buffers)
            for t in registry.values() if t is not None]
