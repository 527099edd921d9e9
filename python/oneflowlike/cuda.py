"""flow.cuda: the CUDA devices this process sees (torch.cuda's and OneFlow's names).

The CUDA backend builds where nvcc is installed. Eager tensors and modules can live on a GPU,
and graphs run on CUDA placements (docs/cuda.md says what has run on a GPU).
"""

from oneflowlike import _C

__all__ = ["is_available", "device_count", "why_unavailable", "check_device_supported",
           "synchronize", "is_simulated"]


def is_available():
    """Whether a CUDA device can be used."""
    return _C.cuda_device_count() > 0


def device_count():
    """How many CUDA devices this process sees (0 without a driver or a GPU)."""
    return _C.cuda_device_count()


def synchronize(device=None):
    """Waits until every stream of ``device`` (default cuda:0; an index, "cuda:i" or a
    flow.device) has finished the work queued on it, as torch.cuda.synchronize does."""
    index = 0
    if device is not None:
        index = device if isinstance(device, int) else _C.device(str(device)).index
    _C.cuda_synchronize(index)


def is_simulated():
    """Whether the CUDA devices are simulated in host memory, running the CPU kernels
    (OFL_SIMULATE_CUDA_DEVICES=N; Note [Simulated CUDA devices] in oneflowlike/device.h)."""
    return _C.cuda_simulated()


def why_unavailable():
    """Why no CUDA device can be used ('' when one can): the driver's words, or the build's."""
    return _C.cuda_why_no_device()


def check_device_supported(op, device):
    """Raises unless ``device`` ("cpu", "cuda:1", a flow.device, or None) can hold tensors in this
    build: a CUDA device without one says why, and so does a missing index."""
    if device is None:
        return
    kind = str(device).partition(":")[0]
    if kind == "cpu":
        return
    if kind != "cuda":
        raise ValueError(f"[{op}] device must be 'cpu' or 'cuda[:index]'. However, got {device!r}.")
    if not is_available():
        raise RuntimeError(f"[{op}] device {device} needs a CUDA device. However, there is none: "
                           f"{why_unavailable()}.")
    if _C.device(str(device)).index >= device_count():
        raise RuntimeError(f"[{op}] device {device} does not exist: this process sees "
                           f"{device_count()} CUDA device(s) (cuda:0 to cuda:{device_count() - 1}).")
