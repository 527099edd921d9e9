"""parameters_to_vector and vector_to_parameters (torch.nn.utils'): the parameters as one flat
vector and back, in the order given."""

import oneflowlike as flow
from oneflowlike.autograd import no_grad


def parameters_to_vector(parameters):
    """One 1-d tensor of every element of ``parameters``, in order."""
    parameters = list(parameters)
    if not parameters:
        raise ValueError("[parameters_to_vector] got no parameters.")
    return flow.cat([p.reshape(-1) for p in parameters])


@no_grad()
def vector_to_parameters(vec, parameters):
    """Writes consecutive pieces of the 1-d ``vec`` into ``parameters``, in order."""
    parameters = list(parameters)
    total = sum(p.numel() for p in parameters)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(f"[vector_to_parameters] vec must be 1-d with the parameters' {total} "
                         f"elements. However, got shape {tuple(vec.shape)}.")
    offset = 0
    for p in parameters:
        n = p.numel()
        p.copy_(vec[offset:offset + n].reshape(tuple(p.shape)))
        offset += n
