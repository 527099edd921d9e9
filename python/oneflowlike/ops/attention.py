"""Scaled dot-product attention with PyTorch's semantics, fused (Note [Fused attention] in
oneflowlike/ops/attention.h)."""

import math
import operator

from oneflowlike import _C

__all__ = []


def _shapes(q, k, v):
    return f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}"


def _count(op, name, what, n, least=0):
    """``n`` as an int >= least (numpy's integers too), or ValueError naming the op and the
    argument ``name`` (``what`` it counts)."""
    try:
        if isinstance(n, bool):
            raise TypeError
        count = operator.index(n)
    except TypeError:
        count = None
    if count is None or count < least:
        raise ValueError(f"[{op}] {name} ({what}) must be an int >= {least}. However, got "
                         f"{n!r}.")
    return count


def _zigzag_pieces(op, n, least=0):
    """``n`` as an int >= least, or ValueError naming the op."""
    return _count(op, "zigzag", "the pieces the order balances", n, least)


def _window_keys(op, w):
    """``w`` as an int >= 0, or ValueError naming the op."""
    return _count(op, "window", "the latest keys each query sees", w)


def _float_mask(attn_mask, dtype):
    """A boolean mask (True: take part) as the additive float mask the kernel takes. Fill ops,
    not tensors from data: inside a trace they are part of the graph, not constants."""
    if attn_mask.dtype == _C.dtype.bool and not isinstance(attn_mask, _C.Tensor):
        import oneflowlike as flow  # noqa: PLC0415  a global mask: global-aware ops

        zero = flow.zeros(*attn_mask.shape, dtype=dtype, placement=attn_mask.placement,
                          sbp=attn_mask.sbp)
        return flow.where(attn_mask, zero, float("-inf"))
    if attn_mask.dtype == _C.dtype.bool:
        zero = _C.fill(tuple(attn_mask.shape), dtype, 0.0, attn_mask.device)
        hidden = _C.fill(tuple(attn_mask.shape), dtype, float("-inf"), attn_mask.device)
        return _C.where(attn_mask, zero, hidden)
    return attn_mask


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, zigzag=0,
                                 window=0, document_ids=None):
    """torch.nn.functional.scaled_dot_product_attention: softmax(query key^T * scale + mask)
    value over the last two axes of (batch, heads, L, E) inputs (or (heads, L, E)).

    ``attn_mask``: bool (True takes part) or a float added to the scores, broadcastable to
    (batch, heads, L, S); ``is_causal`` hides key j from query i where j > i, as PyTorch does;
    ``scale`` defaults to 1 / sqrt(E); ``enable_gqa`` lets key and value have fewer heads than
    query (a divisor). With ``dropout_p`` > 0 the attention weights are dropped out, which the
    fused kernel does not do: it is then written out as matmul, softmax, dropout and matmul.

    ``zigzag`` (ours, keyword only; 0: off): the sequence axis of query, key, value and the
    result is in F.zigzag's order over that many pieces, which balances causal attention over
    context-parallel ranks (Note [Zigzag order] in oneflowlike/ops/attention.h). Needs
    is_causal, and L = S a multiple of 2 * zigzag.

    ``window`` (ours, keyword only; 0: off): sliding-window attention, each query sees its
    ``window`` latest keys, itself included (Mistral's and Gemma's local attention; flash-attn's
    ``window_size=(window - 1, 0)``), at a cost linear in the sequence (Note [Sliding window]).
    Needs is_causal.

    ``document_ids`` (ours, keyword only): an int32 or int64 tensor (batch, L) (or (L,) for 3-d
    inputs) giving each position of self-attention (L = S) its document, as sequences packed
    from several documents have: a query sees only the keys of its own document (flash-attn's
    varlen attention, FlexAttention's document mask; Note [Packed documents]), with is_causal
    and window on top. In the order the sequence is stored in (F.zigzag's under ``zigzag``).
    ``attn_mask`` or ``document_ids``, not both.
    """
    q, k, v = query, key, value
    if not (q.ndim == k.ndim == v.ndim and q.ndim in (3, 4)):
        raise ValueError("[scaled_dot_product_attention] query, key and value must all be 4-d "
                         f"(batch, heads, L, E) or all 3-d (heads, L, E). However, got "
                         f"{_shapes(q, k, v)}.")
    if q.shape[-3] != k.shape[-3] and not enable_gqa:
        raise ValueError("[scaled_dot_product_attention] query and key/value must have one number "
                         "of heads unless enable_gqa=True. However, got " + _shapes(q, k, v) + ".")
    if is_causal and attn_mask is not None:
        raise ValueError("[scaled_dot_product_attention] is_causal=True takes no attn_mask (the "
                         "causal mask is implied). However, got attn_mask "
                         f"{tuple(attn_mask.shape)}.")
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"[scaled_dot_product_attention] dropout_p must be in [0, 1). However, "
                         f"got {dropout_p}.")
    if zigzag:
        zigzag = _zigzag_pieces("scaled_dot_product_attention", zigzag)
        if not is_causal:
            raise ValueError("[scaled_dot_product_attention] zigzag orders the queries of "
                             "causal attention: it needs is_causal=True.")
        if q.shape[-2] != k.shape[-2] or q.shape[-2] % (2 * zigzag):
            raise ValueError(f"[scaled_dot_product_attention] zigzag={zigzag} cuts the sequence "
                             f"in {2 * zigzag} chunks: query and key must have one length L that "
                             f"{2 * zigzag} divides. However, got {_shapes(q, k, v)}.")
    if window:
        window = _window_keys("scaled_dot_product_attention", window)
        if not is_causal:
            raise ValueError("[scaled_dot_product_attention] window counts the latest keys a "
                             "query of causal attention sees: it needs is_causal=True.")
    if document_ids is not None:
        _check_documents(q, k, v, attn_mask, document_ids)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] > 0 else 1.0
    mask = None if attn_mask is None else _float_mask(attn_mask, q.dtype)
    three_d = q.ndim == 3
    if three_d:
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
        if document_ids is not None:
            document_ids = document_ids.unsqueeze(0)
    if float(dropout_p) > 0.0:
        out = _written_out(q, k, v, mask, float(dropout_p), bool(is_causal), float(scale),
                           zigzag, window, document_ids)
    else:
        out = _C.scaled_dot_product_attention(q, k, v, mask, float(scale), bool(is_causal),
                                              zigzag=zigzag, window=window,
                                              document_ids=document_ids)[0]
    return out.squeeze(0) if three_d else out


def _check_documents(q, k, v, attn_mask, ids):
    """Refuses document ids that cannot be the documents of q's positions (ValueError,
    TypeError for their dtype), naming them; the op checks the rest."""
    if attn_mask is not None:
        raise ValueError("[scaled_dot_product_attention] takes an attn_mask or document_ids, not "
                         "both (fold the documents into the mask). However, got attn_mask "
                         f"{tuple(attn_mask.shape)} and document_ids {tuple(ids.shape)}.")
    if ids.dtype not in (_C.dtype.int32, _C.dtype.int64):
        raise TypeError("[scaled_dot_product_attention] document_ids must be int32 or int64. "
                        f"However, got {ids.dtype}.")
    want = (*q.shape[:-3], q.shape[-2])
    if tuple(ids.shape) != want or q.shape[-2] != k.shape[-2]:
        raise ValueError("[scaled_dot_product_attention] document_ids give each position of "
                         "self-attention its document: query and key must have one length L, "
                         f"document_ids the shape {want}. However, got {_shapes(q, k, v)}, "
                         f"document_ids {tuple(ids.shape)}.")


def _written_out(q, k, v, mask, dropout_p, is_causal, scale, zigzag=0, window=0,
                 document_ids=None):
    """Attention as matmul, softmax, dropout and matmul (what the fused kernel computes, plus
    dropout of the weights). The library's functions, which take global tensors too: eagerly on
    global tensors each is an op of its own (_eager_global)."""
    import oneflowlike as flow  # noqa: PLC0415  imported after this module

    matmul, softmax, dropout = flow.matmul, flow.softmax, flow.nn.functional.dropout
    on = {} if isinstance(q, _C.Tensor) else {  # the positions where q is
        "placement": q.placement, "sbp": (flow.sbp.broadcast,) * len(q.placement.hierarchy)}

    def arange(n):
        return flow.arange(n, **on)

    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:  # grouped-query: each key/value head serves heads // kv_heads queries
        group = heads // kv_heads
        b, _, s, _ = k.shape

        def spread(t):
            t = t.unsqueeze(2).expand(b, kv_heads, group, s, t.shape[-1])
            return t.reshape(b, heads, s, t.shape[-1])

        k, v = spread(k), spread(v)
    att = matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        length, keys = q.shape[2], k.shape[2]
        query_at, key_at = arange(length), arange(keys)
        if zigzag:  # the positions of the rows, as they are stored (global tensors too)
            order = flow.nn.functional.zigzag
            query_at, key_at = order(query_at, 0, zigzag), order(key_at, 0, zigzag)
        query_at, key_at = query_at.reshape(length, 1), key_at.reshape(1, keys)
        att = att.masked_fill(key_at > query_at, float("-inf"))
        if window:  # and the keys before the query's `window` latest
            att = att.masked_fill(key_at <= query_at - window, float("-inf"))
    if mask is not None:
        att = att + mask
    if document_ids is not None:  # (B, 1, L, S): True where the key is of another document
        other = document_ids.unsqueeze(2) != document_ids.unsqueeze(1)
        att = att.masked_fill(other.unsqueeze(1), float("-inf"))
    # A row whose keys are all masked attends to nothing: 0, as PyTorch's SDPA and the fused
    # kernels (Note [Rows with every key masked]). Its scores become 0 before the softmax, so
    # neither the softmax nor its gradient sees a row of -inf (a NaN), and its weights 0 after.
    hidden = att.amax(dim=-1, keepdim=True) == float("-inf")
    weights = softmax(att.masked_fill(hidden, 0.0), dim=-1).masked_fill(hidden, 0.0)
    return matmul(dropout(weights, p=dropout_p, training=True), v)


def _eager_global(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False, *, zigzag=0, window=0, document_ids=None):
    """The eager form on global tensors (outside a trace). Note [Eager global dropout] in
    framework/global_dropout.py: a compiled op that draws random numbers cannot be
    differentiated by recomputing it, so with dropout_p > 0 attention runs op by op, written out,
    its dropout F.dropout's eager global form (the one-device mask, differentiated as drawn).
    Without dropout it is one compiled op, as any other function."""
    from oneflowlike.framework import global_tensor  # noqa: PLC0415

    args = (query, key, value)
    kwargs = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal,
              "scale": scale, "enable_gqa": enable_gqa, "zigzag": zigzag, "window": window,
              "document_ids": document_ids}
    if isinstance(dropout_p, (int, float)) and float(dropout_p) > 0.0:
        return scaled_dot_product_attention(*args, **kwargs)
    return global_tensor.apply(scaled_dot_product_attention, args, kwargs,
                               name="F.scaled_dot_product_attention")


TENSOR_METHODS = {}

NN_FUNCTIONAL = {
    "scaled_dot_product_attention": scaled_dot_product_attention,
}
