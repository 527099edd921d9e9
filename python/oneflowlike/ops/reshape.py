"""reshape ops."""

__all__ = []
TENSOR_METHODS = {}
