"""flow.cuda: the CUDA devices this process sees (torch.cuda's and OneFlow's names).

The CUDA backend builds where nvcc is installed, but the runtime does not run CUDA placements
yet (issue 15): placements and tensors stay on cpu.
"""

from oneflowlike import _C

__all__ = ["is_available", "device_count", "why_unavailable", "check_device_supported"]


def is_available():
    """Whether a CUDA device can be used."""
    return _C.cuda_device_count() > 0


def device_count():
    """How many CUDA devices this process sees (0 without a driver or a GPU)."""
    return _C.cuda_device_count()


def why_unavailable():
    """Why no CUDA device can be used ('' when one can): the driver's words, or the build's."""
    return _C.cuda_why_no_device()


def check_device_supported(op, device):
    """Raises unless ``device`` ("cpu", "cuda:1", a flow.device, or None) can hold tensors in this
    build: a CUDA device without one says why; with one, that the runtime cannot run it yet."""
    if device is None:
        return
    kind = str(device).split(":")[0]
    if kind == "cpu":
        return
    if kind != "cuda":
        raise ValueError(f"[{op}] device must be 'cpu' or 'cuda[:index]'. However, got {device!r}.")
    if not is_available():
        raise RuntimeError(f"[{op}] device {device} needs a CUDA device. However, there is none: "
                           f"{why_unavailable()}.")
    raise NotImplementedError(f"[{op}] CUDA tensors are not run yet: the CUDA device, streams and "
                              "allocator exist, the kernels and the event-gated runtime do not "
                              "(issue 15).")
