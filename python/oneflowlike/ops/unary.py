"""Elementwise functions of one tensor: neg, abs, exp, log, sqrt, rsqrt, tanh, relu, sigmoid,
silu, gelu, square (also as tensor methods and in flow.nn.functional)."""

from oneflowlike import _C

__all__ = ["neg", "negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "relu", "sigmoid",
           "silu", "gelu", "square"]


def neg(input):  # noqa: A002 (torch's names)
    """-input (any number dtype)."""
    return _C.neg(input)


def abs(input):  # noqa: A001,A002
    """|input| (any number dtype); the gradient at 0 is 0."""
    return _C.abs(input)


def exp(input):  # noqa: A002
    return _C.exp(input)


def log(input):  # noqa: A002
    return _C.log(input)


def sqrt(input):  # noqa: A002
    return _C.sqrt(input)


def rsqrt(input):  # noqa: A002
    """1 / sqrt(input)."""
    return _C.rsqrt(input)


def tanh(input):  # noqa: A002
    return _C.tanh(input)


def sigmoid(input):  # noqa: A002
    return _C.sigmoid(input)


def silu(input, inplace=False):  # noqa: A002
    """input * sigmoid(input), as torch.nn.functional.silu (``inplace=True`` is refused)."""
    if inplace:
        raise NotImplementedError(
            "[silu] inplace=True is not supported: ops never write their inputs here; "
            "use the returned tensor"
        )
    return _C.silu(input)


def relu(input, inplace=False):  # noqa: A002
    """max(input, 0). ``inplace=True`` is refused: ops here never write their inputs."""
    if inplace:
        raise NotImplementedError(
            "[relu] inplace=True is not supported: ops never write their inputs here; "
            "use the returned tensor"
        )
    return _C.relu(input)


def gelu(input, approximate="none"):  # noqa: A002
    """input * Phi(input); ``approximate="tanh"`` uses the tanh approximation (as torch)."""
    return _C.gelu(input, approximate)


negative = neg


def square(input):  # noqa: A002
    """input * input."""
    return _C.mul(input, input)

TENSOR_METHODS = {
    "neg": neg,
    "negative": neg,
    "abs": abs,
    "exp": exp,
    "log": log,
    "sqrt": sqrt,
    "rsqrt": rsqrt,
    "tanh": tanh,
    "relu": lambda self: relu(self),
    "sigmoid": sigmoid,
    "silu": lambda self: silu(self),
    "square": square,
    "__neg__": neg,
    "__abs__": abs,
}

NN_FUNCTIONAL = {
    "relu": relu,
    "gelu": gelu,
    "sigmoid": sigmoid,
    "silu": silu,
    "tanh": tanh,
}
