"""Grad-mode switches, as in torch: ``with flow.no_grad(): ...``."""

import functools

from oneflowlike import _C


class _GradModeContext:
    """Context manager and decorator that sets grad mode and restores it on exit."""

    _mode = True

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C.set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):  # noqa: N801 (torch's name)
    """Ops inside record no autograd history."""

    _mode = False


class enable_grad(_GradModeContext):  # noqa: N801
    """Ops inside record autograd history even within no_grad."""

    _mode = True


class inference_mode(_GradModeContext):  # noqa: N801
    """torch.inference_mode: no autograd history inside (here the same as no_grad; the
    tensors made inside are ordinary tensors). ``inference_mode(False)`` changes nothing."""

    def __init__(self, mode=True):
        if not isinstance(mode, bool):  # @inference_mode without parentheses
            raise TypeError("[inference_mode] use it as inference_mode() or "
                            "inference_mode(mode) with a bool.")
        self._inference = mode

    def __enter__(self):
        self._mode = False if self._inference else _C.is_grad_enabled()
        return super().__enter__()

    def __call__(self, fn):
        inference = self._inference

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(inference):
                return fn(*args, **kwargs)

        return wrapper


class set_grad_enabled(_GradModeContext):  # noqa: N801
    """Sets grad mode to ``mode`` (usable as a call or a context manager)."""

    def __init__(self, mode=True):
        self._mode = mode
        self._previous = _C.is_grad_enabled()
        _C.set_grad_enabled(mode)

    def __enter__(self):
        return self


def is_grad_enabled():
    return _C.is_grad_enabled()


def backward(tensors, grad_tensors=None, retain_graph=False):
    """Accumulates gradients of ``tensors`` into the leaves (torch.autograd.backward)."""
    if not isinstance(tensors, (list, tuple)):
        tensors = [tensors]
    grads = list(grad_tensors) if grad_tensors is not None else []
    with after_backward():
        _C.autograd_backward(list(tensors), grads, retain_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False):
    """torch.autograd.grad on local tensors (Note [Gradients of inputs] in autograd.h): the
    gradients of ``outputs`` (weighted by ``grad_outputs``) with respect to each of ``inputs``,
    as a tuple, leaving every .grad as it is. An input the outputs do not reach is an error
    unless allow_unused (then None, or zeros with materialize_grads)."""
    if create_graph:
        raise NotImplementedError("[autograd.grad] create_graph=True (double backward) is not "
                                  "supported: gradients are computed without history.")
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    single = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single else list(inputs)
    grads = [] if grad_outputs is None else (
        list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [grad_outputs])
    for t in outputs + inputs:
        if not isinstance(t, _C.Tensor) or _C._is_lazy(t):
            raise TypeError(f"[autograd.grad] takes local tensors outside nn.Graph.build. "
                            f"However, got {getattr(t, 'shape', type(t).__name__)!r} "
                            f"({type(t).__name__}).")
    result = _C.autograd_grad(outputs, [g for g in grads], inputs, bool(retain_graph))
    if materialize_grads:
        allow_unused = True
    for k, (g, x) in enumerate(zip(result, inputs)):
        if g is None and not allow_unused:
            raise RuntimeError(f"[autograd.grad] input {k} (shape {tuple(x.shape)}) is not "
                               "reached from the outputs: pass allow_unused=True to get None.")
        if g is None and materialize_grads:
            result[k] = _C.fill(tuple(x.shape), x.dtype, 0.0, x.device)
    return tuple(result)


# Note [After backward]: work that must follow a whole backward pass of eager local autograd,
# once every gradient has accumulated (DistributedDataParallel's gradient all-reduce, torch's
# queue_callback): queued by key, so several forwards queue one run; run, and cleared, by
# Tensor.backward and flow.autograd.backward when the pass is done. A pass that raises clears
# the queue: its work must not attach to a later, unrelated pass.
_after_backward = {}


def queue_after_backward(key, fn):
    """Runs ``fn()`` once after the next backward pass (the last ``fn`` queued under ``key``)."""
    _after_backward[key] = fn


class after_backward:  # noqa: N801 (a context manager, used as a statement)
    """Around one backward pass: runs the queued work after it, or drops it if the pass
    raises."""

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        if kind is not None:
            _after_backward.clear()
            return False
        while _after_backward:
            key = next(iter(_after_backward))
            _after_backward.pop(key)()
        return False


def __getattr__(name):
    # flow.autograd.Function lives in framework/custom_function.py, which imports this module.
    if name in ("Function", "FunctionCtx"):
        from oneflowlike.framework import custom_function

        return getattr(custom_function, name)
    raise AttributeError(f"module 'oneflowlike.autograd' has no attribute {name!r}")
