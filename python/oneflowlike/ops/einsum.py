"""einsum: Einstein summation over labelled axes (torch.einsum's equations, "..." included).

Composed of transpose, reshape, expand, reduce_sum and batch_matmul: operands are contracted
left to right, each pair as one batched matrix product (batch labels, then the free labels of
each side, the shared summed labels as the inner dimension), so shapes, SBP signatures and
gradients are those ops'. Labels that repeat within one operand (diagonals, "ii->i") are not
supported.
"""

import string

from oneflowlike import _C

__all__ = ["einsum"]

_LETTERS = set(string.ascii_letters)


def _error(equation, what):
    return ValueError(f"[einsum] {what} However, got equation {equation!r}.")


def _terms(equation, operands):
    """(input label strings, output label string) with '...' replaced by private labels."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise _error(equation, f"the equation must name one term per operand ({len(operands)} "
                               f"operands, {len(inputs)} terms).")
    ellipsis_dims = 0
    expanded = []
    for k, (term, t) in enumerate(zip(inputs, operands)):
        named = term.replace("...", "")
        if set(named) - _LETTERS or term.count("...") > 1:
            raise _error(equation, f"term {k} ({term!r}) must be letters with at most one '...'.")
        dims = t.ndim - len(named) if "..." in term else 0
        if dims < 0 or ("..." not in term and len(named) != t.ndim):
            raise _error(equation, f"term {k} ({term!r}) must label each of operand {k}'s "
                                   f"{t.ndim} axes {tuple(t.shape)}.")
        ellipsis_dims = max(ellipsis_dims, dims)
        expanded.append((term, dims))
    # Ellipsis axes align from the right (broadcasting): private labels, never letters.
    private = [chr(0x100 + i) for i in range(ellipsis_dims)]
    terms = [term.replace("...", "".join(private[ellipsis_dims - dims:]))
             for term, dims in expanded]
    for k, term in enumerate(terms):
        if len(set(term)) != len(term):
            raise _error(equation, f"term {k} repeats a label: diagonals are not supported.")
    if arrow:
        if set(rhs.replace("...", "")) - _LETTERS or rhs.count("...") > 1:
            raise _error(equation, "the output must be letters with at most one '...'.")
        out = rhs.replace("...", "".join(private))
        if len(set(out)) != len(out):
            raise _error(equation, "the output repeats a label.")
        missing = set(out) - set("".join(terms))
        if missing:
            raise _error(equation, f"output labels {sorted(missing)} appear in no input.")
    else:  # implicit: the ellipsis axes, then the labels used once, in alphabetical order
        counts = {}
        for term in terms:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        out = "".join(private) + "".join(sorted(l for l, c in counts.items()
                                                if c == 1 and l in _LETTERS))
    return terms, out


def _permute(t, labels, order):
    perm = [labels.index(label) for label in order]
    if perm != list(range(len(perm))):
        t = _C.transpose(t, perm)
    return t, order


def _sum_out(t, labels, keep):
    axes = [i for i, label in enumerate(labels) if label not in keep]
    if not axes:
        return t, labels
    return _C.reduce_sum(t, axes, False), "".join(l for l in labels if l in keep)


def _product(values):
    n = 1
    for v in values:
        n *= v
    return n


def _contract(a, a_labels, b, b_labels, keep, sizes):
    """The pair's product, summed over their shared labels that ``keep`` lacks."""
    batch = [l for l in a_labels if l in b_labels and l in keep]
    inner = [l for l in a_labels if l in b_labels and l not in keep]
    left = [l for l in a_labels if l not in b_labels]
    right = [l for l in b_labels if l not in a_labels]
    a, _ = _permute(a, a_labels, "".join(batch + left + inner))
    b, _ = _permute(b, b_labels, "".join(batch + inner + right))
    n_batch = _product(sizes[l] for l in batch)
    n_left, n_inner, n_right = (_product(sizes[l] for l in group)
                                for group in (left, inner, right))
    a = _C.reshape(a, (n_batch, n_left, n_inner))
    b = _C.reshape(b, (n_batch, n_inner, n_right))
    out = _C.batch_matmul(a, b)  # (batch, left, right)
    shape = tuple(sizes[l] for l in batch + left + right)
    return _C.reshape(out, shape), "".join(batch + left + right)


def einsum(equation, *operands):
    """torch.einsum: einsum("bij,bjk->bik", a, b), einsum("ij->ji", x), einsum("...d,d", x, w);
    operands may also come as one list. Size-1 axes broadcast against their label's size."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("[einsum] needs at least one operand. However, got none.")
    if not isinstance(equation, str):
        raise TypeError(f"[einsum] the equation must be a string. However, got {equation!r}.")
    terms, out = _terms(equation, operands)
    sizes = {}  # a label's size: 1 broadcasts against any other
    for k, (term, t) in enumerate(zip(terms, operands)):
        for label, n in zip(term, t.shape):
            known = sizes.get(label, 1)
            if known != n and 1 not in (known, n):
                shown = "..." if label not in _LETTERS else label
                raise _error(equation, f"label {shown!r} has size {known} in one operand "
                                       f"and {n} in operand {k} {tuple(t.shape)}.")
            sizes[label] = n if known == 1 else known
    # Size-1 axes of a label whose size is larger elsewhere broadcast.
    tensors = []
    for term, t in zip(terms, operands):
        full = tuple(sizes[label] for label in term)
        tensors.append(_C.expand(t, full) if tuple(t.shape) != full else t)
    current, labels = tensors[0], terms[0]
    for k in range(1, len(tensors)):
        rest = "".join(terms[k + 1:]) + out  # the labels needed after this pair
        current, labels = _sum_out(current, labels, rest + terms[k])
        other, other_labels = _sum_out(tensors[k], terms[k], rest + labels)
        current, labels = _contract(current, labels, other, other_labels, rest, sizes)
    current, labels = _sum_out(current, labels, out)
    return _permute(current, labels, out)[0]


TENSOR_METHODS = {}
