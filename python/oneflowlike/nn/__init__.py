"""Neural-network building blocks (flow.nn), with torch.nn's names and behaviour.

- ``Parameter``: a tensor registered as a module weight (requires grad).
- ``Module``: the base class: parameters, buffers, children, train()/eval(), state_dict().
- Layers: ``Linear``, ``Embedding``, ``LayerNorm``, ``RMSNorm``, ``BatchNorm1d/2d/3d``,
  ``Dropout``, ``GELU``, ``SiLU``, ``ReLU``,
  ``CausalSelfAttention`` (GPT-2's), and ``CrossEntropyLoss``.
- Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``.
- ``flow.nn.functional``: the functional forms; ``flow.nn.utils.clip_grad_norm_``.

Module forward() bodies use only flow ops, so they run eagerly and can be traced into a graph.
"""

from oneflowlike.nn import functional  # noqa: F401
from oneflowlike.nn.parameter import Parameter  # noqa: F401
from oneflowlike.nn.modules import *  # noqa: F401,F403
from oneflowlike.nn import utils  # noqa: F401
from oneflowlike.nn.graph import Graph, GraphConfig  # noqa: F401,E402
from oneflowlike.nn import init  # noqa: F401,E402
from oneflowlike.nn import parallel  # noqa: F401,E402
