"""layer_norm ops."""

__all__ = []
TENSOR_METHODS = {}
