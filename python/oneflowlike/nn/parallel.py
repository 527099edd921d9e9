"""flow.nn.parallel.DistributedDataParallel: data parallelism for eager code written for one
device, as torch's DDP and OneFlow's flow.nn.parallel.DistributedDataParallel.

Note [Eager DDP on local tensors]: each process holds the whole model and feeds its own part of
the batch. Wrapping broadcasts rank 0's parameters and buffers to every rank; each forward in
training mode queues, for after the backward pass (Note [After backward] in autograd.py), the
average of every parameter's gradient over the ranks: the gradients of each dtype and device
are joined into buckets of about ``bucket_cap_mb`` and all-reduced with flow.comm (Note [Local
collectives]), so the optimizer steps the same values on every rank, those a one-process run on
the whole batch would step when every rank's part has the same size. The sync follows every
forward with grad enabled (in eval mode too, as torch's), not inside ``no_sync()``, which
accumulates locally. Which parameters have a gradient is agreed first (one small all-reduce of
a mask): a parameter no rank's backward reached keeps no gradient, as torch leaves it, and one
that some rank's did gets zeros where the others' did not, so every rank's buckets match
(torch needs find_unused_parameters for that).

The global-tensor alternative (LiBai's, OneFlow's nn.Graph) lays the model out with to_global
and is what tensor and pipeline parallelism use; this wrapper is for code that stays local.
"""

import contextlib

from oneflowlike import _C
from oneflowlike import comm
from oneflowlike import env
from oneflowlike.autograd import no_grad, queue_after_backward
from oneflowlike.nn.modules.module import Module
from oneflowlike.ops.core import tensor as flow_tensor
from oneflowlike.ops.shape_ops import cat

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, broadcast_buffers=True,
                 bucket_cap_mb=25, find_unused_parameters=False, **kwargs):
        super().__init__()
        del device_ids, output_device, find_unused_parameters  # the module's own device; see Note
        for name in kwargs:  # torch's other knobs change nothing here: say so, never guess
            raise TypeError(f"[DistributedDataParallel] unexpected argument '{name}'.")
        if not isinstance(module, Module):
            raise TypeError(f"[DistributedDataParallel] wraps a flow.nn.Module. However, got "
                            f"{type(module).__name__}.")
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if getattr(t, "is_global", False) or getattr(t, "is_meta", False):
                raise TypeError(
                    f"[DistributedDataParallel] '{name}' is a "
                    f"{'global' if getattr(t, 'is_global', False) else 'meta'} tensor: the "
                    "wrapper keeps a whole local model on every rank. Lay a global model out "
                    "with to_global instead (data parallelism through its SBP).")
        if bucket_cap_mb <= 0:
            raise ValueError(f"[DistributedDataParallel] bucket_cap_mb must be positive. "
                             f"However, got {bucket_cap_mb}.")
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self._bucket_bytes = int(bucket_cap_mb * 2**20)
        self._sync = True
        with no_grad():
            _broadcast_all([p for p in module.parameters()] + [b for b in module.buffers()],
                           self._bucket_bytes)

    def forward(self, *args, **kwargs):
        if (_C.is_grad_enabled() and self._sync
                and not any(getattr(a, "is_lazy", False) for a in args)):
            if self.broadcast_buffers:
                with no_grad():
                    _broadcast_all(list(self.module.buffers()), self._bucket_bytes)
            queue_after_backward(id(self), self._average_gradients)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients on each rank without averaging them; the
        first backward after the context averages what has accumulated (torch's no_sync)."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def _average_gradients(self):
        trained = [p for p in self.module.parameters() if p.requires_grad]
        world = env.get_world_size()
        with no_grad():
            used = flow_tensor([0.0 if p.grad is None else 1.0 for p in trained])
            comm._all_reduce(used, check=False)  # one entry per parameter, agreed at wrap
            params = [p for p, n in zip(trained, used.numpy()) if n > 0]
            for p in params:
                if p.grad is None:  # reached on another rank: zeros, so the buckets match
                    p.grad = _C.fill(tuple(p.shape), p.dtype, 0.0, p.device)
            for bucket in _buckets(params, self._bucket_bytes):
                flat = cat([p.grad.reshape(-1) for p in bucket], 0)
                comm._all_reduce(flat, check=False)
                flat = flat / world
                offset = 0
                for p in bucket:
                    n = p.grad.numel()
                    p.grad = flat[offset:offset + n].reshape(tuple(p.shape))
                    offset += n


def _buckets(tensors, cap):
    """``tensors`` in order, in runs of one dtype and device of at most ``cap`` bytes (a larger
    tensor alone)."""
    out, run, size = [], [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if run and (size + nbytes > cap or t.dtype != run[0].dtype or t.device != run[0].device):
            out.append(run)
            run, size = [], 0
        run.append(t)
        size += nbytes
    if run:
        out.append(run)
    return out


def _broadcast_all(tensors, cap):
    """Rank 0's values of ``tensors`` into every rank's, in buckets of at most ``cap`` bytes."""
    if env.get_world_size() == 1 or not tensors:
        return
    for bucket in _buckets(tensors, cap):
        flat = cat([t.reshape(-1) for t in bucket], 0)
        comm.broadcast(flat, 0)
        offset = 0
        for t in bucket:
            n = t.numel()
            t.copy_(flat[offset:offset + n].reshape(tuple(t.shape)))
            offset += n
