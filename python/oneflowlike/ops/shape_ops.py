"""shape_ops ops."""

__all__ = []
TENSOR_METHODS = {}
