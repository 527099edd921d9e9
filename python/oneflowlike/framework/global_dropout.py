"""Dropout of eager global tensors.

Note [Eager global dropout]: an eager op on global tensors is a compiled one-op graph, and its
backward recomputes the op in a second graph (Note [Eager global autograd]). A dropout op there
would draw its mask twice, once per graph, from counters fixed when each was traced: the
gradient would belong to another mask. So ``F.dropout`` on an eager global tensor is written
with ops whose backward needs no random numbers:

    keep = rand(x.shape, float64, placement, sbp) >= p     (Note [Sharded creation])
    y    = where(keep, x, 0) * (1 / (1 - p))               (0 when p == 1)

The uniform draw reserves the generator's counters exactly as a local dropout of x's shape
does, each rank makes only its piece of it, and ``uniform(seed, offset, e) >= p`` is the dropout
kernel's own test (philox::dropout_keeps), in float64 as there: the same elements are dropped as
by a one-device ``F.dropout`` after the same seed, and the kept ones are scaled by the same
float. The gradient is where's and mul's: dy * scale where kept, 0 elsewhere. The mask costs 8
bytes per element of this rank's piece while the op runs, and 1 byte (the bool mask) for the
backward. Inside nn.Graph the dropout op itself is traced: the runtime replays its mask
(dropout's gradient redraws it from the same counters). Attention with dropout_p on eager global
tensors runs written out, op by op, with this dropout (ops/attention.py, _eager_global).
"""

import oneflowlike as flow
from oneflowlike import _C
from oneflowlike import sbp as _sbp
from oneflowlike.ops import random


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002 (torch's name)
    """F.dropout of a global tensor; see Note [Eager global dropout]."""
    random.refuse_inplace_dropout(inplace)
    p = float(p)  # as the local form takes it
    _C.check_dropout_probability(p)
    if not bool(training) or p == 0:
        return input
    if not input.dtype.is_floating_point:
        raise TypeError(f"[dropout] x must have a floating dtype. However, got a global tensor "
                        f"{tuple(input.shape)} {input.dtype}.")
    # The mask is the same on every rank holding the same elements: a partial sum's ranks each
    # hold all of them (where and the scaling are linear in x, so x may stay partial).
    uniform = flow.rand(*input.shape, dtype=flow.float64, placement=input.placement,
                        sbp=_sbp.summed(input.sbp))
    keep = uniform >= p
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0
    out = flow.where(keep, input, 0.0) * scale
    # As the dropout op, the result keeps the input's layout (SBP inference may pick another
    # where they cost the same, as on one rank).
    return out if out.sbp == input.sbp else out.to_global(sbp=input.sbp)
