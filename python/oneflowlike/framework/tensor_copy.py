"""copy.deepcopy of tensors, parameters, global tensors and modules, as in PyTorch: the idioms
``best = copy.deepcopy(model.state_dict())`` and ``ema = copy.deepcopy(model)`` (they raised
"cannot pickle 'oneflowlike._C.Tensor' object").

Note [Deep copies]: a deep copy of a leaf tensor has its own storage with the same values, the
same type (a Parameter stays one), requires_grad and a deep copy of its gradient; a tensor one
object holds twice (tied weights) is copied once (``memo``). A tensor computed by autograd is
refused, as torch does: the copy could not carry its history. A global tensor copies this
rank's piece and keeps its placement and SBP, with no communication (every rank copies its
own). A module brings in the values a graph trained first (Note [Graphs sharing modules]), so
the copy has the newest ones, not the copy the module's tensors held before; the graphs its
modules keep alive are not copied; under ZeRO that is collective, as state_dict() is, so every
rank deep-copies the module. Views of one storage become tensors of their own.
"""

import copy

from oneflowlike import _C
from oneflowlike.framework import global_tensor as _gt


def _refuse_non_leaf(tensor):
    if getattr(tensor, "is_lazy", False):
        raise RuntimeError(f"[copy.deepcopy] {tensor._describe()} is a value of a graph being "
                           "traced (nn.Graph.build): it has no data to copy.")
    if not tensor.is_leaf:
        raise RuntimeError(
            "[copy.deepcopy] only tensors made directly (autograd's leaves) can be deep-copied, as "
            f"in torch; this one (shape {tuple(tensor.shape)}) was computed from tensors that "
            "require grad. Copy tensor.detach() instead.")


def _copy_grad(tensor, new, memo):
    grad = tensor.grad
    if grad is not None:
        new.grad = copy.deepcopy(grad, memo)


def _local_deepcopy(self, memo):
    _refuse_non_leaf(self)
    data = self.detach().clone()  # a leaf of its own: no history back to self
    if type(self) is _C.Tensor:
        new = data
        new.requires_grad = self.requires_grad
        memo[id(self)] = new
    else:  # a Parameter, or another subclass taking (data, requires_grad)
        new = type(self)(data, requires_grad=self.requires_grad)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
    _copy_grad(self, new, memo)
    return new


def _global_deepcopy(self, memo):
    _refuse_non_leaf(self)
    local = None if self._local is None else self._local.detach().clone()
    new = _gt.GlobalTensor(local, self.shape, self.dtype, self.placement, self.sbp)
    new.requires_grad = self.requires_grad
    memo[id(self)] = new
    _copy_grad(self, new, memo)
    return new


def _module_getstate(self):
    """What copy (and pickle) take of a module: its attributes with the newest values, without
    the graphs that its modules keep alive (graph_sharing's anchors)."""
    from oneflowlike.nn import graph_sharing

    if graph_sharing._holders:
        graph_sharing.release(graph_sharing.module_values(self))
    state = dict(self.__dict__)
    for key in ("_anchors", "_sharing_epoch"):
        state.pop(key, None)
    return state


def install():
    from oneflowlike.nn.modules.module import Module

    _C.Tensor.__deepcopy__ = _local_deepcopy
    _gt.GlobalTensor.__deepcopy__ = _global_deepcopy
    Module.__getstate__ = _module_getstate
