"""Autograd of eager global tensors.

Note [Eager global autograd]: an eager op on global tensors is a compiled one-op graph
(global_tensor.apply), and so is its backward. When an op runs with grad enabled and an input
that requires grad, its outputs get a node holding the traced function and its inputs. At
backward() each node, last first, runs its VJP graph: the same function traced again over the
same inputs (marked differentiable) plus one input dy_j per output that has a gradient, given to
the compiler's autograd pass as out_j's gradient (Note [Given output gradients] in
compiler/passes/autograd.cpp), which fetches the inputs' gradients (Note [Input gradients]
there). So the gradient of every op
is the one the gradient registry gives nn.Graph, each gradient gets the SBP the op's gradient
signatures give (a broadcast parameter used under split data gets P), and the communication is
the compiler's boxing: no second path. Nothing is saved between the two graphs: the VJP graph
holds the forward op only where its gradient reads the op's outputs (softmax's does, matmul's
does not), and dead-code elimination drops it elsewhere; VJP graphs are cached by signature like
forward ones. A leaf's
gradient accumulates in whatever layout it arrives and is laid out as its tensor (P -> B: the
data-parallel all-reduce) when ``.grad`` is read, which the optimizer does. to_global is
differentiable too: its gradient is the gradient moved back to the input's layout.

Random ops are not differentiated this way: the compiled graph fixes its seed when it is traced,
so the recomputed forward would draw another mask (refused). F.dropout on global tensors is
therefore written with ops that need no random numbers in their backward (Note [Eager global
dropout] in global_dropout.py), and so is attention with dropout_p (op by op, ops/attention.py's
_eager_global); a random op compiled into another op's graph is refused at backward.
"""

from oneflowlike import _C
from oneflowlike import sbp as _sbp

RANDOM_OPS = {"dropout", "random_normal", "random_uniform"}  # op types

# Note [Saved forward values] in compiler/passes/autograd.cpp: forward key (global_tensor.apply)
# -> the names of the forward tensors its backward reads, learnt from the first VJP graph
# compiled for it; later forward calls fetch them, and their VJP graphs take them as inputs
# instead of computing the op again.
_saves = {}


def saves_of(key):
    return _saves.get(key, ())


def grad_enabled():
    return _C.is_grad_enabled()


def needs_grad(t):
    """Whether gradients flow into global tensor ``t`` (a leaf that requires grad, or an op's
    output computed from one)."""
    return t._grad_fn is not None or t.requires_grad


class _Node:
    """A recorded op: its inputs (global tensors) and what backward needs of its outputs."""

    def __init__(self, inputs, outputs):
        self.inputs = inputs
        self.diff = [i for i, t in enumerate(inputs)
                     if needs_grad(t) and _is_floating(t.dtype)]
        # The backward reruns the op on its inputs' pieces: they must be as they were.
        self.versions = [_version(t) for t in inputs]
        self.outputs = [(o.shape, o.dtype, o.placement) for o in outputs]
        for j, o in enumerate(outputs):
            if _is_floating(o.dtype):
                o._grad_fn, o._output_index = self, j
                o.requires_grad = True

    def vjp(self, dys):
        """The gradients of the inputs listed in self.diff (None where none flows), given the
        output gradients ``dys`` (None for outputs without one)."""
        raise NotImplementedError

    def check_unchanged(self, name):
        """Refuses a backward through inputs written in place since the forward (torch's
        version counter check): the recomputed forward would differentiate other values."""
        for i, (t, v) in enumerate(zip(self.inputs, self.versions)):
            if _version(t) != v:
                raise RuntimeError(
                    f"[autograd] input {i} {t.shape} of '{name}' was modified in place after "
                    "the op used it (an optimizer step, copy_, an assignment): its gradient "
                    "would be of the new values. Run backward() before modifying it.")


class OpNode(_Node):
    def __init__(self, fn, structure, leaves, key, name, outputs, op_types, saved=None):
        super().__init__(leaves, outputs)
        self.fn, self.structure, self.key, self.name = fn, structure, key, name
        self.random = bool(RANDOM_OPS & set(op_types))
        self.autocast = key[-1]  # the forward's autocast dtype (global_tensor.apply's key)
        # Note [Saved forward values]: (name, this rank's piece, layout) of each value the
        # forward fetched, and the piece's version. Pieces, not the global tensors: an output
        # holding its node, and the node it, would keep both until the cycle collector ran.
        self.saved = [(name, t._local, t.sbp) for name, t in sorted((saved or {}).items())]
        self.saved_versions = [None if p is None else p._version for _, p, _ in self.saved]

    def _saved_values(self):
        """The saved values. One written in place since (an output the caller modified) is
        refused as a modified input is (check_unchanged): every rank must take the same graph,
        and the ranks outside the placement, which hold no piece, cannot tell."""
        for (_, piece, _), version in zip(self.saved, self.saved_versions):
            if piece is not None and piece._version != version:
                raise RuntimeError(
                    f"[autograd] an output of '{self.name}' was modified in place after the op "
                    "made it, and its backward reads it: the gradient would be of the new "
                    "values. Run backward() before modifying it.")
        return self.saved

    def vjp(self, dys):
        from oneflowlike.framework import global_tensor as gt

        self.check_unchanged(self.name)
        if self.random:
            raise RuntimeError(
                f"[autograd] '{self.name}' on global tensors draws random numbers in a compiled "
                "graph: its backward would draw others. Train models with random ops on global "
                "tensors through nn.Graph.")
        given = [j for j, dy in enumerate(dys) if dy is not None]
        saved = self._saved_values()
        key = ("vjp", self.key, tuple(self.diff),
               tuple((j, dys[j].dtype, dys[j].sbp) for j in given),
               tuple((name, sbp) for name, _, sbp in saved))
        compiled = gt.cached(key)
        placement = self.inputs[0].placement
        if compiled is None or compiled.broken:
            gt.retire(compiled)
            compiled = gt._cache[key] = _compile_vjp(self, given, dys, placement, saved)
        if not saved and compiled.backward_reads and self.key not in _saves:
            _saves[self.key] = tuple(compiled.backward_reads)  # saved from the next forward on
        rank = compiled.rank
        pieces = {f"in{i}": {rank: t._local} for i, t in enumerate(self.inputs)
                  if t._local is not None}
        for j in given:
            if dys[j]._local is not None:
                pieces[f"dy{j}"] = {rank: dys[j]._local}
        for k, (_, piece, _) in enumerate(saved):
            if piece is not None:
                pieces[f"saved{k}"] = {rank: piece}
        grads = compiled.run(pieces)
        # The pieces go with this backward (a second one, retain_graph=True, computes them).
        self.saved, self.saved_versions = [], []
        return grads


def _compile_vjp(node, given, dys, placement, saved=()):
    from oneflowlike.framework import global_tensor as gt

    tracer = gt._Tracer("global_vjp", placement)
    tracer.set_constants_allowed(False)
    # The op is traced again as the forward traced it: under the forward's autocast dtype, not
    # the one backward() runs under (Note [Eager autocast] in autocast.h).
    previous = _C.autocast_dtype()
    _C.set_autocast_dtype(node.autocast)
    try:
        return _trace_vjp(node, given, dys, placement, tracer, saved)
    finally:
        _C.set_autocast_dtype(previous)


def _trace_vjp(node, given, dys, placement, tracer, saved):
    import oneflowlike as flow
    from oneflowlike.framework import global_tensor as gt

    with flow.no_grad(), gt.tracing(tracer.c, tracer):
        lazies = [tracer.input(f"in{i}", t.shape, t.dtype, placement._c, gt._strings(t.sbp))
                  for i, t in enumerate(node.inputs)]
        for i in node.diff:
            tracer.differentiable(lazies[i])
        args, kwargs = gt._unflatten(node.structure, lazies)
        out = node.fn(*args, **kwargs)
        outs = [out] if not isinstance(out, (tuple, list)) else list(out)
        for j in given:
            dy = tracer.input(f"dy{j}", dys[j].shape, dys[j].dtype, placement._c,
                              gt._strings(dys[j].sbp))
            tracer.set_output_grad(outs[j], dy)
    for k, (name, _, sbp) in enumerate(saved):  # Note [Saved forward values]
        tracer.give(name, f"saved{k}", gt._strings(sbp))
    names = [f"in{i}" for i in node.diff]
    metas = [(placement, node.inputs[i].shape, node.inputs[i].dtype) for i in node.diff]
    return gt._Compiled(tracer, None, metas, grads_of=names)


class ReshardNode(_Node):
    """x.to_global(...): the gradient is dy laid out as x was."""

    def __init__(self, x, out):
        super().__init__([x], [out])
        self.placement, self.sbp = x.placement, x.sbp

    def vjp(self, dys):
        return [dys[0].to_global(placement=self.placement, sbp=self.sbp)]


# Note [Gradients laid out together]: a leaf's gradient arrives in whatever layout the gradient
# signatures give (a replicated parameter under split data: P) and is laid out as the leaf when
# `.grad` is read, which the optimizer and clip_grad_norm_ do parameter by parameter. Each layout
# was a compiled graph of its own, run with a collective that every rank waits for: one run per
# parameter. So a leaf whose gradient waits to be laid out is listed here, in the order backward
# reached it (the same on every rank: every rank runs the same program), and the first read lays
# out every listed gradient of its placement in one graph, whose collectives run together (as
# DDP reduces its buckets together). Reading .grad inside a gradient accumulation loop lays out
# what is there; later backward passes add to the laid-out sums, which stay correct. The list
# holds the leaves themselves, not weak references: a leaf freed by the cycle collector could be
# gone on one rank and not yet on another, and the ranks would then compile different batches
# (a hang); a leaf the program drops is kept until the next read lays it out.
_pending = {}  # id -> leaf, in the order their gradients became pending (held: ids stay valid)


def pending_grad(leaf):
    _pending.setdefault(id(leaf), leaf)


def lay_out_pending_grads(leaf):
    """Lays out ``leaf``'s gradient and every other pending one whose gradient lies on the same
    placement, in one compiled graph (Note [Gradients laid out together])."""
    global _pending
    import oneflowlike as flow
    from oneflowlike.framework import global_tensor as gt

    placement = leaf._grad.placement
    batch, rest = [], {}
    for key, t in _pending.items():
        if t._grad_laid_out():
            continue
        if t._grad.placement == placement:
            batch.append(t)
        else:
            rest[key] = t
    if not any(t is leaf for t in batch):
        batch.append(leaf)
    _pending = rest
    with flow.no_grad():
        laid_out = gt.reshard_many([(t._grad, t.placement, t.sbp) for t in batch])
    for t, g in zip(batch, laid_out):
        t._grad = g


def _version(t):
    local = t._local
    return None if local is None else local._version


def _is_floating(dtype):
    return dtype in (_C.dtype.float32, _C.dtype.float64, _C.dtype.float16, _C.dtype.bfloat16)


def _add(a, b):
    if a is None:
        return b
    return a + b


def backward(root, gradient=None):
    """Accumulates d(root)/d(leaf) into the .grad of every global leaf that requires grad."""
    import oneflowlike as flow

    if not needs_grad(root):
        raise RuntimeError("[backward] the tensor does not require grad: none of the global "
                           "tensors it was computed from requires grad.")
    if gradient is None:
        if root.numel() != 1:
            raise RuntimeError(f"[backward] grad can be implicitly created only for a tensor of "
                               f"one element. However, got shape {root.shape}: pass gradient=.")
        gradient = flow.ones(root.shape, dtype=root.dtype, placement=root.placement,
                             sbp=(_sbp.broadcast,) * len(root.placement.hierarchy))
    with flow.no_grad():
        if root._grad_fn is None:  # a leaf
            root._accumulate(gradient)
            return
        order = _topological(root._grad_fn)
        pending = {id(root._grad_fn): [None] * len(root._grad_fn.outputs)}
        pending[id(root._grad_fn)][root._output_index] = gradient
        for node in order:
            dys = pending.pop(id(node), None)
            if dys is None or all(dy is None for dy in dys):
                continue
            grads = node.vjp(dys)
            for i, g in zip(node.diff, grads):
                if g is None:
                    continue
                x = node.inputs[i]
                if x._grad_fn is not None:
                    slots = pending.setdefault(id(x._grad_fn), [None] * len(x._grad_fn.outputs))
                    slots[x._output_index] = _add(slots[x._output_index], g)
                elif x.requires_grad:
                    x._accumulate(g)


def _topological(start):
    """Nodes reachable from ``start``, each before the nodes of its inputs."""
    seen, post = set(), []
    stack = [(start, False)]
    while stack:
        node, done = stack.pop()
        if done:
            post.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for i in node.diff:
            parent = node.inputs[i]._grad_fn
            if parent is not None and id(parent) not in seen:
                stack.append((parent, False))
    return post[::-1]
