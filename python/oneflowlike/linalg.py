"""flow.linalg: vector_norm (torch.linalg.vector_norm; Note in ops/norm.py)."""

from oneflowlike.framework.tensor_methods import _global_aware
from oneflowlike.ops.norm import vector_norm as _vector_norm

vector_norm = _global_aware(_vector_norm, "linalg.vector_norm")
