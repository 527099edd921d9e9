"""Activation checkpointing in eager code (torch.utils.checkpoint.checkpoint): the function's
intermediate tensors are not kept; backward runs it again, with the random state it first ran
with (the same dropout masks), and differentiates that.

Note [Eager checkpoints]: an autograd.Function (Note [Custom backward]) whose forward runs the
function without recording history and whose backward recomputes it with history from the
saved inputs (detached, requiring grad where they did) and runs a backward pass of its own
from the outputs. The parameters the function uses are leaves of that recomputation, so their
gradients accumulate into .grad there, as torch's reentrant checkpoint does (so it refuses to
run inside flow.autograd.grad, which must leave .grad alone). The random state is the process's
one generator: draws on other threads between the forward and the recomputation shift it. In
nn.Graph,
checkpointing is the graph's config (graph.config.activation_checkpointing per module).
"""

from oneflowlike import _C
from oneflowlike.autograd import enable_grad
from oneflowlike.framework.custom_function import Function

__all__ = ["checkpoint"]


class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, function, rng_state, keys, count, *values):
        ctx.function, ctx.keys, ctx.count = function, keys, count
        ctx.rng_state = rng_state
        ctx.values = values  # tensors among them are saved too (checked against writes)
        ctx.save_for_backward(*[v for v in values if isinstance(v, _C.Tensor)])
        args, kwargs = _split(values, keys, count)
        outputs = function(*args, **kwargs)
        ctx.single = not isinstance(outputs, tuple)
        # Outputs the first run found needing no gradient stay so (checkpoint's probe).
        listed = (outputs,) if ctx.single else outputs
        ctx.mark_non_differentiable(*[listed[k] for k in getattr(function, "no_grad_outputs",
                                                                 ())])
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        import oneflowlike as flow

        if _C._computing_gradients_of_inputs():
            raise RuntimeError("[checkpoint] cannot recompute inside flow.autograd.grad: its "
                               "recomputation accumulates into .grad. Use backward(), or "
                               "no checkpoint.")
        saved = iter(ctx.saved_tensors)  # checks that no input was written since
        values = []
        for v in ctx.values:
            if isinstance(v, _C.Tensor):
                next(saved)
                d = v.detach()
                d.requires_grad = v.requires_grad
                v = d
            values.append(v)
        args, kwargs = _split(values, ctx.keys, ctx.count)
        now = flow.get_rng_state()
        if ctx.rng_state is not None:
            flow.set_rng_state(ctx.rng_state)
        try:
            with enable_grad():
                outputs = ctx.function(*args, **kwargs)
        finally:
            flow.set_rng_state(now)
        outputs = [outputs] if ctx.single else list(outputs)
        roots, seeds = [], []
        for out, g in zip(outputs, grads):  # one gradient per output, None for non-tensors
            if isinstance(out, _C.Tensor) and out.requires_grad and g is not None:
                roots.append(out)
                seeds.append(g)
        if roots:
            _C.autograd_backward(roots, seeds, False)  # not flow.autograd.backward: no
            # after-backward work (DDP's all-reduce) belongs to this inner pass
        return (None, None, None, None) + tuple(
            v.grad if isinstance(v, _C.Tensor) and v.requires_grad else None for v in values)


def _split(values, keys, count):
    """(args, kwargs) of the flat ``values``: ``count`` positional ones, then ``keys``'."""
    return tuple(values[:count]), dict(zip(keys, values[count:]))


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """function(*args, **kwargs), keeping only its inputs for backward (Note [Eager
    checkpoints]); tensors passed by keyword are inputs too, and a list of outputs comes back a
    list. use_reentrant is accepted for torch's signature; both forms behave alike here: the
    function's parameters get their gradients even where no input needs one."""
    if not callable(function):
        raise TypeError(f"[checkpoint] function must be callable. However, got "
                        f"{type(function).__name__}.")
    listed = []

    def as_tuple(*a, **k):  # a list of outputs goes through as a tuple, and comes back a list
        out = function(*a, **k)
        if isinstance(out, list):
            listed.append(True)
            return tuple(out)
        return out

    out = _checkpoint(as_tuple, args, kwargs, preserve_rng_state)
    return list(out) if listed else out


def _checkpoint(function, args, kwargs, preserve_rng_state):
    import oneflowlike as flow

    keys = tuple(kwargs)
    values = tuple(args) + tuple(kwargs.values())
    rng_state = flow.get_rng_state() if preserve_rng_state else None
    if not _C.is_grad_enabled() or any(
            isinstance(v, _C.Tensor) and v.requires_grad for v in values):
        return CheckpointFunction.apply(function, rng_state, keys, len(args), *values)
    # Nothing given needs a gradient: whether the result does (through the function's
    # parameters) shows only by running it with history. That run's outputs are kept without
    # it; an empty input that requires grad gives the node backward recomputes from.
    with enable_grad():
        probe = function(*args, **kwargs)
    outs = probe if isinstance(probe, tuple) else (probe,)
    if not any(isinstance(o, _C.Tensor) and o.requires_grad for o in outs):
        return probe
    kept = [tuple(o.detach() if isinstance(o, _C.Tensor) else o for o in outs)]
    single = not isinstance(probe, tuple)
    no_grad_outputs = [k for k, o in enumerate(outs)
                       if isinstance(o, _C.Tensor) and not o.requires_grad]
    del probe, outs

    def first_then_again(*a, _anchor=None, **k):
        if kept:
            done = kept.pop()
            return done[0] if single else done
        return function(*a, **k)

    first_then_again.no_grad_outputs = no_grad_outputs
    anchor = _C.fill((0,), _C.dtype.float32, 0.0)
    anchor.requires_grad = True
    return CheckpointFunction.apply(first_then_again, rng_state, keys + ("_anchor",), len(args),
                                    *values, anchor)
