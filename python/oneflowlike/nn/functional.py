"""Functional forms with PyTorch names and signatures (flow.nn.functional).

Each op family module may define NN_FUNCTIONAL = {name: function}; they are collected here so
that every function lives next to its op.
"""

from oneflowlike import ops as _ops

for _module in _ops._modules:
    for _name, _fn in getattr(_module, "NN_FUNCTIONAL", {}).items():
        globals()[_name] = _fn
