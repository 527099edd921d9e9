"""Note [Sharded creation] (ops/random.h): flow.randn / rand / randint / zeros / ones / full / empty
with ``placement=`` and ``sbp=`` compute only this rank's piece, never the whole logical tensor.

A creation function asks ``current()`` for the request while it runs: it reports the logical
shape and dtype it would make (``region_of``) and gets this rank's region back, or None where
this rank holds nothing. Random functions still reserve the whole draw's counters on every rank
(the C++ *_region functions do), so the generator moves on alike everywhere and every piece
holds the values a one-device call gives there.
"""

from oneflowlike import sbp as _sbp

_requests = []


def current():
    """The piece request of the creation call under way, or None (a whole tensor)."""
    return _requests[-1] if _requests else None


class PieceRequest:
    def __init__(self, name, placement, sbp):
        self.name, self.placement = name, placement
        self.nd_sbp = _sbp.normalize(sbp, placement, name)
        self.shape = self.dtype = None

    def region_of(self, shape, dtype):
        """This rank's region of a (shape, dtype) result as [(begin, end)] per axis, or None."""
        from oneflowlike.framework import global_tensor as gt

        self.shape, self.dtype = tuple(int(d) for d in shape), dtype
        gt._check(self.shape, self.placement, self.nd_sbp, self.name)
        return gt.local_region(self.shape, self.placement, self.nd_sbp)

    def __enter__(self):
        _requests.append(self)
        return self

    def __exit__(self, *exc):
        _requests.pop()
        return False


def make(name, fn, args, kwargs, placement, sbp):
    """``fn(*args, **kwargs)`` laid out on ``placement`` with ``sbp``, made piece by piece."""
    from oneflowlike.framework import global_tensor as gt

    requires_grad = kwargs.pop("requires_grad", False)
    if kwargs.get("device") is not None:
        raise ValueError(f"[{name}] takes a placement or a device, not both: the placement says "
                         f"where the tensor lives. However, got device={kwargs['device']!r}.")
    request = PieceRequest(name, placement, sbp)
    with request:
        local = fn(*args, **kwargs)
    local = gt.as_addend(local, placement, request.nd_sbp)  # partial sum: one rank holds it
    g = gt.GlobalTensor(local, request.shape, request.dtype, placement, request.nd_sbp)
    if requires_grad:
        g.requires_grad = True
    return g
