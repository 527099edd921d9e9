"""RMSNorm: normalisation by the root mean square over the trailing axes, with a learned scale
(LLaMA's norm)."""

import numbers

import oneflowlike as flow
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module, factory_dtype, to_factory_device
from oneflowlike.nn.parameter import Parameter


class RMSNorm(Module):
    """torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the trailing
    ``normalized_shape`` axes; weight starts at ones; ``eps`` None is the input dtype's machine
    epsilon, as torch. ``elementwise_affine=False`` has no weight."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        dtype = factory_dtype("RMSNorm", device, dtype)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        if not self.normalized_shape or any(d <= 0 for d in self.normalized_shape):
            raise ValueError(f"[RMSNorm] normalized_shape must be non-empty and positive. "
                             f"However, got {normalized_shape!r}.")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(flow.ones(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        to_factory_device(self, device)

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
