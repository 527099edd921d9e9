"""Finite-difference gradient checks for the Python tests."""

import numpy as np

import oneflowlike as flow


def check_gradients(fn, *arrays, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """Compares autograd with central differences for fn(*tensors) -> tensor or tuple.

    ``arrays`` are numpy float64 arrays (integer arrays are passed through without grad). The
    outputs are reduced with fixed random weights to a scalar; its gradient with respect to
    every float input must match the numerical one.
    """
    rng = np.random.default_rng(seed)
    leaves = []
    for a in arrays:
        t = flow.tensor(a)
        if a.dtype.kind == "f":
            t.requires_grad = True
        leaves.append(t)
    outs = fn(*leaves)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    weights = [rng.uniform(0.5, 1.5, size=o.shape) for o in outs]
    roots = [o for o in outs if o.requires_grad]
    grads = [flow.tensor(w) for w, o in zip(weights, outs) if o.requires_grad]
    assert roots, "no output requires grad"
    flow.autograd.backward(roots, grads)

    def loss(values):
        with flow.no_grad():
            res = fn(*[flow.tensor(v) for v in values])
        res = res if isinstance(res, (tuple, list)) else (res,)
        return sum(float((r.numpy().astype(np.float64) * w).sum()) for r, w in zip(res, weights))

    for k, a in enumerate(arrays):
        if a.dtype.kind != "f":
            continue
        assert leaves[k].grad is not None, f"input {k} got no gradient"
        analytic = leaves[k].grad.numpy()
        numeric = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [v.copy() for v in arrays]
            minus = [v.copy() for v in arrays]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            numeric[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k}")
