"""Embedding lookup: rows of a (num_embeddings, embedding_dim) table picked by indices."""

from oneflowlike import _C

__all__ = []
TENSOR_METHODS = {}


def _padding_row(op, padding_idx, num_embeddings):
    """padding_idx as a row of the table (negative counts from the end, as torch), -1 for
    None."""
    if padding_idx is None:
        return -1
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"[{op}] padding_idx must be within [-{num_embeddings}, "
                         f"{num_embeddings}). However, got {padding_idx}.")
    return padding_idx % num_embeddings


def embedding(input, weight, padding_idx=None, max_norm=None):  # noqa: A002 (torch's name)
    """``weight[input]``: input (...) int32/int64 indices, weight (V, D) -> (..., D).

    As torch.nn.functional.embedding; only weight gets a gradient, and its row ``padding_idx``
    none. An index outside [0, V) raises IndexError. ``max_norm`` is not supported.
    """
    if max_norm is not None:
        raise NotImplementedError(f"[embedding] max_norm is not supported; got max_norm="
                                  f"{max_norm!r}")
    if not isinstance(input, _C.Tensor):
        from oneflowlike.ops.core import tensor

        input = tensor(input)  # noqa: A001
    return _C.embedding(weight, input, _padding_row("embedding", padding_idx, weight.shape[0]))


NN_FUNCTIONAL = {"embedding": embedding}
