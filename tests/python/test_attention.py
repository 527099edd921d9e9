"""flow.nn.functional.scaled_dot_product_attention against torch's, and against attention
written out (Note [Fused attention] in oneflowlike/ops/attention.h)."""

import math

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

torch = pytest.importorskip("torch", reason="the reference is torch's scaled_dot_product_attention")

F = flow.nn.functional


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def run_both(q, k, v, mask=None, grad_seed=None, **kwargs):
    """Ours and torch's outputs and (with grad_seed) q, k, v gradients of sum(out * g)."""
    ours_in = [flow.tensor(x, requires_grad=True) for x in (q, k, v)]
    theirs_in = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    ours_mask = None if mask is None else flow.tensor(mask)
    theirs_mask = None if mask is None else torch.tensor(mask)
    ours = F.scaled_dot_product_attention(*ours_in, attn_mask=ours_mask, **kwargs)
    theirs = torch.nn.functional.scaled_dot_product_attention(*theirs_in, attn_mask=theirs_mask,
                                                              **kwargs)
    results = [(ours.numpy(), theirs.detach().numpy())]
    if grad_seed is not None:
        g = rand(*ours.shape, dtype=q.dtype, seed=grad_seed)
        (ours * flow.tensor(g)).sum().backward()
        (theirs * torch.tensor(g)).sum().backward()
        results += [(a.grad.numpy(), b.grad.numpy()) for a, b in zip(ours_in, theirs_in)]
    return results


CASES = {
    "plain": dict(q=(2, 3, 17, 8), kv=(2, 3, 17, 8)),
    "causal": dict(q=(2, 3, 17, 8), kv=(2, 3, 17, 8), is_causal=True),
    "causal_long": dict(q=(1, 2, 300, 16), kv=(1, 2, 300, 16), is_causal=True),
    "cross": dict(q=(2, 2, 9, 8), kv=(2, 2, 140, 8)),
    "scaled": dict(q=(2, 3, 17, 8), kv=(2, 3, 17, 8), scale=0.05),
    "three_d": dict(q=(3, 17, 8), kv=(3, 17, 8), is_causal=True),
    # No keys at all: torch's product over none gives 0.
    "no_keys": dict(q=(2, 3, 5, 8), kv=(2, 3, 0, 8)),
}


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_a_row_whose_keys_are_all_masked_attends_to_nothing_as_in_torch(kind):
    """Note [Rows with every key masked]: out 0 for the row, its dq 0, nothing from it in dk and
    dv (PyTorch 2.15's SDPA; softmax alone gives NaN), where ours gave NaN; also with the causal
    mask, and in the written-out form (dropout's path) with its gradients."""
    q, k, v = rand(2, 3, 6, 8, seed=1), rand(2, 3, 7, 8, seed=2), rand(2, 3, 7, 8, seed=3)
    visible = np.ones((6, 7), bool)
    visible[0] = False  # row 0 sees no key
    visible[3, 2:] = False
    mask = visible if kind == "bool" else np.where(visible, 0.0, -np.inf).astype(np.float32)
    for causal in (False, True):
        if causal and kind == "bool":
            continue  # torch takes no mask with is_causal
        for ours, theirs in run_both(q, k, v, mask=None if causal else mask, grad_seed=4,
                                     is_causal=causal):
            assert not np.isnan(ours).any()
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    from oneflowlike.ops.attention import _written_out

    additive = np.where(visible, 0.0, -np.inf).astype(np.float32)
    fused_in = [flow.tensor(x, requires_grad=True) for x in (q, k, v)]
    written_in = [flow.tensor(x, requires_grad=True) for x in (q, k, v)]
    fused = F.scaled_dot_product_attention(*fused_in, attn_mask=flow.tensor(additive))
    written = _written_out(*written_in, flow.tensor(additive), 0.0, False, 1 / math.sqrt(8))
    g = flow.tensor(rand(2, 3, 6, 8, seed=5))
    (fused * g).sum().backward()
    (written * g).sum().backward()
    for a, b in [(fused, written)] + [(x.grad, y.grad) for x, y in zip(fused_in, written_in)]:
        assert not np.isnan(b.numpy()).any()
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_forward_and_backward_match_torch(case):
    spec = dict(CASES[case])
    q_shape, kv_shape = spec.pop("q"), spec.pop("kv")
    q, k, v = rand(*q_shape, seed=1), rand(*kv_shape, seed=2), rand(*kv_shape, seed=3)
    for ours, theirs in run_both(q, k, v, grad_seed=4, **spec):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_shape", [(2, 3, 9, 11), (9, 11), (2, 1, 1, 11)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_match_torch(mask_shape, kind):
    q, k, v = rand(2, 3, 9, 8, seed=1), rand(2, 3, 11, 8, seed=2), rand(2, 3, 11, 8, seed=3)
    rng = np.random.default_rng(5)
    if kind == "bool":
        mask = rng.uniform(size=mask_shape) > 0.3
        mask[..., 0] = True  # no row without a key (torch gives NaN there, as we do)
    else:
        mask = rng.standard_normal(mask_shape).astype(np.float32)
    for ours, theirs in run_both(q, k, v, mask=mask, grad_seed=6):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_bfloat16_matches_torch():
    q, k, v = rand(2, 3, 40, 16, seed=1), rand(2, 3, 40, 16, seed=2), rand(2, 3, 40, 16, seed=3)
    ours = F.scaled_dot_product_attention(*(flow.tensor(a).to(flow.bfloat16) for a in (q, k, v)),
                                          is_causal=True)
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a).to(torch.bfloat16) for a in (q, k, v)), is_causal=True)
    assert ours.dtype == flow.bfloat16
    np.testing.assert_allclose(ours.to(flow.float32).numpy(), theirs.float().numpy(),
                               rtol=2e-2, atol=2e-2)


def test_grouped_query_heads_match_torch():
    q, k, v = rand(2, 8, 13, 8, seed=1), rand(2, 2, 13, 8, seed=2), rand(2, 2, 13, 8, seed=3)
    for ours, theirs in run_both(q, k, v, grad_seed=4, is_causal=True, enable_gqa=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def written_out(q, k, v, mask=None, is_causal=False):
    """Attention as the GPT example wrote it before the fused op: matmul, mask, softmax, matmul."""
    att = flow.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        t, s = q.shape[-2], k.shape[-2]
        att = att.masked_fill(flow.arange(s).reshape(1, s) > flow.arange(t).reshape(t, 1),
                              float("-inf"))
    if mask is not None:
        att = att + mask
    return flow.matmul(F.softmax(att, dim=-1), v)


@pytest.mark.parametrize("is_causal", [False, True])
def test_fused_equals_attention_written_out(is_causal):
    x = [rand(2, 4, 70, 16, seed=s) for s in (1, 2, 3)]
    mask = None if is_causal else flow.tensor(rand(70, 70, seed=9))
    grads = []
    outs = []
    for fused in (True, False):
        q, k, v = (flow.tensor(a, requires_grad=True) for a in x)
        out = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
               if fused else written_out(q, k, v, mask, is_causal))
        (out * out).sum().backward()
        outs.append(out.numpy())
        grads.append([t.grad.numpy() for t in (q, k, v)])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads[0], grads[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_match_finite_differences_in_float64(is_causal):
    q, k, v = (rand(1, 2, 5, 3, dtype=np.float64, seed=s) for s in (1, 2, 3))
    check_gradients(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=is_causal),
                    q, k, v, rtol=1e-5, atol=1e-6)


def test_dropout_writes_the_attention_out_and_drops_weights():
    q, k, v = (flow.tensor(rand(2, 2, 6, 4, seed=s), requires_grad=True) for s in (1, 2, 3))
    flow.manual_seed(0)
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True)
    kept = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not np.allclose(dropped.numpy(), kept.numpy())
    dropped.sum().backward()
    assert all(t.grad is not None and np.isfinite(t.grad.numpy()).all() for t in (q, k, v))


def test_bad_inputs_raise_naming_them():
    q = flow.tensor(rand(2, 4, 5, 8))
    k = flow.tensor(rand(2, 4, 6, 8))
    with pytest.raises(ValueError, match=r"q and k must have one head_dim .* However, got q "
                                         r"\(2, 4, 5, 8\) float32, k \(2, 4, 6, 7\) float32"):
        F.scaled_dot_product_attention(q, flow.tensor(rand(2, 4, 6, 7)), k)
    with pytest.raises(ValueError, match=r"must all be 4-d .* However, got query \(2, 4, 5, 8\), "
                                         r"key \(4, 6, 8\)"):
        F.scaled_dot_product_attention(q, flow.tensor(rand(4, 6, 8)), k)
    with pytest.raises(ValueError, match=r"one number of heads unless enable_gqa=True"):
        F.scaled_dot_product_attention(q, flow.tensor(rand(2, 2, 6, 8)),
                                       flow.tensor(rand(2, 2, 6, 8)))
    with pytest.raises(ValueError, match=r"is_causal=True takes no attn_mask"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=flow.tensor(rand(5, 6)), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask must broadcast to \(batch, heads, L, S\) "
                                         r"\(2, 4, 5, 6\). However, got attn_mask \(5, 5\)"):
        F.scaled_dot_product_attention(q, k, k, attn_mask=flow.tensor(rand(5, 5)))
    with pytest.raises(TypeError, match=r"one floating dtype"):
        F.scaled_dot_product_attention(q, flow.tensor(rand(2, 4, 6, 8, dtype=np.float64)), k)


def test_a_mask_that_requires_grad_is_refused_not_ignored():
    q = flow.tensor(rand(1, 1, 3, 4), requires_grad=True)
    mask = flow.tensor(rand(3, 3), requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    with pytest.raises(NotImplementedError, match=r"attn_mask requires grad"):
        out.sum().backward()


class _AttentionModel(flow.nn.Module):
    def __init__(self):
        super().__init__()
        flow.manual_seed(3)
        self.attn = flow.nn.CausalSelfAttention(32, 4, 16, bias=True)
        self.head = flow.nn.Linear(32, 7)

    def forward(self, x):
        return self.head(self.attn(x))


class _AttentionGraph(flow.nn.Graph):
    def __init__(self, model, fetch_q=False):
        super().__init__()
        self.model = model
        self.fetch_q = fetch_q
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

    def build(self, x, y):
        if not self.fetch_q:
            loss = F.cross_entropy(self.model(x).reshape(-1, 7), y.reshape(-1))
            loss.backward()
            return loss
        # CausalSelfAttention written out, handing back its transposed q: a fetched value keeps
        # its transpose, so the fold leaves this attention alone.
        attn = self.model.attn
        qkv = attn.c_attn(x).reshape(2, 16, 4, 24)
        q, k, v = (t.transpose(1, 2) for t in qkv.split(8, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(8))
        out = attn.c_proj(out.transpose(1, 2).reshape(2, 16, 32))
        loss = F.cross_entropy(self.model.head(out).reshape(-1, 7), y.reshape(-1))
        loss.backward()
        return loss, q


def _train_attention(tmp_path, tag, steps=3, fetch_q=False):
    graph = _AttentionGraph(_AttentionModel(), fetch_q)
    x = flow.tensor(rand(2, 16, 32, seed=5))
    y = flow.tensor(np.random.default_rng(6).integers(0, 7, size=(2, 16)))
    losses = []
    for _ in range(steps):
        out = graph(x, y)
        losses.append((out[0] if fetch_q else out).numpy())
    dot = tmp_path / f"{tag}.dot"
    graph.write_dot(str(dot))
    computes = dot.read_text().count("COMPUTE transpose")
    return np.array(losses), computes, [p.numpy() for p in graph.model.parameters()]


def test_graph_folds_the_head_transposes_into_attention(tmp_path, monkeypatch):
    # Note [Attention layout folding]: the 4 swaps around the forward op and the 4 of the
    # backward are gone; the step gives the same bits as the graph without the pass.
    losses, transposes, params = _train_attention(tmp_path, "folded")
    assert transposes == 0
    monkeypatch.setenv("OFL_SKIP_PASSES", "attention_layout")
    kept_losses, kept_transposes, kept_params = _train_attention(tmp_path, "kept")
    assert kept_transposes == 8
    np.testing.assert_array_equal(losses, kept_losses)
    for a, b in zip(params, kept_params):
        np.testing.assert_array_equal(a, b)


def test_a_fetched_transpose_keeps_the_fold_off(tmp_path):
    losses, transposes, _ = _train_attention(tmp_path, "fetched", fetch_q=True)
    plain, _, _ = _train_attention(tmp_path, "plain")
    assert transposes == 8
    np.testing.assert_array_equal(losses, plain)


def _zigzag_np(x, axis, n):
    """Note [Zigzag order] in numpy: axis cut in 2n chunks, stored 0, 2n-1, 1, 2n-2, ..."""
    chunks = np.split(x, 2 * n, axis=axis)
    return np.concatenate([chunks[s // 2 if s % 2 == 0 else 2 * n - 1 - s // 2]
                           for s in range(2 * n)], axis=axis)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_zigzag_orders_chunks_and_unzigzag_undoes_it(n):
    x = rand(2, 12, 3, seed=n)
    ordered = F.zigzag(flow.tensor(x), 1, n)
    np.testing.assert_array_equal(ordered.numpy(), _zigzag_np(x, 1, n))
    np.testing.assert_array_equal(F.unzigzag(ordered, -2, n).numpy(), x)
    if n == 2:  # piece i of 2 holds chunks i and 3 - i
        np.testing.assert_array_equal(ordered.numpy()[:, :6], np.concatenate(
            [x[:, 0:3], x[:, 9:12]], axis=1))


@pytest.mark.parametrize("dropout_path", [False, True], ids=["fused", "written_out"])
@pytest.mark.parametrize("n", [2, 3])
def test_zigzag_attention_gives_torchs_rows_in_that_order(n, dropout_path):
    """Note [Zigzag order]: q, k, v and the result in the zigzag order over n pieces give torch's
    causal attention of the sequence, reordered, forward and backward; so does the written-out
    form that dropout_p > 0 takes (called here with p = 0, to compare)."""
    from oneflowlike.ops import attention as ours

    q, k, v = (rand(2, 3, 36, 8, seed=s) for s in (1, 2, 3))
    g = rand(2, 3, 36, 8, seed=4)
    theirs_in = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    theirs = torch.nn.functional.scaled_dot_product_attention(*theirs_in, is_causal=True)
    (theirs * torch.tensor(g)).sum().backward()
    ours_in = [flow.tensor(_zigzag_np(x, 2, n), requires_grad=True) for x in (q, k, v)]
    if dropout_path:
        out = ours._written_out(*ours_in, None, 0.0, True, 1.0 / math.sqrt(8), zigzag=n)
    else:
        out = F.scaled_dot_product_attention(*ours_in, is_causal=True, zigzag=n)
    np.testing.assert_allclose(out.numpy(), _zigzag_np(theirs.detach().numpy(), 2, n),
                               rtol=1e-5, atol=1e-5)
    (out * flow.tensor(_zigzag_np(g, 2, n))).sum().backward()
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), _zigzag_np(b.grad.numpy(), 2, n),
                                   rtol=1e-4, atol=1e-5)


def test_zigzag_attention_refuses_what_it_cannot_order():
    q = flow.tensor(rand(1, 2, 12, 4))
    with pytest.raises(ValueError, match=r"zigzag orders the queries of causal attention: it "
                                         r"needs is_causal=True"):
        F.scaled_dot_product_attention(q, q, q, zigzag=2)
    with pytest.raises(ValueError, match=r"zigzag=4 cuts the sequence in 8 chunks: query and key "
                                         r"must have one length L that 8 divides. However, got "
                                         r"query \(1, 2, 12, 4\)"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True, zigzag=4)
    with pytest.raises(ValueError, match=r"zigzag \(the pieces the order balances\) must be "
                                         r"an int >= 0. However, got -1"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True, zigzag=-1)
    with pytest.raises(ValueError, match=r"must be an int >= 0. However, got 2.0"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True, zigzag=2.0)
    with pytest.raises(ValueError, match=r"\[zigzag\] n = 5 cuts dim 1 in 10 chunks: its size "
                                         r"must be a multiple of 10. However, got shape \(1, 12\)"):
        F.zigzag(flow.tensor(rand(1, 12)), 1, 5)
    with pytest.raises(ValueError, match=r"\[unzigzag\] zigzag \(the pieces the order balances\) "
                                         r"must be an int >= 1. However, got 0"):
        F.unzigzag(q, 2, 0)
    rope = flow.nn.RotaryEmbedding(4, 12, zigzag=2)
    with pytest.raises(ValueError, match=r"\[RotaryEmbedding\] zigzag=2 orders the positions in 4 "
                                         r"chunks: the input's 10 positions along dim -2 must be "
                                         r"a multiple of that"):
        rope(flow.tensor(rand(1, 2, 10, 4)))
    # numpy's integers are integers.
    np.testing.assert_array_equal(F.zigzag(q, 2, np.int64(2)).numpy(), F.zigzag(q, 2, 2).numpy())


def test_zigzag_attention_with_dropout_runs_on_eager_global_tensors():
    # The written-out form dropout takes orders its positions with F.zigzag, which takes global
    # tensors (the raw function raised TypeError on them). Row 0 (position 0) sees key 0 only:
    # its output is v's row 0, dropped out (0) or scaled by 1 / (1 - p).
    placement = flow.placement("cpu", ranks=[0])
    q = flow.tensor(rand(1, 2, 8, 4, seed=1), placement=placement, sbp=flow.sbp.broadcast,
                    requires_grad=True)
    flow.manual_seed(0)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True, zigzag=2, dropout_p=0.5)
    row, v0 = out.numpy()[0, :, 0], q.numpy()[0, :, 0]
    for h in range(2):
        assert np.allclose(row[h], 0) or np.allclose(row[h], 2 * v0[h], rtol=1e-5)
    out.sum().backward()
    assert np.isfinite(q.grad.numpy()).all()


def _window_mask(length, window):
    """torch's boolean mask of sliding-window attention: query i sees keys (i - window, i]."""
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    return torch.tensor((j <= i) & (j > i - window))


@pytest.mark.parametrize("path", ["fused", "written_out", "zigzag", "bfloat16"])
@pytest.mark.parametrize("window", [1, 9, 100])
def test_sliding_window_gives_torchs_attention_of_that_mask(window, path):
    """Note [Sliding window]: each query sees its `window` latest keys, as torch's SDPA with the
    boolean mask of them, forward and backward: fused, written out (the form dropout_p > 0
    takes, called with p = 0), in the zigzag order over 2 pieces, and in bfloat16 (within its
    tolerance); grouped-query heads. A window longer than the sequence is causal attention."""
    from oneflowlike.ops import attention as ours

    n = 2 if path == "zigzag" else 0
    order = (lambda x: _zigzag_np(x, 2, n)) if n else (lambda x: x)
    q, g = rand(2, 4, 72, 8, seed=1), rand(2, 4, 72, 8, seed=4)
    k, v = rand(2, 2, 72, 8, seed=2), rand(2, 2, 72, 8, seed=3)
    dtype = torch.bfloat16 if path == "bfloat16" else torch.float32
    theirs_in = [torch.tensor(x).to(dtype).requires_grad_() for x in (q, k, v)]
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *theirs_in, attn_mask=_window_mask(72, window), enable_gqa=True)
    (theirs.float() * torch.tensor(g)).sum().backward()
    ours_in = [flow.tensor(order(x), requires_grad=True) for x in (q, k, v)]
    if path == "bfloat16":
        cast = [x.to(flow.bfloat16) for x in ours_in]
    else:
        cast = ours_in
    if path == "written_out":
        out = ours._written_out(*cast, None, 0.0, True, 1.0 / math.sqrt(8), window=window)
    else:
        out = F.scaled_dot_product_attention(*cast, is_causal=True, enable_gqa=True, zigzag=n,
                                             window=window)
    tol = (2e-2, 2e-2) if path == "bfloat16" else (1e-5, 1e-5)
    np.testing.assert_allclose(out.float().numpy(), order(theirs.detach().float().numpy()),
                               rtol=tol[0], atol=tol[1])
    (out.float() * flow.tensor(order(g))).sum().backward()
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), order(b.grad.float().numpy()),
                                   rtol=10 * tol[0], atol=10 * tol[1] if n or path != "fused" else 1e-5)
    if window == 100 and path == "fused":  # nothing hidden but the later keys: causal
        causal = F.scaled_dot_product_attention(*(flow.tensor(x) for x in (q, k, v)),
                                                is_causal=True, enable_gqa=True)
        np.testing.assert_array_equal(out.numpy(), causal.numpy())


def test_sliding_window_refuses_what_is_not_causal_attention():
    q = flow.tensor(rand(1, 2, 12, 4))
    with pytest.raises(ValueError, match=r"\[scaled_dot_product_attention\] window counts the "
                                         r"latest keys a query of causal attention sees: it needs "
                                         r"is_causal=True"):
        F.scaled_dot_product_attention(q, q, q, window=4)
    with pytest.raises(ValueError, match=r"window \(the latest keys each query sees\) must be an "
                                         r"int >= 0. However, got -2"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True, window=-2)
    with pytest.raises(ValueError, match=r"\[CausalSelfAttention\] window .* However, got 2.5"):
        flow.nn.CausalSelfAttention(8, 2, 12, window=2.5)


def test_causal_self_attention_with_a_window_sees_only_its_latest_positions():
    """Changing the input at position 3 changes the outputs at positions 3 .. 3 + window - 1
    and leaves every other one as it was."""
    flow.manual_seed(0)
    attn = flow.nn.CausalSelfAttention(16, 4, 32, window=5)
    assert "window=5" in repr(attn)
    x = rand(1, 32, 16, seed=7)
    y = x.copy()
    y[0, 3] += 1.0
    a, b = attn(flow.tensor(x)).numpy(), attn(flow.tensor(y)).numpy()
    changed = np.abs(a - b).max(axis=-1)[0] > 1e-6
    np.testing.assert_array_equal(np.flatnonzero(changed), np.arange(3, 8))


def _documents(length):
    """Two rows of document ids: packed documents of 20, 3, 30 and 19 positions, and two ids in
    turn (ids need not rise)."""
    packed = np.repeat([0, 1, 2, 3], [20, 3, 30, 19])
    return np.stack([packed[:length], (np.arange(length) // 9) % 2])


@pytest.mark.parametrize("path", ["fused", "written_out", "zigzag", "bfloat16", "not_causal",
                                  "window", "int32"])
def test_document_ids_give_torchs_attention_of_the_document_mask(path):
    """Note [Packed documents]: a query sees only its own document's keys, as torch's SDPA with
    the boolean document mask (and the causal mask, and a window of 7 keys), forward and
    backward: fused, written out (dropout_p > 0's form, called with p = 0), in the zigzag order
    over 2 pieces (the ids in it too), bfloat16, not causal, int32 ids; grouped-query heads."""
    from oneflowlike.ops import attention as ours

    n = 2 if path == "zigzag" else 0
    order = (lambda x, axis=2: _zigzag_np(x, axis, n)) if n else (lambda x, axis=2: x)
    causal, window = path != "not_causal", 7 if path == "window" else 0
    q, g = rand(2, 4, 72, 8, seed=1), rand(2, 4, 72, 8, seed=4)
    k, v = rand(2, 2, 72, 8, seed=2), rand(2, 2, 72, 8, seed=3)
    ids = _documents(72)
    same = ids[:, :, None] == ids[:, None, :]
    i, j = np.arange(72)[:, None], np.arange(72)[None, :]
    seen = same & ((j <= i) if causal else True) & ((j > i - window) if window else True)
    dtype = torch.bfloat16 if path == "bfloat16" else torch.float32
    theirs_in = [torch.tensor(x).to(dtype).requires_grad_() for x in (q, k, v)]
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *theirs_in, attn_mask=torch.tensor(seen[:, None]), enable_gqa=True)
    (theirs.float() * torch.tensor(g)).sum().backward()
    ours_in = [flow.tensor(order(x), requires_grad=True) for x in (q, k, v)]
    cast = [x.to(flow.bfloat16) for x in ours_in] if path == "bfloat16" else ours_in
    docs = flow.tensor(order(ids, 1).astype(np.int32 if path == "int32" else np.int64))
    if path == "written_out":
        out = ours._written_out(*cast, None, 0.0, causal, 1.0 / math.sqrt(8),
                                document_ids=docs)
    else:
        out = F.scaled_dot_product_attention(*cast, is_causal=causal, enable_gqa=True, zigzag=n,
                                             window=window, document_ids=docs)
    tol = 2e-2 if path == "bfloat16" else 1e-5
    np.testing.assert_allclose(out.float().numpy(), order(theirs.detach().float().numpy()),
                               rtol=tol, atol=tol)
    (out.float() * flow.tensor(order(g))).sum().backward()
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), order(b.grad.float().numpy()),
                                   rtol=10 * tol, atol=10 * tol if path == "bfloat16" else 1e-5)


def test_document_ids_are_refused_naming_what_is_wrong():
    q = flow.tensor(rand(2, 2, 12, 4))
    ids = flow.tensor(np.zeros((2, 12), np.int64))
    with pytest.raises(ValueError, match=r"takes an attn_mask or document_ids, not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=flow.ones(12, 12),
                                       document_ids=ids)
    with pytest.raises(TypeError, match=r"document_ids must be int32 or int64. However, got "
                                        r"oneflowlike.float32"):
        F.scaled_dot_product_attention(q, q, q, document_ids=flow.zeros(2, 12))
    with pytest.raises(ValueError, match=r"document_ids the shape \(2, 12\). However, got query "
                                         r"\(2, 2, 12, 4\).*document_ids \(12,\)"):
        F.scaled_dot_product_attention(q, q, q, document_ids=flow.tensor(np.zeros(12, np.int64)))
    k = flow.tensor(rand(2, 2, 10, 4))
    with pytest.raises(ValueError, match=r"query and key must have one length L"):
        F.scaled_dot_product_attention(q, k, k, document_ids=ids)
    # 3-d inputs take (L,) ids.
    q3 = flow.tensor(rand(2, 12, 4))
    out = F.scaled_dot_product_attention(q3, q3, q3, is_causal=True,
                                         document_ids=flow.tensor(np.zeros(12, np.int64)))
    np.testing.assert_allclose(out.numpy(), F.scaled_dot_product_attention(
        q3, q3, q3, is_causal=True).numpy(), rtol=1e-6, atol=1e-6)


def test_causal_self_attention_keeps_each_document_to_itself():
    """Changing a position of the first document changes none of the second's outputs."""
    flow.manual_seed(0)
    attn = flow.nn.CausalSelfAttention(16, 4, 32)
    ids = flow.tensor(np.repeat([[0, 1]], 16, axis=1).astype(np.int64))  # positions 0-15, 16-31
    x = rand(1, 32, 16, seed=7)
    y = x.copy()
    y[0, 3] += 1.0
    a, b = (attn(flow.tensor(t), document_ids=ids).numpy() for t in (x, y))
    changed = np.abs(a - b).max(axis=-1)[0] > 1e-6
    np.testing.assert_array_equal(np.flatnonzero(changed), np.arange(3, 16))
