"""Whether this process has a real GPU, for the tests that need one.

Simulated CUDA devices (OFL_SIMULATE_CUDA_DEVICES, Note [Simulated CUDA devices]) run the CPU
kernels, so a test comparing the CUDA kernels with the CPU's would pass without checking
anything there: those tests ask for a real GPU.
"""

import pytest

import oneflowlike as flow


def has_real_gpu():
    return flow.cuda.is_available() and not flow.cuda.is_simulated()


def why_no_real_gpu():
    if flow.cuda.is_simulated():
        return "the CUDA devices are simulated (they run the CPU kernels)"
    return f"no CUDA device: {flow.cuda.why_unavailable()}"


NEEDS_GPU = pytest.mark.skipif(not has_real_gpu(), reason=why_no_real_gpu())
