"""In-place writes with torch's names: zero_, fill_, copy_, add_, sub_, mul_, div_ and item
assignment (``t[0, 1] = v``, ``t[mask] = v``).

Each computes the new value with the ordinary ops, then writes it into the tensor's storage
(``_C._assign_``), which bumps the storage's version so that autograd refuses a backward that
would read a value it saved before the write (Note [Versions] in oneflowlike/tensor.h). As in
torch, the value broadcasts to the tensor's shape and is cast to its dtype (arithmetic refuses
a floating result for an integer or bool tensor; copies and assignments cast). A tensor that
requires grad is written only under no_grad, and a copy that indexing made (torch would give a
view) is not written at all: the write would not reach the indexed tensor. On a global tensor the new value is one compiled op over its placement,
laid out as the tensor and written piece by piece. Inside nn.Graph.build() only a module's
buffers are written in place (BatchNorm's running statistics): later reads in the trace see the
new value and the plan writes it at the end of each iteration (Note [Buffers written in build]
in compiler/graph_tracer.h); other traced values are data flow, and refused.
"""

import numbers

import numpy as np

from oneflowlike import _C
from oneflowlike.ops import elementwise as _elementwise
from oneflowlike.ops import shape_ops as _shape_ops

__all__ = []


def _conform(op, target, value, any_dtype=False):
    """``value`` made the target's: broadcast to its shape and cast to its dtype. Arithmetic
    (``any_dtype`` false) refuses a floating result for an integer or bool tensor, as torch;
    copies and assignments cast any value, as torch."""
    shape, value_shape = tuple(target.shape), tuple(value.shape)
    if value_shape != shape:
        try:
            broadcast = tuple(np.broadcast_shapes(value_shape, shape))
        except ValueError:
            broadcast = None
        if broadcast != shape:
            raise ValueError(f"[{op}] the new value of shape {value_shape} must broadcast to the "
                             f"tensor's shape {shape}.")
        value = value.expand(*shape)
    if value.dtype != target.dtype:
        if not any_dtype and (target.dtype == _C.dtype.bool or (
                not target.dtype.is_floating_point and value.dtype.is_floating_point)):
            raise TypeError(f"[{op}] a {value.dtype!r} result cannot be written into a "
                            f"{target.dtype!r} tensor, as in torch: cast the tensor first.")
        value = _C.cast(value, target.dtype)
    return value


def _is_global(t):
    return getattr(t, "is_global", False) is True


def _write_global(target, value, op):
    value = value.to_global(placement=target.placement, sbp=target.sbp)
    if target._local is not None:
        _C._assign_(target._local, value._local, op)


def _write_traced(target, value, op):
    """A buffer written inside nn.Graph.build() (Note [Buffers written in build]), carrying no
    gradient: the value is detached, so later reads of the buffer are constants to autograd, as
    an eager write's under no_grad. (Traced values carry no requires_grad, so the refusal of an
    eager write outside no_grad has nothing to see here: such a write is taken as under it.)"""
    from oneflowlike.framework import global_tensor as _gt

    tracer = _gt.current_tracer()
    if tracer is None:  # a traced value outside its trace: let the runtime refuse it
        _C._assign_(target, value, op)
        return
    tracer.write_variable(target, value.detach(), op)


def _refuse_in_a_trace(op):
    from oneflowlike.framework import global_tensor as _gt

    if _gt.current_tracer() is not None:
        raise ValueError(f"[{op}] in-place ops cannot change a value inside nn.Graph.build() "
                         "(the graph is data flow): write x = x + y (or masked_fill, where) "
                         "instead.")


def _in_place(op, compute, any_dtype=False):
    """A method writing ``compute(self, *args, **kwargs)`` into self."""

    def method(self, *args, **kwargs):
        if _is_global(self):
            from oneflowlike.framework import global_tensor as _gt

            _refuse_in_a_trace(op)

            def new_value(target, *a, **k):
                return _conform(op, target, compute(target, *a, **k), any_dtype)

            _write_global(self, _gt.apply(new_value, (self,) + args, kwargs, name=op), op)
        elif _C._is_lazy(self):
            _write_traced(self, _conform(op, self, compute(self, *args, **kwargs), any_dtype), op)
        else:
            _C._assign_(self, _conform(op, self, compute(self, *args, **kwargs), any_dtype), op)
        return self

    method.__name__ = op
    return method


def _fill_value(value):
    if isinstance(value, numbers.Number):
        return float(value)
    if getattr(value, "numel", None) is not None and value.numel() == 1:
        return float(value.item())
    raise TypeError(f"[fill_] value must be a number or a one-element tensor. However, got "
                    f"{type(value).__name__}.")


def fill_(self, value):
    """Sets every element to ``value`` (a number or a one-element tensor)."""
    value = _fill_value(value)
    if _is_global(self):
        _refuse_in_a_trace("fill_")
        from oneflowlike import env
        from oneflowlike.framework import global_tensor as _gt

        local = self._local
        if local is not None:  # a partial-sum piece off the first coordinate holds zeros
            zero = _gt.holds_zero_addend(self.placement, self.sbp, env.get_rank())
            _C._assign_(local, _C.fill(tuple(local.shape), local.dtype, 0.0 if zero else value,
                                       local.device), "fill_")
        return self
    if _C._is_lazy(self):
        _write_traced(self, _C.fill(tuple(self.shape), self.dtype, value, self.device), "fill_")
        return self
    _C._assign_(self, _C.fill(tuple(self.shape), self.dtype, value, self.device), "fill_")
    return self


def zero_(self):
    return fill_(self, 0)


def _source(t, src):
    if not (isinstance(src, _C.Tensor) or _is_global(src)):
        raise TypeError(f"[copy_] src must be a tensor. However, got {type(src).__name__}.")
    return src


copy_ = _in_place("copy_", _source, any_dtype=True)
add_ = _in_place("add_", lambda t, other, alpha=1: _elementwise.add(t, other, alpha=alpha))
sub_ = _in_place("sub_", lambda t, other, alpha=1: _elementwise.sub(t, other, alpha=alpha))
mul_ = _in_place("mul_", lambda t, other: _elementwise.mul(t, other))
div_ = _in_place("div_", lambda t, other: _elementwise.div(t, other))
setitem = _in_place("__setitem__", lambda t, index, value: _shape_ops.index_put(t, index, value),
                    any_dtype=True)

TENSOR_METHODS = {
    "fill_": fill_,
    "zero_": zero_,
    "copy_": copy_,
    "add_": add_,
    "sub_": sub_,
    "mul_": mul_,
    "div_": div_,
    "__setitem__": setitem,
}
