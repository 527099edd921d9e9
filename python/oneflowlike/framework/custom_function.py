"""flow.autograd.Function: an op written in Python with its own backward, as torch's:

    class Exp(flow.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            (y,) = ctx.saved_tensors
            return dy * y

    y = Exp.apply(x)

forward runs without recording autograd history; its outputs get one node (Note [Custom
backward] in oneflowlike/autograd.h) whose gradient calls backward with the outputs' gradients
(zeros where none reached an output, as torch's materialize_grads) and returns one gradient per
argument of forward (None for an argument that is not a tensor or needs none; a gradient for
an input that needs none is dropped, as torch's). Saved tensors are checked against in-place
changes, as the built-in ops' are (Note [Versions]). Local tensors,
eagerly; inside nn.Graph.build and on global tensors it is refused (the compiler differentiates
the graph's ops, and would not call backward).
"""

import inspect

from oneflowlike import _C
from oneflowlike.autograd import no_grad


class FunctionCtx:
    """What forward leaves for backward: saved tensors and any attributes set on it."""

    def __init__(self, name, needs_input_grad):
        self._name = name
        self.needs_input_grad = needs_input_grad
        self._saved = ()
        self._versions = ()
        self._non_differentiable = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        for k, t in enumerate(tensors):
            if t is not None and not isinstance(t, _C.Tensor):
                raise TypeError(f"[autograd.Function] {self._name}: save_for_backward takes "
                                f"tensors (or None); argument {k} is {type(t).__name__}. Keep "
                                "other values as attributes of ctx.")
        self._saved = tuple(tensors)
        self._versions = tuple(None if t is None else t._version for t in tensors)

    @property
    def saved_tensors(self):
        for k, (t, version) in enumerate(zip(self._saved, self._versions)):
            if t is not None and t._version != version:
                raise RuntimeError(
                    f"[autograd.Function] {self._name}: saved tensor {k} ({t._describe()}) was "
                    f"modified by an in-place operation after save_for_backward (version "
                    f"{t._version}, saved at {version}). Change it out of place, or clone() it "
                    "before writing.")
        return self._saved

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_non_differentiable(self, *tensors):
        """These outputs need no gradient (indices, masks): they come back not requiring one,
        and backward gets zeros for them (None without materialize_grads), as torch's."""
        self._non_differentiable = {id(t) for t in tensors}


def _is_local(x):
    return isinstance(x, _C.Tensor)


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads); call apply(*args).
    Keyword arguments are bound to forward's parameters (as torch's), so a tensor passed by
    keyword is an input like one passed by position."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("[autograd.Function] a subclass must define forward(ctx, ...).")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("[autograd.Function] a subclass must define backward(ctx, "
                                  "...) to be differentiated.")

    @classmethod
    def apply(cls, *args, **kwargs):
        name = cls.__name__
        if kwargs:
            bound = inspect.signature(cls.forward).bind(None, *args, **kwargs)
            args, kwargs = bound.args[1:], bound.kwargs
            for key, value in kwargs.items():
                if _is_local(value) and value.requires_grad:
                    raise TypeError(f"[autograd.Function] {name}.forward takes {key!r} by "
                                    "keyword only, and a tensor passed so would get no "
                                    "gradient: make it a positional parameter.")
        for a in list(args) + list(kwargs.values()):
            if getattr(a, "is_global", False) or (_is_local(a) and _C._is_lazy(a)):
                raise NotImplementedError(
                    f"[autograd.Function] {name} runs on local tensors eagerly; inside "
                    "nn.Graph.build and on global tensors the compiler differentiates the ops "
                    "and would not call its backward. Write it with ops there.")
        ctx = FunctionCtx(name, tuple(_is_local(a) and a.requires_grad for a in args))
        with no_grad():
            outputs = cls.forward(ctx, *args, **kwargs)
        if isinstance(outputs, list) and any(_is_local(o) for o in outputs):
            raise TypeError(f"[autograd.Function] {name}.forward returned a list: return a "
                            "tensor or a tuple of them (a list is one value without a "
                            "gradient, and its tensors would get none).")
        single = not isinstance(outputs, tuple)
        outs = [outputs] if single else list(outputs)
        tensor_places = [k for k, o in enumerate(outs) if _is_local(o)]
        places = [k for k in tensor_places if id(outs[k]) not in ctx._non_differentiable]
        recorded = [outs[k] for k in places]
        positions = [k for k, a in enumerate(args) if _is_local(a) and a.requires_grad]
        inputs = [args[k] for k in positions]
        if not recorded or not inputs or not _C.is_grad_enabled():
            return outputs
        # An input returned as it is comes back as a new tensor on the same storage (torch's
        # view), which the node can make its output.
        given = list(args) + list(kwargs.values())
        for k in places:
            if any(outs[k] is a for a in given):
                outs[k] = outs[k].detach()
        recorded = [outs[k] for k in places]
        outputs = outs[0] if single else tuple(outs)
        # A saved output is kept without its history: ctx -> output -> its node -> backward ->
        # ctx would be a cycle through C++ that no collector sees.
        ctx._saved = tuple(t.detach() if any(t is o for o in recorded) else t
                           for t in ctx._saved)
        metas = {k: (tuple(outs[k].shape), outs[k].dtype, outs[k].device)
                 for k in tensor_places}
        # What backward needs, and no tensor: the node keeps backward, and an output it kept
        # would keep the node (a cycle through C++).
        n_outputs = len(outs)
        arg_kinds = [None if _is_local(a) else type(a).__name__ for a in args]

        def backward(grads):
            full = [None] * n_outputs
            for k, g in zip(places, grads):
                full[k] = g
            if ctx.materialize_grads:  # zeros for tensors no gradient reached, as torch's
                for k, (shape, dtype, device) in metas.items():
                    if full[k] is None:
                        full[k] = _C.fill(shape, dtype, 0.0, device)
            result = cls.backward(ctx, *full)
            result = result if isinstance(result, tuple) else (result,)
            if len(result) != len(arg_kinds):
                raise ValueError(f"[autograd.Function] {name}.backward returned {len(result)} "
                                 f"gradients; forward took {len(arg_kinds)} arguments (one each, "
                                 "None for those without one).")
            for k, (g, kind) in enumerate(zip(result, arg_kinds)):
                if g is not None and kind is not None:
                    raise TypeError(f"[autograd.Function] {name}.backward returned a gradient "
                                    f"for argument {k}, which is not a tensor ({kind}): return "
                                    "None there.")
            return [result[k] for k in positions]

        _C._record_function(inputs, recorded, backward, name)
        return outputs
