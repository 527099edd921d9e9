"""Rotary position embedding (Note [Rotary embedding] in oneflowlike/ops/rotary.h)."""

from oneflowlike import _C

__all__ = []


def rotary_embedding(input, cos, sin, seq_dim=-2, interleaved=False):  # noqa: A002
    """``input`` (..., T, ..., D) with its head-axis pairs rotated by the angles of position t:
    y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, with ``cos`` and ``sin`` (T, D/2). Pairs are
    (i, i + D/2) (rotate-half, Hugging Face's LLaMA) or (2i, 2i + 1) with ``interleaved``
    (Meta's original complex form). ``seq_dim`` is the position axis of ``input``."""
    return _C.rotary_embedding(input, cos, sin, int(seq_dim), bool(interleaved), False)


TENSOR_METHODS = {}

NN_FUNCTIONAL = {
    "rotary_embedding": rotary_embedding,
}
