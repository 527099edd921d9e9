"""reduce ops."""

__all__ = []
TENSOR_METHODS = {}
