"""BatchNorm1d / 2d / 3d: normalisation over the batch (and spatial) axes per channel, with
running statistics for evaluation.

Composed of the library's ops (means, products, a square root), so its gradient, SBP signatures
and CUDA kernels are theirs. The running statistics are buffers written in place, under
no_grad eagerly and in nn.Graph as writes of the graph's variables (Note [Buffers written in
build] in compiler/graph_tracer.h). Under data parallelism in a graph (the batch split over
ranks) the batch's mean is a partial sum the compiler all-reduces, so the statistics are the
whole batch's on every rank: torch's SyncBatchNorm without asking, and the one-device result
(eager DistributedDataParallel on local tensors normalises each rank's part, as torch's
BatchNorm does there).
"""

import oneflowlike as flow
from oneflowlike.nn.modules.module import Module, factory_dtype, to_factory_device
from oneflowlike.nn.parameter import Parameter


class _BatchNorm(Module):
    """torch.nn.BatchNorm*d: y = (x - mean) / sqrt(var + eps) * weight + bias per channel (axis
    1), mean and var (biased) over every other axis in training; running_mean and running_var
    (unbiased) follow them with ``momentum`` (None: the cumulative average over
    num_batches_tracked) and replace them in evaluation. ``affine=False``: no weight and bias;
    ``track_running_stats=False``: batch statistics in evaluation too."""

    _dims = None  # the input's ndim(s) the class takes

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        dtype = factory_dtype(name, device, dtype)
        if int(num_features) <= 0:
            raise ValueError(f"[{name}] num_features must be positive. However, got "
                             f"{num_features!r}.")
        if momentum is not None and (isinstance(momentum, bool)
                                     or not isinstance(momentum, (int, float))):
            raise TypeError(f"[{name}] momentum must be a number or None (a cumulative "
                            f"average). However, got {momentum!r}.")
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        c = self.num_features
        if self.affine:
            self.weight = Parameter(flow.ones(c, dtype=dtype))
            self.bias = Parameter(flow.zeros(c, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", flow.zeros(c, dtype=dtype))
            self.register_buffer("running_var", flow.ones(c, dtype=dtype))
            self.register_buffer("num_batches_tracked", flow.zeros((), dtype=flow.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        to_factory_device(self, device)

    def _default_state(self, name):
        # torch's BatchNorm fills in a missing count (checkpoints from before it was saved).
        if name == "num_batches_tracked" and self.track_running_stats:
            return flow.zeros((), dtype=flow.int64)
        return None

    def reset_running_stats(self):
        if self.track_running_stats:
            with flow.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def forward(self, input):  # noqa: A002 (torch's name)
        name = type(self).__name__
        if input.ndim not in self._dims or input.shape[1] != self.num_features:
            raise ValueError(f"[{name}] input must be {self._describe()} with "
                             f"{self.num_features} channels on axis 1. However, got "
                             f"{tuple(input.shape)}.")
        axes = [0] + list(range(2, input.ndim))
        view = [1, self.num_features] + [1] * (input.ndim - 2)
        batch_stats = self.training or not self.track_running_stats
        if batch_stats:
            count = 1
            for a in axes:
                count *= input.shape[a]
            if self.training and count <= 1:
                raise ValueError(f"[{name}] training needs more than one value per channel to "
                                 f"estimate a variance. However, got input {tuple(input.shape)}.")
            mean = input.mean(dim=axes, keepdim=True)
            var = ((input - mean) ** 2).mean(dim=axes, keepdim=True)
            if self.training and self.track_running_stats:
                self._track(mean, var, count)
        else:
            mean = self.running_mean.reshape(view)
            var = self.running_var.reshape(view)
        y = (input - mean) / (var + self.eps).sqrt()
        if self.affine:
            y = y * self.weight.reshape(view) + self.bias.reshape(view)
        return y if y.dtype == input.dtype else y.to(input.dtype)  # torch's: the input's dtype

    def _track(self, mean, var, count):
        """The running statistics moved towards this batch's (no gradient flows into them)."""
        with flow.no_grad():
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # the cumulative average: weight 1 / batches seen
                # In float32 whatever the statistics' dtype (torch's is a Python float).
                factor = 1.0 / self.num_batches_tracked.to(flow.float32)
            else:
                factor = float(self.momentum)
            batch_mean = mean.detach().reshape(self.num_features)
            unbiased = var.detach().reshape(self.num_features) * (count / (count - 1))
            self.running_mean.mul_(1.0 - factor).add_(batch_mean * factor)
            self.running_var.mul_(1.0 - factor).add_(unbiased * factor)

    def _describe(self):
        return " or ".join(f"{d}-d" for d in self._dims)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """torch.nn.BatchNorm1d: (N, C) or (N, C, L)."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """torch.nn.BatchNorm2d: (N, C, H, W)."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """torch.nn.BatchNorm3d: (N, C, D, H, W)."""

    _dims = (5,)
