"""scalar ops."""

__all__ = []
TENSOR_METHODS = {}
