"""nn.MultiheadAttention, TransformerEncoderLayer and TransformerEncoder against torch's with the
same weights (Note [Attention weights] in nn/modules/transformer.py), forward and backward, and
in a graph against eager."""

import numpy as np
import pytest

import oneflowlike as flow
from train_graph import eager_and_graph_losses

torch = pytest.importorskip("torch")

L, N, E = 5, 3, 8


def _same_weights(ours, theirs):
    ours.load_state_dict({k: flow.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})


def _masks(kind):
    rng = np.random.default_rng(1)
    if kind == "bool causal":
        return np.triu(np.ones((L, L), bool), 1), None
    if kind == "float":
        return rng.standard_normal((L, L)).astype(np.float32), None
    if kind == "padding":
        pad = np.zeros((N, L), bool)
        pad[0, -2:] = True
        return None, pad
    if kind == "per head":
        return rng.standard_normal((N * 2, L, L)).astype(np.float32), None
    return None, None


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("masks", ["none", "bool causal", "float", "padding", "per head"])
def test_multihead_attention_matches_torch(batch_first, need_weights, average, masks):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, 2, batch_first=batch_first)
    ours = flow.nn.MultiheadAttention(E, 2, batch_first=batch_first)
    _same_weights(ours, theirs)
    shape = (N, L, E) if batch_first else (L, N, E)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    attn, pad = _masks(masks)
    kwargs = dict(need_weights=need_weights, average_attn_weights=average)
    xt, xf = torch.tensor(x, requires_grad=True), flow.tensor(x, requires_grad=True)
    yt, wt = theirs(xt, xt, xt, attn_mask=None if attn is None else torch.tensor(attn),
                    key_padding_mask=None if pad is None else torch.tensor(pad), **kwargs)
    yf, wf = ours(xf, xf, xf, attn_mask=None if attn is None else flow.tensor(attn),
                  key_padding_mask=None if pad is None else flow.tensor(pad), **kwargs)
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert (wf is None) == (wt is None)
    if wt is not None:
        np.testing.assert_allclose(wf.numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)
    yt.sum().backward()
    yf.sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.in_proj_weight.grad.numpy(),
                               theirs.in_proj_weight.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, 2, dim_feedforward=16, dropout=0.0,
                                             activation=activation, batch_first=True,
                                             norm_first=norm_first)
    theirs = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    ours = flow.nn.TransformerEncoder(
        flow.nn.TransformerEncoderLayer(E, 2, dim_feedforward=16, dropout=0.0,
                                        activation=activation, batch_first=True,
                                        norm_first=norm_first), 2)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    _same_weights(ours, theirs)
    x = np.random.default_rng(0).standard_normal((N, L, E)).astype(np.float32)
    pad = np.zeros((N, L), bool)
    pad[1, -1] = True
    xt, xf = torch.tensor(x, requires_grad=True), flow.tensor(x, requires_grad=True)
    yt = theirs(xt, src_key_padding_mask=torch.tensor(pad))
    yf = ours(xf, src_key_padding_mask=flow.tensor(pad))
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    yt.sum().backward()
    yf.sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_an_encoder_trains_alike_in_a_graph_and_eagerly():
    def make():
        flow.manual_seed(0)
        model = flow.nn.TransformerEncoder(
            flow.nn.TransformerEncoderLayer(E, 2, dim_feedforward=16, dropout=0.0,
                                            batch_first=True), 2)
        return model, flow.optim.SGD(model.parameters(), lr=0.1)

    x = flow.tensor(np.random.default_rng(0).standard_normal((N, L, E)).astype(np.float32))
    eager, graph = eager_and_graph_losses(
        make, lambda model, x: (model(x, is_causal=True) ** 2).mean(), (x,))
    np.testing.assert_allclose(graph, eager, rtol=1e-5)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"\[MultiheadAttention\] embed_dim must be a positive "
                                         r"multiple of num_heads"):
        flow.nn.MultiheadAttention(10, 3)
    with pytest.raises(NotImplementedError, match=r"add_bias_kv"):
        flow.nn.MultiheadAttention(8, 2, add_bias_kv=True)
    m = flow.nn.MultiheadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query, key and value must be"):
        m(flow.ones(5, 3, 6), flow.ones(5, 3, 6), flow.ones(5, 3, 6))
    with pytest.raises(ValueError, match=r"activation must be 'relu', 'gelu' or a callable"):
        flow.nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_multihead_attention_edges_from_a_review():
    """Cross-attention and unbatched inputs equal torch's; is_causal with a padding mask stays
    causal; the returned weights are those after dropout; masks of a wrong shape are refused;
    a global tensor with is_causal alone works."""
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, 2)
    ours = flow.nn.MultiheadAttention(E, 2)
    _same_weights(ours, theirs)
    rng = np.random.default_rng(0)
    q, kv = rng.standard_normal((L, N, E)).astype(np.float32), \
        rng.standard_normal((7, N, E)).astype(np.float32)
    yt, wt = theirs(torch.tensor(q), torch.tensor(kv), torch.tensor(kv))
    yf, wf = ours(flow.tensor(q), flow.tensor(kv), flow.tensor(kv))
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wf.numpy(), wt.detach().numpy(), rtol=1e-5, atol=1e-6)
    yt, _ = theirs(torch.tensor(q[:, 0]), torch.tensor(q[:, 0]), torch.tensor(q[:, 0]))
    yf, _ = ours(flow.tensor(q[:, 0]), flow.tensor(q[:, 0]), flow.tensor(q[:, 0]))
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    pad = np.zeros((N, L), bool)
    pad[0, -1] = True
    causal = np.triu(np.ones((L, L), bool), 1)
    yt, _ = theirs(*(torch.tensor(q),) * 3, key_padding_mask=torch.tensor(pad),
                   attn_mask=torch.tensor(causal), need_weights=False)
    yf, _ = ours(*(flow.tensor(q),) * 3, key_padding_mask=flow.tensor(pad), is_causal=True,
                 need_weights=False)
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    dropping = flow.nn.MultiheadAttention(E, 2, dropout=0.5).train()
    _, w = dropping(*(flow.tensor(q),) * 3, average_attn_weights=False)
    assert (w.numpy() == 0).mean() > 0.2  # dropped out, as torch returns them
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(N, S\)"):
        ours(*(flow.tensor(q),) * 3, key_padding_mask=flow.tensor(pad.T.copy()))
    with pytest.raises(ValueError, match=r"attn_mask must be \(5, 7\) or \(6, 5, 7\)"):
        ours(flow.tensor(q), flow.tensor(kv), flow.tensor(kv),
             attn_mask=flow.ones(6, 7, 5, dtype=flow.bool))
    p = flow.placement("cpu", ranks=[0])
    ours.to_global(p, flow.sbp.broadcast)
    g = flow.tensor(q, placement=p, sbp=flow.sbp.broadcast)
    for need_weights in (False, True):
        y, _ = ours(g, g, g, is_causal=True, need_weights=need_weights)
        assert y.is_global and tuple(y.shape) == (L, N, E)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_matches_torch(norm_first):
    torch.manual_seed(0)
    layer = torch.nn.TransformerDecoderLayer(E, 2, dim_feedforward=16, dropout=0.0,
                                             activation="gelu", batch_first=True,
                                             norm_first=norm_first)
    theirs = torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(E))
    ours = flow.nn.TransformerDecoder(
        flow.nn.TransformerDecoderLayer(E, 2, dim_feedforward=16, dropout=0.0,
                                        activation="gelu", batch_first=True,
                                        norm_first=norm_first), 2, norm=flow.nn.LayerNorm(E))
    assert set(ours.state_dict()) == set(theirs.state_dict())
    _same_weights(ours, theirs)
    rng = np.random.default_rng(0)
    tgt = rng.standard_normal((N, L, E)).astype(np.float32)
    memory = rng.standard_normal((N, 7, E)).astype(np.float32)
    pad = np.zeros((N, 7), bool)
    pad[2, -3:] = True
    causal = np.triu(np.ones((L, L), bool), 1)
    tt, mt = torch.tensor(tgt, requires_grad=True), torch.tensor(memory, requires_grad=True)
    tf, mf = flow.tensor(tgt, requires_grad=True), flow.tensor(memory, requires_grad=True)
    yt = theirs(tt, mt, tgt_mask=torch.tensor(causal), memory_key_padding_mask=torch.tensor(pad))
    yf = ours(tf, mf, tgt_mask=flow.tensor(causal), memory_key_padding_mask=flow.tensor(pad))
    np.testing.assert_allclose(yf.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    yt.sum().backward()
    yf.sum().backward()
    np.testing.assert_allclose(tf.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mf.grad.numpy(), mt.grad.numpy(), rtol=1e-4, atol=1e-5)
