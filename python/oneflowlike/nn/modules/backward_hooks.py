"""Backward hooks of modules, as torch's register_full_backward_hook(hook) and
register_full_backward_pre_hook(hook):

- a pre-hook runs hook(module, grad_output) once the gradients of the module's outputs are
  known, and may return replacements;
- a hook runs hook(module, grad_input, grad_output) once the gradients of its positional tensor
  inputs are (None for an input that needs none), and may return replacements for grad_input.

Note [Module backward hooks]: as torch's BackwardHook, the call wraps the inputs that require
grad and the outputs in identity autograd Functions (Note [Custom backward]) whose backwards
see those gradients: the outputs' first, then, after the module's own ops, the inputs'. Where no
input requires grad, the hooks run with the outputs' gradients and grad_input all None. Each
identity is a copy of the tensors it wraps. Local tensors, eagerly: inside nn.Graph.build the
compiler differentiates the graph and would not call them, so a graph refuses them.
"""

from oneflowlike import _C
from oneflowlike.framework.custom_function import Function


class _State:
    def __init__(self, module, count, inputs_need_grad):
        self.module = module
        self.count = count  # positional tensor inputs
        self.inputs_need_grad = inputs_need_grad
        self.grad_output = None


def _hooks(module, attribute):
    return [hook for hook, _ in list(module.__dict__.get(attribute, {}).values())]


def _run_full_hooks(state, grad_input):
    for hook in _hooks(state.module, "_backward_hooks"):
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
        return tuple(o.clone() for o in outputs)

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        for hook in _hooks(state.module, "_backward_pre_hooks"):
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
        return tuple(x.clone() for x in inputs)

    @staticmethod
    def backward(ctx, *grads):
        grad_input = [None] * ctx.state.count
        for place, g in zip(ctx.places, grads):
            grad_input[place] = g
        grad_input = _run_full_hooks(ctx.state, tuple(grad_input))
        return (None, None) + tuple(grad_input[place] for place in ctx.places)


def wanted(module):
    return bool(module.__dict__.get("_backward_hooks") or
                module.__dict__.get("_backward_pre_hooks"))


def call(module, args, kwargs, forward):
    """forward(args, kwargs) with the module's backward hooks wrapped around it."""
    for a in list(args) + list(kwargs.values()):
        if getattr(a, "is_global", False) or (isinstance(a, _C.Tensor) and _C._is_lazy(a)):
            raise NotImplementedError(
                f"[register_full_backward_hook] {type(module).__name__} has backward hooks, "
                "which run on local tensors eagerly: inside nn.Graph.build and on global "
                "tensors the compiler differentiates the graph and would not call them.")
    if not _C.is_grad_enabled():
        return forward(args, kwargs)
    tensor_places = [k for k, a in enumerate(args) if isinstance(a, _C.Tensor)]
    places = [k for k in tensor_places if args[k].requires_grad]
    state = _State(module, len(tensor_places), bool(places))
    if places:
        # grad_input follows the positional tensor inputs; ``places`` index into them.
        wrapped = _InputGradients.apply(state, [tensor_places.index(k) for k in places],
                                        *[args[k] for k in places])
        args = list(args)
        for k, w in zip(places, wrapped):
            args[k] = w
        args = tuple(args)
    output = forward(args, kwargs)
    single = isinstance(output, _C.Tensor)
    outs = [output] if single else list(output) if isinstance(output, tuple) else None
    if outs is None or not all(isinstance(o, _C.Tensor) for o in outs):
        raise TypeError(f"[register_full_backward_hook] {type(module).__name__} must return a "
                        f"tensor or a tuple of tensors. However, it returned "
                        f"{type(output).__name__}.")
    if not any(o.requires_grad for o in outs):
        return output
    wrapped = _OutputGradients.apply(state, *outs)
    return wrapped[0] if single else tuple(wrapped)
