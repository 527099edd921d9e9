"""where ops."""

__all__ = []
TENSOR_METHODS = {}
