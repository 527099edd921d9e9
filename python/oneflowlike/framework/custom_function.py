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
argument of forward (None for an argument that is not a tensor or needs none). Local tensors,
eagerly; inside nn.Graph.build and on global tensors it is refused (the compiler differentiates
the graph's ops, and would not call backward).
"""

from oneflowlike import _C
from oneflowlike.autograd import no_grad


class FunctionCtx:
    """What forward leaves for backward: saved tensors and any attributes set on it."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._saved = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self._saved = tuple(tensors)

    @property
    def saved_tensors(self):
        return self._saved

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_non_differentiable(self, *tensors):
        raise NotImplementedError("[autograd.Function] mark_non_differentiable is not supported: "
                                  "integer outputs never require grad; detach() a floating "
                                  "output returned for show.")


def _is_local(x):
    return isinstance(x, _C.Tensor)


class Function:
    """Subclass with static forward(ctx, *args) and backward(ctx, *grads); call apply(*args)."""

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
        for a in list(args) + list(kwargs.values()):
            if getattr(a, "is_global", False) or (_is_local(a) and _C._is_lazy(a)):
                raise NotImplementedError(
                    f"[autograd.Function] {name} runs on local tensors eagerly; inside "
                    "nn.Graph.build and on global tensors the compiler differentiates the ops "
                    "and would not call its backward. Write it with ops there.")
        ctx = FunctionCtx(tuple(_is_local(a) and a.requires_grad for a in args))
        with no_grad():
            outputs = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(outputs, tuple)
        outs = [outputs] if single else list(outputs)
        tensors = [o for o in outs if _is_local(o)]
        positions = [k for k, a in enumerate(args) if _is_local(a)]
        inputs = [args[k] for k in positions]
        if not tensors or not any(t.requires_grad for t in inputs) or not _C.is_grad_enabled():
            return outputs
        shapes = [(tuple(t.shape), t.dtype, t.device) for t in tensors]

        def backward(grads):
            if ctx.materialize_grads:
                grads = [g if g is not None else _C.fill(shape, dtype, 0.0, device)
                         for g, (shape, dtype, device) in zip(grads, shapes)]
            result = cls.backward(ctx, *grads)
            result = result if isinstance(result, tuple) else (result,)
            if len(result) != len(args):
                raise ValueError(f"[autograd.Function] {name}.backward returned {len(result)} "
                                 f"gradients; forward took {len(args)} arguments (one each, None "
                                 "for those without one).")
            return [result[k] for k in positions]

        _C._record_function(inputs, tensors, backward, name)
        return outputs
