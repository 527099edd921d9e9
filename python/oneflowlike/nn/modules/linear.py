"""Linear: y = x @ weight.T + bias."""

import math

from oneflowlike.framework import meta
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module, factory_dtype, to_factory_device
from oneflowlike.nn.parameter import Parameter


class Linear(Module):
    """torch.nn.Linear: weight (out_features, in_features) and bias (out_features,).

    Both start uniform in [-1/sqrt(in_features), 1/sqrt(in_features)) from flow's generator
    (torch's kaiming_uniform_(a=sqrt(5)) bound), weight drawn first.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        dtype = factory_dtype("Linear", device, dtype)
        if in_features < 0 or out_features < 0:
            raise ValueError(f"[Linear] in_features and out_features must be non-negative. "
                             f"However, got {in_features} and {out_features}.")
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = Parameter(meta.uniform_or_tensor(-bound, bound,
                                                       (out_features, in_features), dtype))
        if bias:
            self.bias = Parameter(meta.uniform_or_tensor(-bound, bound, (out_features,), dtype))
        else:
            self.register_parameter("bias", None)
        to_factory_device(self, device)

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.linear(input, self.weight, self.bias)  # (..., in) -> (..., out)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
