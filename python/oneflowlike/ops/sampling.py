"""flow.multinomial: indices drawn from categorical distributions (torch.multinomial), what a
language model's sampling needs.

Note [Gumbel sampling]: with G = -log(-log U), U uniform, argmax_c (log w_c + G_c) is
distributed as the categorical with weights w (the Gumbel-max trick), and the k largest of one
such draw, in order, are k draws without replacement (Gumbel-top-k). So a draw is one uniform
per weight, a log, an add and a max or top-k along the row: the ops every device already has,
no cumulative sum or search, and the same values on every device that draws the same uniforms.
A zero weight has log w = -inf and is never drawn.
"""


__all__ = ["multinomial"]


def _weight_stats(input):  # noqa: A002
    """(2,) float64: whether every weight is finite and non-negative (1 or 0), and the fewest
    positive weights in a row."""
    import oneflowlike as flow

    rows = input.reshape(-1, input.shape[-1]).to(flow.float64)
    valid = (flow.isfinite(rows) & (rows >= 0)).all().to(flow.float64)
    fewest = (rows > 0).to(flow.float64).sum(-1).min()
    return flow.stack([valid, fewest])


def _check_weights(input, num_samples, replacement, stats=None):  # noqa: A002
    """torch's checks: finite, non-negative weights, each row with a positive sum (and enough
    positive weights to draw num_samples without replacement). They read the values: one
    reduction to two numbers (``stats``: _weight_stats's, when given)."""
    stats = _weight_stats(input) if stats is None else stats
    valid, fewest = (stats.numpy() if getattr(stats, "is_global", False)
                     else stats.cpu().numpy()).tolist()
    if not valid:
        raise ValueError("[multinomial] weights must be finite and non-negative. However, got "
                         "a negative, infinite or NaN weight.")
    fewest = int(fewest)
    if fewest == 0:
        raise ValueError("[multinomial] every row needs a positive weight. However, a row has "
                         "none.")
    if not replacement and fewest < num_samples:
        raise ValueError(f"[multinomial] draws {num_samples} without replacement, but a row has "
                         f"only {fewest} positive weights.")


def multinomial(input, num_samples, replacement=False, *, generator=None):  # noqa: A002
    """``num_samples`` indices per row of ``input`` ((C,) or (N, C) non-negative weights, not
    necessarily summing to 1), drawn from the categorical the row's weights define: int64 of
    shape (num_samples,) or (N, num_samples). Without replacement a row's indices differ. Draws
    follow flow.manual_seed (Note [Gumbel sampling])."""
    import oneflowlike as flow

    _check(input, num_samples, replacement, generator)
    return _draw(input, num_samples, replacement,
                 lambda shape, dtype: flow.rand(*shape, dtype=dtype, device=input.device))


def _check(input, num_samples, replacement, generator):  # noqa: A002
    """torch's refusals of multinomial's arguments, naming them."""
    if generator is not None:
        raise NotImplementedError("[multinomial] generator= is not supported: draws follow "
                                  "flow.manual_seed.")
    if input.ndim not in (1, 2):
        raise ValueError(f"[multinomial] takes weights of shape (C,) or (N, C). However, got "
                         f"{tuple(input.shape)}.")
    if not input.dtype.is_floating_point:
        raise TypeError(f"[multinomial] takes floating weights. However, got {input.dtype!r}.")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"[multinomial] num_samples must be a positive int. However, got "
                         f"{num_samples!r}.")
    classes = input.shape[-1]
    if not replacement and num_samples > classes:
        raise ValueError(f"[multinomial] cannot draw {num_samples} of {classes} categories "
                         "without replacement.")
    if getattr(input, "is_global", False):
        _check_global_weights(input, num_samples, replacement)
    elif not input.is_lazy and input.numel():
        _check_weights(input, num_samples, replacement)


def _check_global_weights(input, num_samples, replacement):  # noqa: A002
    """_check_weights of a global tensor: its statistics one compiled op over the placement,
    read on its ranks (the others hold none of it, and cannot tell)."""
    from oneflowlike import env
    from oneflowlike.framework import global_tensor as gt

    if not input.numel():
        return
    stats = gt.apply(_weight_stats, (input,), {}, name="multinomial")
    if env.get_rank() in input.placement.flat_ranks:
        _check_weights(input, num_samples, replacement, stats)


def _eager_global(input, num_samples, replacement=False, *, generator=None):  # noqa: A002
    """multinomial of a global tensor, outside a trace: the uniforms drawn as flow.rand with a
    placement draws them (Note [Sharded creation]: the one-device values, reserved from the
    generator at each call), the rest eager global ops. Traced whole, the draw would be a random
    op inside a compiled graph, which is traced again at every call to follow the generator
    (Note [Eager global draws] in framework/global_tensor.py)."""
    import oneflowlike as flow

    _check(input, num_samples, replacement, generator)
    replicated = (flow.sbp.broadcast,) * len(input.placement.hierarchy)
    return _draw(input, num_samples, replacement,
                 lambda shape, dtype: flow.rand(*shape, dtype=dtype, placement=input.placement,
                                                sbp=replicated))


def _draw(input, num_samples, replacement, uniform):  # noqa: A002
    """Note [Gumbel sampling] with the uniforms ``uniform(shape, dtype)`` makes."""
    import oneflowlike as flow

    classes = input.shape[-1]
    dtype = flow.float64 if input.dtype == flow.float64 else flow.float32
    log_w = flow.log(input.to(dtype))
    rows = tuple(input.shape[:-1])
    draws = 1 if not replacement else num_samples
    shape = rows + ((draws, classes) if replacement else (classes,))
    u = uniform(shape, dtype)
    gumbel = -flow.log(-flow.log(u))
    if not replacement:
        return flow.topk(log_w + gumbel, num_samples, dim=-1).indices
    return flow.argmax(log_w.unsqueeze(-2) + gumbel, dim=-1)


TENSOR_METHODS = {"multinomial": multinomial}
