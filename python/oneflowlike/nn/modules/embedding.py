"""Embedding: a table of vectors looked up by index."""

from oneflowlike import _C
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module, factory_dtype
from oneflowlike.nn.parameter import Parameter


class Embedding(Module):
    """torch.nn.Embedding: weight (num_embeddings, embedding_dim), initialised N(0, 1) from
    flow's generator; forward maps indices (...) int32/int64 to (..., embedding_dim)."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        dtype = factory_dtype("Embedding", device, dtype)
        if num_embeddings <= 0 or embedding_dim <= 0:
            raise ValueError(f"[Embedding] num_embeddings and embedding_dim must be positive. "
                             f"However, got {num_embeddings} and {embedding_dim}.")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = Parameter(_C.randn((num_embeddings, embedding_dim), dtype))

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.embedding(input, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"
