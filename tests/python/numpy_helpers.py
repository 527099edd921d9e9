"""NumPy helpers shared by the flow.nn tests (test_nn_layers.py, test_nn_training.py)."""

import numpy as np

import oneflowlike as flow


def _grad_of(output, weights):
    """Backpropagates sum(output * weights) (weights a numpy array)."""
    output.backward(flow.tensor(weights, dtype=output.dtype))


def _np(t):
    return t.numpy().astype(np.float64)


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
