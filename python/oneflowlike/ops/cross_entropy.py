"""cross_entropy ops."""

__all__ = []
TENSOR_METHODS = {}
