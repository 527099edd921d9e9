"""nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder,
nn.TransformerDecoderLayer and nn.TransformerDecoder, with torch's
parameters (names, shapes, initialisation), arguments and masks, composed of linear, the fused
attention (F.scaled_dot_product_attention) and layer norm, so every device, layout and graph
has them.

Note [Attention weights]: need_weights=True (torch's default) asks for the attention
probabilities, which the fused kernel never forms: the call then writes attention out (scores,
softmax, dropout, product) and returns them averaged over heads (or per head). With
need_weights=False it is the fused kernel. Masks as torch's: a bool attn_mask or
key_padding_mask is True where attention is NOT allowed, a float one is added to the scores,
and their shapes are checked (a transposed mask would reshape into a wrong one). is_causal
without an attn_mask makes the causal mask (torch asks for one with the hint), also with a
key_padding_mask; returned weights are those after dropout, as torch's.
"""

import copy
import math

from oneflowlike.nn import functional as F
from oneflowlike.nn import init
from oneflowlike.nn.modules.container import ModuleList
from oneflowlike.nn.modules.dropout import Dropout
from oneflowlike.nn.modules.layer_norm import LayerNorm
from oneflowlike.nn.modules.linear import Linear
from oneflowlike.nn.modules.module import Module
from oneflowlike.nn.parameter import Parameter


def _additive(mask, dtype, op):
    """A mask as scores to add: a bool one (True: not allowed) as -inf where True, a float one
    as it is."""
    import oneflowlike as flow

    if mask.dtype == flow.bool:
        return flow.where(mask, float("-inf"), 0.0).to(dtype)
    if not mask.dtype.is_floating_point:
        raise TypeError(f"[{op}] masks must be bool or floating. However, got {mask.dtype!r}.")
    return mask.to(dtype)


def _causal(length, source, like):
    """(L, S) bool, True above the diagonal (where attention is not allowed), where ``like``
    is: its device, or for a global tensor its placement, replicated."""
    import oneflowlike as flow

    if getattr(like, "is_global", False):
        ones = flow.ones(length, source, dtype=flow.bool, placement=like.placement,
                         sbp=(flow.sbp.broadcast,) * len(like.placement.hierarchy))
    else:
        ones = flow.ones(length, source, dtype=flow.bool, device=like.device)
    return ones.triu(1)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention (Note [Attention weights]): in_proj_weight (3E, E),
    in_proj_bias, out_proj; (L, N, E) inputs, or (N, L, E) with batch_first."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"[MultiheadAttention] embed_dim must be a positive multiple of "
                             f"num_heads. However, got {embed_dim} and {num_heads}.")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or \
                vdim not in (None, embed_dim):
            raise NotImplementedError("[MultiheadAttention] add_bias_kv, add_zero_attn and "
                                      "kdim/vdim other than embed_dim are not supported.")
        import oneflowlike as flow

        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.batch_first = batch_first
        factory = {"device": device, "dtype": dtype}
        self.in_proj_weight = Parameter(flow.zeros(3 * embed_dim, embed_dim, **factory))
        self.in_proj_bias = Parameter(flow.zeros(3 * embed_dim, **factory)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **factory)
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.ndim == 3
        if not batched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        length, batch, embed = query.shape
        source = key.shape[0]
        if embed != self.embed_dim or tuple(key.shape[1:]) != (batch, embed) or \
                tuple(value.shape) != tuple(key.shape):
            raise ValueError(f"[MultiheadAttention] query, key and value must be (L, N, "
                             f"{self.embed_dim}), (S, N, {self.embed_dim}) and the key's shape. "
                             f"However, got {tuple(query.shape)}, {tuple(key.shape)} and "
                             f"{tuple(value.shape)}.")
        w_q, w_k, w_v = self.in_proj_weight.chunk(3, 0)
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = self.in_proj_bias.chunk(3, 0)
        heads, d = self.num_heads, self.head_dim

        def split(x, w, b, n):  # (n, N, E) -> (N, heads, n, d)
            return F.linear(x, w, b).reshape(n, batch, heads, d).permute(1, 2, 0, 3)

        q, k, v = split(query, w_q, b_q, length), split(key, w_k, b_k, source), \
            split(value, w_v, b_v, source)
        op = "MultiheadAttention"
        mask = None
        if attn_mask is not None:
            allowed = [(length, source), (batch * heads, length, source)]
            if not batched:
                allowed[1] = (heads, length, source)
            if tuple(attn_mask.shape) not in allowed:
                raise ValueError(f"[{op}] attn_mask must be {allowed[0]} or {allowed[1]} "
                                 f"(L, S from query and key). However, got "
                                 f"{tuple(attn_mask.shape)}.")
            mask = _additive(attn_mask, q.dtype, op)
            if mask.ndim == 3:  # (N * heads, L, S)
                mask = mask.reshape(batch, heads, length, source)
        elif is_causal and (need_weights or key_padding_mask is not None):
            # torch asks for the mask with the hint; here the hint makes it (Note [Attention
            # weights]).
            mask = _additive(_causal(length, source, q), q.dtype, op)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (batch, source):
                raise ValueError(f"[{op}] key_padding_mask must be (N, S) = "
                                 f"{(batch, source) if batched else (source,)}. However, got "
                                 f"{tuple(key_padding_mask.shape) if batched else tuple(key_padding_mask.shape[1:])}.")
            padding = _additive(key_padding_mask, q.dtype, op)
            padding = padding.reshape(batch, 1, 1, source)
            mask = padding if mask is None else mask + padding
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            if mask is not None:
                scores = scores + mask
            weights = F.dropout(F.softmax(scores, -1), p, self.training)  # torch returns them
            y = weights.matmul(v)  # after dropout
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                weights = weights.squeeze(0)
        else:
            causal_only = is_causal and mask is None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                               is_causal=causal_only)
        y = self.out_proj(y.permute(2, 0, 1, 3).reshape(length, batch, embed))
        if not batched:
            y = y.squeeze(1)
        elif self.batch_first:
            y = y.transpose(0, 1)
        return y, weights

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


class _Layer(Module):
    """What torch's encoder and decoder layers share: ``blocks`` residual blocks (attention to
    itself, attention to a memory for the decoder, the feed-forward block), each with its
    dropout (dropout1, ...) and layer norm (norm1, ...) after it (norm_first: before), in
    torch's names and registration order."""

    def __init__(self, op, blocks, d_model, nhead, dim_feedforward, dropout, activation,
                 layer_norm_eps, batch_first, norm_first, bias, device, dtype):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        if blocks == 3:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                     batch_first=batch_first, **factory)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        for k in range(1, blocks + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                **factory))
        for k in range(1, blocks + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))
        if isinstance(activation, str):
            if activation not in ("relu", "gelu"):
                raise ValueError(f"[{op}] activation must be 'relu', 'gelu' or a callable. "
                                 f"However, got {activation!r}.")
            activation = F.relu if activation == "relu" else F.gelu
        self.activation = activation

    def _residual(self, x, k, block):
        """Block ``k`` (1-based) with its residual, dropout and norm."""
        norm, dropout = getattr(self, f"norm{k}"), getattr(self, f"dropout{k}")
        if self.norm_first:
            return x + dropout(block(norm(x)))
        return norm(x + dropout(block(x)))

    def _attention(self, attention, memory, mask, padding, is_causal):
        def block(x):
            source = x if memory is None else memory
            return attention(x, source, source, attn_mask=mask, key_padding_mask=padding,
                             need_weights=False, is_causal=is_causal)[0]

        return block

    def _feed_forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class TransformerEncoderLayer(_Layer):
    """torch.nn.TransformerEncoderLayer: self-attention and a feed-forward block, each with a
    residual, dropout and layer norm after (norm_first: before)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__("TransformerEncoderLayer", 2, d_model, nhead, dim_feedforward, dropout,
                         activation, layer_norm_eps, batch_first, norm_first, bias, device,
                         dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = self._residual(src, 1, self._attention(self.self_attn, None, src_mask,
                                                   src_key_padding_mask, is_causal))
        return self._residual(x, 2, self._feed_forward)


class TransformerDecoderLayer(_Layer):
    """torch.nn.TransformerDecoderLayer: self-attention over the target, attention to the
    encoder's memory, and a feed-forward block, each with a residual, dropout and layer norm
    after (norm_first: before)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__("TransformerDecoderLayer", 3, d_model, nhead, dim_feedforward, dropout,
                         activation, layer_norm_eps, batch_first, norm_first, bias, device,
                         dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = self._residual(tgt, 1, self._attention(self.self_attn, None, tgt_mask,
                                                   tgt_key_padding_mask, tgt_is_causal))
        x = self._residual(x, 2, self._attention(self.multihead_attn, memory, memory_mask,
                                                 memory_key_padding_mask, memory_is_causal))
        return self._residual(x, 3, self._feed_forward)


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder: ``num_layers`` copies of ``encoder_layer`` in turn, then
    ``norm`` if given."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder: ``num_layers`` copies of ``decoder_layer`` in turn over the
    target, each attending to ``memory``, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x
