"""matmul ops."""

__all__ = []
TENSOR_METHODS = {}
