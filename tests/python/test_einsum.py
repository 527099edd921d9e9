"""flow.einsum against NumPy's, its gradients, and its errors (issue 14)."""

import numpy as np
import pytest

import oneflowlike as flow
from gradcheck import check_gradients

_R = np.random.default_rng(0)
A = _R.standard_normal((2, 3, 4))
B = _R.standard_normal((2, 4, 5))
M = _R.standard_normal((3, 3))
V = _R.standard_normal(4)


@pytest.mark.parametrize("equation,arrays", [
    ("bij,bjk->bik", (A, B)),       # batched matrix product
    ("bij,bjk", (A, B)),            # implicit output: b and j summed
    ("ijk->kji", (A,)),             # permutation
    ("ijk->", (A,)),                # total
    ("ijk->j", (A,)),               # partial sum
    ("ij,ij->ij", (M, M)),          # elementwise
    ("ij,ji->", (M, M)),            # trace of a product
    ("i,j->ij", (V, V)),            # outer product
    ("...k,k->...", (A, V)),        # ellipsis, matrix-vector
    ("...ij,...ij->...", (A, A)),   # ellipsis, summed rows
    ("bij,bkl->bijkl", (A, B)),     # batch with free labels on both sides
    ("ab,bc,cd->ad", (M, M, M)),    # three operands
    ("bij , bjk -> bik", (A, B)),   # spaces
])
def test_einsum_matches_numpy(equation, arrays):
    got = flow.einsum(equation, *[flow.tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(got, np.einsum(equation.replace(" ", ""), *arrays), rtol=1e-10,
                               atol=1e-12)


def test_einsum_takes_a_list_and_broadcasts_size_one_axes():
    x, y = _R.standard_normal((1, 3)), _R.standard_normal((4, 3))
    got = flow.einsum("ij,ij->ij", [flow.tensor(x), flow.tensor(y)]).numpy()
    np.testing.assert_allclose(got, x * y)


def test_einsum_gradients():
    check_gradients(lambda a, b: flow.einsum("bij,bjk->bik", a, b), A, B)
    check_gradients(lambda a, v: flow.einsum("...k,k->...", a, v), A, V)
    check_gradients(lambda m: flow.einsum("ij->ji", m), M)


def test_einsum_errors_name_what_is_wrong():
    a = flow.tensor(A)
    with pytest.raises(ValueError, match=r"one term per operand \(1 operands, 2 terms\)"):
        flow.einsum("ij,jk->ik", a)
    with pytest.raises(ValueError, match=r"must label each of operand 0's 3 axes \(2, 3, 4\)"):
        flow.einsum("ij->i", a)
    with pytest.raises(ValueError, match="diagonals are not supported"):
        flow.einsum("ii->i", flow.tensor(M))
    with pytest.raises(ValueError, match=r"label 'j' has size 4 in one operand and 3"):
        flow.einsum("bij,bjk->bik", a, a)
    with pytest.raises(ValueError, match=r"output labels \['z'\] appear in no input"):
        flow.einsum("ijk->z", a)


def test_einsum_with_zero_size_axes():
    a, b = np.zeros((2, 0)), np.zeros((0, 3))
    np.testing.assert_array_equal(flow.einsum("ij,jk->ik", flow.tensor(a), flow.tensor(b)).numpy(),
                                  np.zeros((2, 3)))
    assert flow.einsum("ij->j", flow.tensor(a)).shape == (0,)
