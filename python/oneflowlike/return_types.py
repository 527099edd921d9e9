"""The named tuples ops return, as ``torch.return_types``: ``values, indices = flow.max(x, 1)``
or ``flow.max(x, 1).indices``."""

import collections

__all__ = ["max", "min", "topk", "sort"]


def _named(name):
    base = collections.namedtuple(name, ["values", "indices"])

    def __repr__(self):  # noqa: N807 (torch's layout)
        return (f"oneflowlike.return_types.{name}(\nvalues={self.values!r},\n"
                f"indices={self.indices!r})")

    return type(name, (base,), {"__slots__": (), "__repr__": __repr__,
                                "__module__": "oneflowlike.return_types"})


max = _named("max")  # noqa: A001 (torch's names)
min = _named("min")  # noqa: A001
topk = _named("topk")
sort = _named("sort")
