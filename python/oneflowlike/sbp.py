"""flow.sbp: how a global tensor is laid out over one dimension of its placement.

``flow.sbp.split(axis)`` (each rank holds a slice along ``axis``), ``flow.sbp.broadcast``
(each rank holds the whole value) and ``flow.sbp.partial_sum`` (the value is the sum of the
ranks' tensors). An N-d placement takes a tuple with one per dimension.
"""

import numbers

from oneflowlike import _C

__all__ = ["sbp", "split", "broadcast", "partial_sum"]


class sbp:  # noqa: N801 (OneFlow's name)
    __slots__ = ("_text",)

    def __init__(self, text):
        self._text = _C.sbp_parse(text)

    @property
    def axis(self):
        """The split axis (None unless split)."""
        return int(self._text[2:-1]) if self._text.startswith("S(") else None

    def __eq__(self, other):
        return isinstance(other, sbp) and self._text == other._text

    def __hash__(self):
        return hash(self._text)

    def __str__(self):
        return self._text

    def __repr__(self):
        if self._text == "B":
            return "oneflowlike.sbp.broadcast"
        if self._text == "P":
            return "oneflowlike.sbp.partial_sum"
        return f"oneflowlike.sbp.split(axis={self.axis})"


def split(axis):
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or axis < 0:
        raise ValueError(f"[sbp.split] axis must be a non-negative int. However, got {axis!r}.")
    return sbp(f"S({int(axis)})")


broadcast = sbp("B")
partial_sum = sbp("P")


def summed(nd_sbp):
    """``nd_sbp`` with every partial sum made whole (P -> B), the other dimensions as they are."""
    return tuple(broadcast if s == partial_sum else s for s in nd_sbp)


def normalize(value, placement, what="sbp"):
    """``value`` (one sbp, or a tuple/list with one per placement dimension) as a tuple of sbp
    of the placement's rank; raises ValueError naming the mismatch."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if not isinstance(item, sbp):
            raise TypeError(
                f"[{what}] expects flow.sbp.split(i), flow.sbp.broadcast or "
                f"flow.sbp.partial_sum. However, got {item!r}."
            )
    ndim = len(placement.hierarchy)
    if len(items) != ndim:
        raise ValueError(
            f"[{what}] a placement of hierarchy {placement.hierarchy} needs {ndim} sbp "
            f"(one per dimension). However, got {len(items)}: {items}."
        )
    return items
