"""Embedding: a table of vectors looked up by index."""

from oneflowlike.framework import meta
from oneflowlike.nn import functional as F
from oneflowlike.nn.modules.module import Module, factory_dtype, to_factory_device
from oneflowlike.nn.parameter import Parameter
from oneflowlike.ops.embedding import _padding_row


class Embedding(Module):
    """torch.nn.Embedding: weight (num_embeddings, embedding_dim), initialised N(0, 1) from
    flow's generator; forward maps indices (...) int32/int64 to (..., embedding_dim). Row
    ``padding_idx`` starts at zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None):
        super().__init__()
        dtype = factory_dtype("Embedding", device, dtype)
        if num_embeddings <= 0 or embedding_dim <= 0:
            raise ValueError(f"[Embedding] num_embeddings and embedding_dim must be positive. "
                             f"However, got {num_embeddings} and {embedding_dim}.")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = None
        if padding_idx is not None:
            self.padding_idx = _padding_row("Embedding", padding_idx, num_embeddings)
        weight = meta.normal_or_tensor(0.0, 1.0, (num_embeddings, embedding_dim), dtype)
        if self.padding_idx is not None:
            weight[self.padding_idx] = 0.0
        self.weight = Parameter(weight)
        to_factory_device(self, device)

    def forward(self, input):  # noqa: A002 (torch's name)
        return F.embedding(input, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self):
        extra = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{extra}"
