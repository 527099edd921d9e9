"""Backward hooks of modules, as torch's register_full_backward_hook(hook) and
register_full_backward_pre_hook(hook):

- a pre-hook runs hook(module, grad_output) once the gradients of the module's outputs are
  known (None for an output no gradient reached), and may return replacements;
- a hook runs hook(module, grad_input, grad_output) once the gradients of its positional inputs
  are (one per positional argument, None where it is not a tensor or needs none), and may
  return replacements for grad_input.

Note [Module backward hooks]: as torch's BackwardHook, the call wraps the inputs that require
grad and, after the forward hooks, the outputs that require grad in identity autograd
Functions (Note [Custom backward]) whose backwards see those gradients: the outputs' first,
then, after the module's own ops, the inputs'. The identities alias what they wrap (in-place
writes into tensors that require grad are refused anyway). The hooks are the ones registered
when the module ran, as torch's. Where no input requires grad, the hooks run with the outputs'
gradients and grad_input all None; where no gradient reached the outputs, they do not run.
Local tensors, eagerly: inside nn.Graph.build the compiler differentiates the graph and would
not call them, so a graph refuses them.
"""

from oneflowlike import _C
from oneflowlike.framework.custom_function import Function


class _State:
    def __init__(self, module, count, inputs_need_grad):
        self.module = module
        self.count = count  # positional arguments
        self.inputs_need_grad = inputs_need_grad
        self.grad_output = None
        self.pre_hooks = _hooks(module, "_backward_pre_hooks")
        self.hooks = _hooks(module, "_backward_hooks")


def _hooks(module, attribute):
    return [hook for hook, _ in list(module.__dict__.get(attribute, {}).values())]


def _run_full_hooks(state, grad_input):
    for hook in state.hooks:
        result = hook(state.module, grad_input, state.grad_output)
        if result is not None:
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            if len(result) != len(grad_input):
                raise ValueError(f"[backward_hook] a hook returned {len(result)} gradients for "
                                 f"{len(grad_input)} inputs of {type(state.module).__name__}.")
            grad_input = result
    return grad_input


class _OutputGradients(Function):
    @staticmethod
    def forward(ctx, state, *outputs):
        ctx.state = state
        ctx.set_materialize_grads(False)  # an output no gradient reached stays None, as torch
        return tuple(o.detach() for o in outputs)

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        for hook in state.pre_hooks:
            result = hook(state.module, grads)
            if result is not None:
                grads = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        state.grad_output = grads
        if not state.inputs_need_grad:
            _run_full_hooks(state, (None,) * state.count)
        return (None,) + tuple(grads)


class _InputGradients(Function):
    @staticmethod
    def forward(ctx, state, places, *inputs):
        ctx.state, ctx.places = state, places
        ctx.set_materialize_grads(False)
        return tuple(x.detach() for x in inputs)

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        if state.grad_output is None:  # reached without passing the outputs: no hooks, as torch
            return (None, None) + grads
        grad_input = [None] * state.count
        for place, g in zip(ctx.places, grads):
            grad_input[place] = g
        grad_input = _run_full_hooks(state, tuple(grad_input))
        state.grad_output = None  # a later backward reaching the inputs alone runs no hooks
        return (None, None) + tuple(grad_input[place] for place in ctx.places)


def wanted(module):
    return bool(module.__dict__.get("_backward_hooks") or
                module.__dict__.get("_backward_pre_hooks"))


def wrap_inputs(module, args, kwargs):
    """(state, args): the positional inputs that require grad wrapped (Note [Module backward
    hooks]); state None where grad mode is off."""
    for a in list(args) + list(kwargs.values()):
        if getattr(a, "is_global", False) or (isinstance(a, _C.Tensor) and _C._is_lazy(a)):
            raise NotImplementedError(
                f"[register_full_backward_hook] {type(module).__name__} has backward hooks, "
                "which run on local tensors eagerly: inside nn.Graph.build and on global "
                "tensors the compiler differentiates the graph and would not call them.")
    if not _C.is_grad_enabled():
        return None, args
    places = [k for k, a in enumerate(args) if isinstance(a, _C.Tensor) and a.requires_grad]
    state = _State(module, len(args), bool(places))
    if places:
        wrapped = _InputGradients.apply(state, places, *[args[k] for k in places])
        args = list(args)
        for k, w in zip(places, wrapped):
            args[k] = w
        args = tuple(args)
    return state, args


def wrap_outputs(state, output):
    """``output`` with its tensors that require grad wrapped (after the forward hooks)."""
    single = isinstance(output, _C.Tensor)
    outs = [output] if single else list(output) if isinstance(output, tuple) else None
    if outs is None:
        raise TypeError(f"[register_full_backward_hook] {type(state.module).__name__} must "
                        f"return a tensor or a tuple. However, it returned "
                        f"{type(output).__name__}.")
    places = [k for k, o in enumerate(outs) if isinstance(o, _C.Tensor) and o.requires_grad]
    if not places:
        return output
    wrapped = _OutputGradients.apply(state, *[outs[k] for k in places])
    for k, w in zip(places, wrapped):
        outs[k] = w
    return outs[0] if single else tuple(outs)
