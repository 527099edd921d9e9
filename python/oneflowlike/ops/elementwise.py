"""elementwise ops."""

__all__ = []
TENSOR_METHODS = {}
