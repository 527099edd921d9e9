"""Activation checkpointing in eager code (torch.utils.checkpoint.checkpoint): the function's
intermediate tensors are not kept; backward runs it again, with the random state it first ran
with (the same dropout masks), and differentiates that.

Note [Eager checkpoints]: an autograd.Function (Note [Custom backward]) whose forward runs the
function without recording history and whose backward recomputes it with history from the
saved inputs (detached, requiring grad where they did) and runs a backward pass of its own
from the outputs. The parameters the function uses are leaves of that recomputation, so their
gradients accumulate into .grad there, as torch's reentrant checkpoint does. In nn.Graph,
checkpointing is the graph's config (graph.config.activation_checkpointing per module).
"""

from oneflowlike import _C
from oneflowlike.autograd import enable_grad
from oneflowlike.framework.custom_function import Function

__all__ = ["checkpoint"]


class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, function, preserve_rng_state, kwargs, *args):
        import oneflowlike as flow

        ctx.function, ctx.kwargs = function, kwargs
        ctx.rng_state = flow.get_rng_state() if preserve_rng_state else None
        ctx.save_for_backward(*args)
        outputs = function(*args, **kwargs)
        ctx.single = not isinstance(outputs, tuple)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        import oneflowlike as flow

        inputs = []
        for a in ctx.saved_tensors:
            if isinstance(a, _C.Tensor):
                d = a.detach()
                d.requires_grad = a.requires_grad
                a = d
            inputs.append(a)
        now = flow.get_rng_state()
        if ctx.rng_state is not None:
            flow.set_rng_state(ctx.rng_state)
        try:
            with enable_grad():
                outputs = ctx.function(*inputs, **ctx.kwargs)
        finally:
            flow.set_rng_state(now)
        outputs = [outputs] if ctx.single else list(outputs)
        roots, seeds = [], []
        for out, g in zip(outputs, grads):
            if isinstance(out, _C.Tensor) and out.requires_grad and g is not None:
                roots.append(out)
                seeds.append(g)
        if roots:
            _C.autograd_backward(roots, seeds, False)  # not flow.autograd.backward: no
            # after-backward work (DDP's all-reduce) belongs to this inner pass
        return (None, None, None) + tuple(
            a.grad if isinstance(a, _C.Tensor) and a.requires_grad else None for a in inputs)


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """function(*args, **kwargs), keeping only its inputs for backward (Note [Eager
    checkpoints]). use_reentrant is accepted for torch's signature; both forms behave alike
    here."""
    if not callable(function):
        raise TypeError(f"[checkpoint] function must be callable. However, got "
                        f"{type(function).__name__}.")
    return CheckpointFunction.apply(function, preserve_rng_state, kwargs, *args)
