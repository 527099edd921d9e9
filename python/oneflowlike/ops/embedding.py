"""Embedding lookup: rows of a (num_embeddings, embedding_dim) table picked by indices."""

from oneflowlike import _C

__all__ = []
TENSOR_METHODS = {}


def embedding(input, weight, padding_idx=None, max_norm=None):  # noqa: A002 (torch's name)
    """``weight[input]``: input (...) int32/int64 indices, weight (V, D) -> (..., D).

    As torch.nn.functional.embedding; only weight gets a gradient. An index outside [0, V)
    raises IndexError. ``padding_idx`` and ``max_norm`` are not supported.
    """
    if padding_idx is not None or max_norm is not None:
        raise NotImplementedError(
            "[embedding] padding_idx and max_norm are not supported; got "
            f"padding_idx={padding_idx!r}, max_norm={max_norm!r}")
    if not isinstance(input, _C.Tensor):
        from oneflowlike.ops.core import tensor

        input = tensor(input)  # noqa: A001
    return _C.embedding(weight, input)


NN_FUNCTIONAL = {"embedding": embedding}
