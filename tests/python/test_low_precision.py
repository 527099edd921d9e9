"""float16 and bfloat16 through the CPU kernels of every op family (Note [Widened kernels] in
oneflowlike/kernels/cpu/widened.h): an op's 16-bit result is its float32 result on the same
rounded inputs, rounded once (so equal bit for bit); gradients, made of several ops each
rounding, within tolerances.KERNEL_RTOL."""

import numpy as np
import pytest

import oneflowlike as flow
from tolerances import KERNEL_RTOL

F = flow.nn.functional
LOW = {"bfloat16": flow.bfloat16, "float16": flow.float16}


def rand(*shape, seed=0, positive=False):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.1 if positive else x


CASES = {  # name: (function, inputs as numpy arrays, differentiable)
    "add_broadcast": (lambda a, b: a + b, [rand(4, 5), rand(5, seed=1)], True),
    "sub": (lambda a, b: a - b, [rand(4, 5), rand(4, 5, seed=1)], True),
    "mul": (lambda a, b: a * b, [rand(4, 5), rand(4, 5, seed=1)], True),
    "div": (lambda a, b: a / b, [rand(4, 5), rand(4, 5, seed=1, positive=True)], True),
    "greater": (lambda a, b: a > b, [rand(4, 5), rand(4, 5, seed=1)], False),
    "exp": (flow.exp, [rand(3, 7)], True),
    "log": (flow.log, [rand(3, 7, positive=True)], True),
    "sqrt": (flow.sqrt, [rand(3, 7, positive=True)], True),
    "tanh": (flow.tanh, [rand(3, 7)], True),
    "relu": (flow.relu, [rand(3, 7)], True),
    "sigmoid": (flow.sigmoid, [rand(3, 7)], True),
    "gelu": (F.gelu, [rand(3, 7)], True),
    "scalar_mul": (lambda a: a * 3.0, [rand(3, 7)], True),
    "scalar_add": (lambda a: a + 1.5, [rand(3, 7)], True),
    "pow": (lambda a: a ** 2, [rand(3, 7)], True),
    "sum": (lambda a: a.sum(dim=1), [rand(6, 9)], True),
    "mean": (lambda a: a.mean(), [rand(6, 9)], True),
    "max": (lambda a: a.max(), [rand(6, 9)], False),
    "max_dim": (lambda a: flow.max(a, 1).values, [rand(6, 9)], True),
    "topk": (lambda a: flow.topk(a, 3).values, [rand(4, 9)], True),
    "sort": (lambda a: flow.sort(a, 0, descending=True).values, [rand(4, 9)], True),
    "gather": (lambda a: flow.gather(a, 1, flow.tensor([[0, 8, 8]] * 4)), [rand(4, 9)], True),
    "index_select": (lambda a: flow.index_select(a, 0, flow.tensor([3, 0, 3])), [rand(4, 9)],
                     True),
    "softmax": (lambda a: F.softmax(a, dim=-1), [rand(4, 9)], True),
    "log_softmax": (lambda a: F.log_softmax(a, dim=-1), [rand(4, 9)], True),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (9,), w, b),
                   [rand(4, 9), rand(9, seed=1), rand(9, seed=2)], True),
    "fused_chain": (lambda a: flow._C.fused_elementwise(a, "scalar_mul(0.5),tanh,scalar_add(1)"),
                    [rand(3, 7)], False),
    "fused_chain_blocks": (lambda a: flow._C.fused_elementwise(a, "gelu_tanh,scalar_pow(2),exp"),
                           [rand(3, 1500)], False),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  [rand(1, 2, 5, 4), rand(1, 2, 5, 4, seed=1), rand(1, 2, 5, 4, seed=2)], True),
}


# Kernels that compute in 16 bits themselves, so round more than once (their own tests hold them
# to the dtype's tolerance): bfloat16 attention multiplies its tiles in bfloat16 on CPUs with
# AVX512-BF16, its probabilities rounded as the operand of p v (Note [bfloat16 tile products]).
NOT_ROUNDED_ONCE = {("attention", "bfloat16")}


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("case", list(CASES))
def test_a_sixteen_bit_op_is_its_float32_kernel_rounded_once(case, dtype):
    fn, arrays, differentiable = CASES[case]
    low = LOW[dtype]
    rounded = [flow.tensor(a).to(low) for a in arrays]
    out = fn(*rounded)
    want = fn(*[t.to(flow.float32) for t in rounded])
    if out.dtype == flow.bool:
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        return
    assert out.dtype == low
    if (case, dtype) in NOT_ROUNDED_ONCE:
        np.testing.assert_allclose(out.to(flow.float32).numpy(), want.numpy(),
                                   rtol=KERNEL_RTOL[dtype], atol=KERNEL_RTOL[dtype])
    else:
        np.testing.assert_array_equal(out.to(flow.float32).numpy(),
                                      want.to(low).to(flow.float32).numpy())
    if not differentiable:
        return
    ours = [t.detach().requires_grad_() for t in rounded]
    theirs = [t.to(flow.float32).detach().requires_grad_() for t in rounded]
    fn(*ours).sum().backward()
    fn(*theirs).sum().backward()
    for o, t in zip(ours, theirs):
        assert o.grad.dtype == low
        tol = KERNEL_RTOL[dtype]
        np.testing.assert_allclose(o.grad.to(flow.float32).numpy(), t.grad.numpy(), rtol=tol,
                                   atol=tol)


NORM_KERNELS = {  # name: (kernel, input shapes by position; "rows" is (rows, 300), "row" (300,))
    "layer_norm": (flow._C.layer_norm, ["rows", "row", "row"]),
    "layer_norm_grad": (flow._C.layer_norm_grad, ["rows", "rows", "stats", "stats", "row"]),
    "layer_norm_param_grad": (flow._C.layer_norm_param_grad, ["rows", "rows", "stats", "stats"]),
    "rms_norm": (flow._C.rms_norm, ["rows", "row"]),
    "rms_norm_grad": (flow._C.rms_norm_grad, ["rows", "rows", "stats", "row"]),
    "rms_norm_param_grad": (flow._C.rms_norm_param_grad, ["rows", "rows", "stats"]),
}


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("kernel", list(NORM_KERNELS))
def test_every_norm_kernel_is_its_float32_kernel_rounded_once(kernel, dtype):
    """Each output of the norms' 16-bit kernels, forward and backward (bfloat16's read its rows
    into float32 scratch, Note [Native bfloat16 rows]), is the float32 kernel's on the same
    rounded inputs, rounded once: bit for bit, over rows longer than a vector's lanes."""
    fn, kinds = NORM_KERNELS[kernel]
    shapes = {"rows": (37, 300), "row": (300,), "stats": (37,)}
    arrays = [rand(*shapes[k], seed=i, positive=(k == "stats")) for i, k in enumerate(kinds)]
    low = LOW[dtype]
    rounded = [flow.tensor(a).to(low) for a in arrays]
    got = fn(*rounded)
    want = fn(*[t.to(flow.float32) for t in rounded])
    got, want = (got, want) if isinstance(got, (list, tuple)) else ([got], [want])
    for g, w in zip(got, want):
        assert g.dtype == low
        np.testing.assert_array_equal(g.to(flow.float32).numpy(),
                                      w.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((37, 300), -1), ((300, 70), 0), ((3, 2000, 5), 1),
                                       ((4, 9, 6), 1)])
def test_softmax_kernels_are_their_float32_kernels_rounded_once(name, shape, dim, dtype):
    """softmax, log_softmax and their gradients in 16 bits (bfloat16 on widened rows, or lines
    of a non-last axis a few at a time where the axis is long: Note [Native bfloat16 rows]) are
    the float32 kernels on the same rounded inputs, rounded once: bit for bit."""
    low = LOW[dtype]
    forward, backward = getattr(flow._C, name), getattr(flow._C, name + "_grad")
    x = flow.tensor(rand(*shape)).to(low)
    y = forward(x, dim)
    want = forward(x.to(flow.float32), dim)
    assert y.dtype == low
    np.testing.assert_array_equal(y.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())
    dy = flow.tensor(rand(*shape, seed=3)).to(low)
    dx = backward(y, dy, dim)
    want = backward(y.to(flow.float32), dy.to(flow.float32), dim)
    assert dx.dtype == low
    np.testing.assert_array_equal(dx.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "relu",
                                  "sigmoid", "tanh_grad", "sigmoid_grad", "relu_grad",
                                  "abs_grad"])
def test_unary_kernels_are_their_float32_kernels_rounded_once(name, dtype):
    """The unary ops and their backward ops in 16 bits (bfloat16 in its own loops, each element
    widened in a register: Note [Native bfloat16 loops]) are the float32 kernels on the same
    rounded inputs, rounded once: bit for bit, over a vector's lanes and a tail, with zeros,
    infinities and NaN among the values."""
    low = LOW[dtype]
    x = rand(1000, seed=6) * 4
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]
    args = [flow.tensor(x).to(low)]
    if name.endswith("_grad"):
        args.append(flow.tensor(rand(1000, seed=7)).to(low))
    fn = getattr(flow._C, name)
    got = fn(*args)
    want = fn(*[a.to(flow.float32) for a in args])
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


BINARY_OPS = {"add": lambda u, v: u + v, "sub": lambda u, v: u - v, "mul": lambda u, v: u * v,
              "div": lambda u, v: u / v}


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", list(BINARY_OPS))
@pytest.mark.parametrize("shapes", [((1003,), (1003,)), ((7, 301), (301,)), ((7, 301), (7, 1)),
                                    ((1, 301), (7, 1)), ((7, 1, 43), (7, 5, 1))])
def test_binary_ops_are_their_float32_kernels_rounded_once(name, shapes, dtype):
    """add, sub, mul and div in 16 bits (each element widened in a register and rounded once:
    Note [Native bfloat16 loops], float16's conversions Note [Vectorisable float16 conversions])
    are the float32 kernels on the same rounded inputs, rounded once: flat and broadcast, over
    vector lanes and tails, with zeros, infinities, NaN, subnormal results and results that
    overflow float16."""
    low = LOW[dtype]
    a = rand(*shapes[0], seed=11) * 300
    b = rand(*shapes[1], seed=12) * 300
    a.flat[:9] = [0.0, -0.0, np.inf, -np.inf, np.nan, 6e-5, 2.0, -3.0, 0.05]
    # Subnormal float16 inputs, products and quotients where the inputs line up (flat: every
    # position; broadcast: some), and a sum at float16's largest value.
    b.flat[:3] = [1e-3, -4e-4, 3e-6]
    b.flat[6:9] = [3e-6, 1e-5, 5000.0][:max(0, b.size - 6)]
    a.flat[9], b.flat[min(9, b.size - 1)] = 65504.0, 65504.0
    x, y = flow.tensor(a).to(low), flow.tensor(b).to(low)
    got = BINARY_OPS[name](x, y)
    want = BINARY_OPS[name](x.to(flow.float32), y.to(flow.float32))
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", ["eq", "gt", "lt"])
def test_comparisons_compare_the_values(name, dtype):
    """equal, greater and less in 16 bits (bfloat16 comparing its float32 values in its own loop)
    give the float32 comparisons of the same values, broadcast, NaN unequal to everything."""
    low = LOW[dtype]
    a = np.round(rand(6, 9, seed=2) * 2) / 2
    a[0, :3] = [np.nan, np.inf, -0.0]
    b = np.round(rand(9, seed=3) * 2) / 2
    b[:3] = [np.nan, np.inf, 0.0]
    x, y = flow.tensor(a).to(low), flow.tensor(b).to(low)
    fn = {"eq": lambda u, v: u == v, "gt": lambda u, v: u > v, "lt": lambda u, v: u < v}[name]
    got = fn(x, y)
    assert got.dtype == flow.bool
    np.testing.assert_array_equal(got.numpy(), fn(x.to(flow.float32), y.to(flow.float32)).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", ["max", "min", "topk", "topk_smallest", "sort", "sort_desc"])
def test_orders_are_the_float32_orders(name, dtype):
    """max/min over a dim, topk and sort in 16 bits (bfloat16 comparing its float32 values in
    its own loops) give the float32 kernels' values and indices: ties to the smaller index, NaN
    largest (Note [Orders and ties])."""
    low = LOW[dtype]
    a = np.round(rand(5, 40, seed=4) * 2) / 2  # many ties once rounded
    a[1, 3], a[2, 7], a[3, 0] = np.nan, np.inf, -np.inf
    x = flow.tensor(a).to(low)
    fn = {"max": lambda t: flow.max(t, 1), "min": lambda t: flow.min(t, 1),
          "topk": lambda t: flow.topk(t, 7), "topk_smallest": lambda t: flow.topk(t, 7,
                                                                               largest=False),
          "sort": lambda t: flow.sort(t, 1), "sort_desc": lambda t: flow.sort(t, 1,
                                                                           descending=True)}[name]
    got, want = fn(x), fn(x.to(flow.float32))
    assert got.values.dtype == low
    np.testing.assert_array_equal(got.values.to(flow.float32).numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


SCALAR_CASES = {
    "add": lambda x: x + 0.1, "mul": lambda x: x * 0.1, "pow2": lambda x: x ** 2,
    "pow3": lambda x: x ** 3, "sqrt": lambda x: x ** 0.5, "reciprocal": lambda x: x ** -1,
    "pow": lambda x: x ** 1.7, "rpow": lambda x: 2.5 ** x,
}


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("case", list(SCALAR_CASES))
def test_scalar_ops_are_their_float32_kernels_rounded_once(case, dtype):
    """Tensor-scalar ops in 16 bits (bfloat16 in its own loops with the scalar in float32, not
    rounded to bfloat16) are the float32 kernels on the same rounded inputs, rounded once."""
    low = LOW[dtype]
    x = flow.tensor(np.abs(rand(999, seed=8)) * 3).to(low)
    got = SCALAR_CASES[case](x)
    want = SCALAR_CASES[case](x.to(flow.float32))
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("shape,dims", [((37, 300), (1,)), ((5, 20000), (1,)), ((300, 70), (0,)),
                                        ((2, 1000, 600), (1,)),
                                        ((3, 40, 5), (1,)), ((4, 6, 5, 3), (0, 2)),
                                        ((6, 9), (0, 1)), ((0, 7), (0,)), ((7, 0), (1,))])
def test_reductions_are_their_float32_kernels_rounded_once(name, shape, dims, dtype):
    """sum, mean, max and min in 16 bits (bfloat16 reading its values as float32 where it loads
    them) are the float32 kernels on the same rounded inputs, rounded once: bit for bit, over
    rows (one longer than a summation block), columns, a middle axis, several axes and nothing;
    NaN wins max and min."""
    low = LOW[dtype]
    if name in ("amax", "amin") and 0 in shape:  # max and min of nothing are refused alike
        with pytest.raises(ValueError, match="cannot reduce an empty axis"):
            getattr(flow.tensor(np.zeros(shape, np.float32)).to(low), name)(dim=dims)
        return
    x = rand(*shape) * 3
    if x.size:
        x.flat[x.size // 2] = np.nan if name in ("amax", "amin") else x.flat[x.size // 2]
    rounded = flow.tensor(x).to(low)
    fn = getattr(flow, name)
    got = fn(rounded, dim=dims)
    want = fn(rounded.to(flow.float32), dim=dims)
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_cross_entropy_kernels_are_their_float32_kernels_rounded_once(label_dtype, dtype):
    """The loss and its gradient in 16 bits (bfloat16 on widened rows: Note [Native bfloat16
    rows]) are the float32 kernels on the same rounded inputs, rounded once: bit for bit, over
    rows longer than a vector's lanes and a vocabulary that is not a multiple of them."""
    low = LOW[dtype]
    rows, classes = 37, 1003
    logits = flow.tensor(rand(rows, classes) * 4).to(low)
    labels = flow.tensor(np.random.default_rng(5).integers(0, classes, rows).astype(label_dtype))
    dloss = flow.tensor(rand(rows, seed=4)).to(low)
    forward = flow._C.sparse_softmax_cross_entropy
    backward = flow._C.sparse_softmax_cross_entropy_grad
    for got, want in [(forward(logits, labels), forward(logits.to(flow.float32), labels)),
                      (backward(logits, labels, dloss),
                       backward(logits.to(flow.float32), labels, dloss.to(flow.float32)))]:
        assert got.dtype == low
        np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                      want.to(low).to(flow.float32).numpy())
    with pytest.raises(IndexError, match=r"every label must be in \[0, C\) with C = 1003"):
        forward(logits, flow.tensor(np.full(rows, classes, dtype=label_dtype)))


@pytest.mark.parametrize("dtype", list(LOW))
def test_losses_take_integer_labels_as_they_are(dtype):
    low = LOW[dtype]
    logits = flow.tensor(rand(6, 5)).to(low)
    labels = flow.tensor(np.array([0, 4, 2, 1, 3, 0], dtype=np.int64))
    loss = F.cross_entropy(logits, labels, reduction="none")  # one op: one rounding
    want = F.cross_entropy(logits.to(flow.float32), labels, reduction="none")
    np.testing.assert_array_equal(loss.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())



@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("inverse", [False, True])
def test_rotary_embedding_is_its_float32_kernel_rounded_once(inverse, interleaved, dtype):
    """rotary_embedding in 16 bits (bfloat16 rotating in float32 in its own loop) is the float32
    kernel on the same rounded inputs, rounded once, forward and inverse, both pairings."""
    low = LOW[dtype]
    x = flow.tensor(rand(2, 3, 5, 8) * 2).to(low)
    angles = np.outer(np.arange(5), 1.0 / 10000 ** (np.arange(4) / 4)).astype(np.float32)
    cos, sin = flow.tensor(np.cos(angles)).to(low), flow.tensor(np.sin(angles)).to(low)
    got = flow._C.rotary_embedding(x, cos, sin, -2, interleaved, inverse)
    want = flow._C.rotary_embedding(x.to(flow.float32), cos.to(flow.float32),
                                    sin.to(flow.float32), -2, interleaved, inverse)
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())


@pytest.mark.parametrize("dtype", list(LOW))
def test_embedding_gathers_and_its_gradient_sums_in_float32(dtype):
    low = LOW[dtype]
    weight = flow.tensor(rand(7, 3)).to(low).requires_grad_()
    indices = flow.tensor(np.array([0, 4, 2, 4, 4, 6, 0], dtype=np.int64))
    rows = F.embedding(indices, weight)
    assert rows.dtype == low
    np.testing.assert_array_equal(rows.to(flow.float32).numpy(),
                                  weight.to(flow.float32).detach().numpy()[indices.numpy()])
    dy = flow.tensor(rand(7, 3, seed=5)).to(low)
    (rows * dy).sum().backward()
    # Row 4 gathers three dy rows: summed in float32, rounded once.
    want = np.zeros((7, 3), np.float32)
    np.add.at(want, indices.numpy(), dy.to(flow.float32).numpy())
    np.testing.assert_array_equal(weight.grad.to(flow.float32).numpy(),
                                  flow.tensor(want).to(low).to(flow.float32).numpy())


SCATTER_ADDS = {  # name: (kernel on (dy, index), dy's shape, index, its dtype)
    # Repeated rows, a row no index names, a padding row, int32 and int64 indices.
    "embedding_grad": (lambda dy, i: flow._C.embedding_grad(dy, i, 11),
                       (3, 7, 300), [[4, 0, 4, 9, 4, 2, 0]] * 3, np.int64),
    "embedding_grad_padding": (lambda dy, i: flow._C.embedding_grad(dy, i, 11, 9),
                               (21, 300), [4, 0, 4, 9, 4, 2, 0] * 3, np.int32),
    # Over a middle dim (outer 3, inner 5), slices repeated.
    "index_select_grad": (lambda dy, i: flow._C.index_select_grad(dy, i, 1, [3, 6, 5]),
                          (3, 9, 5), [5, 0, 5, 5, 2, 0, 3, 5, 1], np.int64),
    # Along dim 1 and along dim 0, the index narrower than the input off dim.
    "gather_grad": (lambda dy, i: flow._C.gather_grad(dy, i, 1, [6, 40]),
                    (5, 30), [[(7 * r + c) % 13 for c in range(30)] for r in range(5)],
                    np.int64),
    "gather_grad_dim0": (lambda dy, i: flow._C.gather_grad(dy, i, 0, [4, 9]),
                         (7, 8), [[(r + c) % 4 for c in range(8)] for r in range(7)], np.int32),
}


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("name", list(SCATTER_ADDS))
def test_scatter_adds_sum_in_float32_rounded_once(name, dtype):
    """The embedding, index_select and gather gradients in 16 bits (Note [16-bit scatter-adds]:
    each touched row or line summed in float32 scratch) are the float32 kernels on the same
    rounded inputs, rounded once: bit for bit, with zeros, infinities and NaN among the terms."""
    fn, shape, index, index_dtype = SCATTER_ADDS[name]
    low = LOW[dtype]
    values = rand(*shape, seed=3) * 1000
    flat = values.reshape(-1)
    flat[[0, 5, 17]] = [0.0, np.inf, np.nan]
    flat[1] = -0.0
    dy = flow.tensor(values).to(low)
    index = flow.tensor(np.array(index, dtype=index_dtype))
    got = fn(dy, index)
    want = fn(dy.to(flow.float32), index)
    assert got.dtype == low
    np.testing.assert_array_equal(got.to(flow.float32).numpy(),
                                  want.to(low).to(flow.float32).numpy())
    assert np.isnan(got.to(flow.float32).numpy()).any()


def test_an_op_without_a_kernel_for_a_dtype_names_op_and_dtype():
    x = flow.tensor(np.ones((2, 2), dtype=np.int8))
    with pytest.raises(TypeError, match=r"\[matmul\] has no cpu kernel for dtype int8 \(kernels "
                                        r"exist for float32, float64, float16, bfloat16"):
        flow.matmul(x, x)
