"""Helpers around modules (flow.nn.utils): gradient clipping, parameters as one vector."""

from oneflowlike.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_
from oneflowlike.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]
