"""The op functions of ``flow``. Each family module defines its functions, lists them in
``__all__`` and maps tensor method names to them in ``TENSOR_METHODS``."""

import importlib

_FAMILIES = [
    "core",
    "elementwise",
    "reduce",
    "reshape",
    "unary",
    "scalar",
    "creation",
    "where",
    "matmul",
    "softmax",
    "layer_norm",
    "rotary",
    "attention",
    "embedding",
    "cross_entropy",
    "random",
    "shape_ops",
    "inplace",
    "einsum",
    "one_hot",
    "mse_loss",
    "index_ops",
    "sorting",
    "scan",
    "triangular",
    "nonfinite",
    "norm",
    "rearrange",
    "sampling",
    "losses",
]

__all__ = []
_modules = []
for _name in _FAMILIES:
    _module = importlib.import_module(f"oneflowlike.ops.{_name}")
    _modules.append(_module)
    for _fn in getattr(_module, "__all__", []):
        globals()[_fn] = getattr(_module, _fn)
        __all__.append(_fn)


def attach_tensor_methods(tensor_class):
    """Adds every family's TENSOR_METHODS to the Tensor class."""
    for module in _modules:
        for name, fn in getattr(module, "TENSOR_METHODS", {}).items():
            setattr(tensor_class, name, fn)
