"""LayerNorm: normalisation over the trailing axes, with a learned scale and shift."""

import numbers

import oneflowlike as flow
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module, factory_dtype, to_factory_device
from oneflowlike.nn.parameter import Parameter


class LayerNorm(Module):
    """torch.nn.LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias over the trailing
    ``normalized_shape`` axes (an int or a tuple); weight starts at ones and bias at zeros.
    ``elementwise_affine=False`` has neither, ``bias=False`` no bias."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        dtype = factory_dtype("LayerNorm", device, dtype)
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        if not self.normalized_shape or any(d <= 0 for d in self.normalized_shape):
            raise ValueError(f"[LayerNorm] normalized_shape must be non-empty and positive. "
                             f"However, got {normalized_shape!r}.")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(flow.ones(self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(flow.zeros(self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        to_factory_device(self, device)

    def forward(self, input):  # noqa: A002 (torch's name)
        # The functional makes its default weight and bias with numpy; pass them from ops (on a
        # global input's placement, replicated, when it is trained eagerly on global tensors).
        where = {"device": input.device} if isinstance(input, flow.Tensor) else {}
        if getattr(input, "is_global", False):
            where = {"placement": input.placement,
                     "sbp": (flow.sbp.broadcast,) * len(input.placement.hierarchy)}
        weight = self.weight
        if weight is None:
            weight = flow.ones(self.normalized_shape, dtype=input.dtype, **where)
        bias = self.bias
        if bias is None:
            bias = flow.zeros(self.normalized_shape, dtype=input.dtype, **where)
        return F.layer_norm(input, self.normalized_shape, weight, bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
