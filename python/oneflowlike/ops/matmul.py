"""Matrix products: matmul (torch semantics for 2-D and N-d operands), bmm, and linear."""

from oneflowlike import _C

__all__ = ["matmul", "bmm", "outer", "addmm"]


def _check_tensors(op, input, other):
    for name, t in (("input", input), ("other", other)):
        if getattr(t, "is_meta", False) and not isinstance(t, _C.Tensor):
            from oneflowlike.framework.meta import _no_data

            raise _no_data(f"'{op}'")
        if not isinstance(t, _C.Tensor):
            kind = type(t)  # another library's tensor is named with its module (torch.Tensor)
            shown = (kind.__name__ if kind.__module__.startswith(("oneflowlike", "builtins"))
                     else f"{kind.__module__}.{kind.__name__}")
            raise TypeError(f"[{op}] {name} must be a Tensor. However, got {shown}.")


def matmul(input, other):
    """Matrix product of two tensors, like torch.matmul.

    (M, K) or (..., M, K) @ (K, N) folds the leading axes of ``input`` into rows; two tensors
    of at least 3 axes with equal batch dims multiply batch by batch. 1-D operands and
    broadcasting of batch dims are not supported.
    """
    _check_tensors("matmul", input, other)
    a, b = input.ndim, other.ndim
    if a >= 2 and b == 2:
        return _C.matmul(input, other)
    if a >= 3 and b >= 3:
        if tuple(input.shape[:-2]) != tuple(other.shape[:-2]):
            raise ValueError(
                "[matmul] batched operands must have identical batch dims (no broadcasting). "
                f"However, got input {tuple(input.shape)} and other {tuple(other.shape)}."
            )
        return _C.batch_matmul(input, other)
    raise ValueError(
        "[matmul] operands must be (..., M, K) @ (K, N) or batched (..., M, K) @ (..., K, N) "
        f"with at least 2 axes each. However, got input {tuple(input.shape)} and other "
        f"{tuple(other.shape)}."
    )


def bmm(input, mat2):
    """Batched product of two 3-D tensors: (B, M, K) @ (B, K, N) -> (B, M, N)."""
    _check_tensors("bmm", input, mat2)
    if input.ndim != 3 or mat2.ndim != 3:
        raise ValueError(
            "[bmm] both operands must be 3-D (B, M, K) and (B, K, N). However, got input "
            f"{tuple(input.shape)} and mat2 {tuple(mat2.shape)}."
        )
    return _C.batch_matmul(input, mat2)


def outer(input, vec2):  # noqa: A002 (torch's names)
    """The outer product of two 1-d tensors: (N,) x (M,) -> (N, M)."""
    if input.ndim != 1 or vec2.ndim != 1:
        raise ValueError(f"[outer] takes two 1-d tensors. However, got {tuple(input.shape)} and "
                         f"{tuple(vec2.shape)}.")
    return _C.mul(_C.reshape(input, (input.shape[0], 1)), vec2)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2), with mat1 (N, K), mat2 (K, M) and input
    broadcasting to (N, M)."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ValueError(f"[addmm] mat1 and mat2 must be 2-d. However, got "
                         f"{tuple(mat1.shape)} and {tuple(mat2.shape)}.")
    product = matmul(mat1, mat2)
    if alpha != 1:
        product = _C.scalar_mul(product, float(alpha))
    if beta == 0:  # as torch: input is ignored, NaN and infinities included
        return product
    return _C.add(_C.scalar_mul(input, float(beta)) if beta != 1 else input, product)


def linear(input, weight, bias=None):
    """torch.nn.functional.linear: input @ weight.T + bias, with weight (out, in)."""
    return _C.linear(input, weight, bias)


TENSOR_METHODS = {
    "matmul": matmul,
    "__matmul__": matmul,
    "bmm": bmm,
    "outer": outer,
    "addmm": addmm,
}

NN_FUNCTIONAL = {
    "linear": linear,
}
