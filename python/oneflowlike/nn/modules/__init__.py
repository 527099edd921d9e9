"""The layers of flow.nn, one file per concept; flow.nn re-exports them."""

from oneflowlike.nn.modules.activation import GELU, Identity, ReLU, SiLU, Softmax, Tanh
from oneflowlike.nn.modules.attention import CausalSelfAttention
from oneflowlike.nn.modules.batch_norm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from oneflowlike.nn.modules.container import (ModuleDict, ModuleList, ParameterDict,
                                              ParameterList, Sequential)
from oneflowlike.nn.modules.dropout import Dropout
from oneflowlike.nn.modules.embedding import Embedding
from oneflowlike.nn.modules.flatten import Flatten, Unflatten
from oneflowlike.nn.modules.kv_cache import KVCache
from oneflowlike.nn.modules.layer_norm import LayerNorm
from oneflowlike.nn.modules.linear import Linear
from oneflowlike.nn.modules.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss,
                                         KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from oneflowlike.nn.modules.module import Module
from oneflowlike.nn.modules.rms_norm import RMSNorm
from oneflowlike.nn.modules.rotary import RotaryEmbedding
from oneflowlike.nn.modules.static_kv_cache import StaticKVCache
from oneflowlike.nn.modules.transformer import (MultiheadAttention, TransformerDecoder,
                                                TransformerDecoderLayer, TransformerEncoder,
                                                TransformerEncoderLayer)

__all__ = ["Module", "Linear", "Embedding", "LayerNorm", "RMSNorm", "Dropout", "GELU", "ReLU",
           "SiLU", "Tanh",
           "Softmax", "Identity", "Sequential", "ModuleList", "ModuleDict", "CrossEntropyLoss",
           "MSELoss", "CausalSelfAttention", "RotaryEmbedding", "ParameterList", "ParameterDict",
           "Flatten", "Unflatten", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
           "BCEWithLogitsLoss", "NLLLoss", "KLDivLoss", "MultiheadAttention",
           "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "KVCache",
           "StaticKVCache"]
