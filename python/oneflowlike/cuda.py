"""flow.cuda: the CUDA devices this process sees (torch.cuda's and OneFlow's names).

The CUDA backend builds where nvcc is installed. Eager tensors and modules can live on a GPU,
and graphs run on CUDA placements (docs/cuda.md says what has run on a GPU).
"""

from oneflowlike import _C

__all__ = ["is_available", "device_count", "why_unavailable", "check_device_supported",
           "synchronize", "is_simulated", "current_device", "set_device", "memory_allocated",
           "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats", "empty_cache",
           "get_device_name", "get_device_properties", "get_device_capability",
           "is_bf16_supported", "manual_seed", "manual_seed_all"]


def is_available():
    """Whether a CUDA device can be used."""
    return _C.cuda_device_count() > 0


def device_count():
    """How many CUDA devices this process sees (0 without a driver or a GPU)."""
    return _C.cuda_device_count()


def _index(device):
    """The index of ``device`` (None: the current device; an int, "cuda:i" or a flow.device)."""
    if device is None:
        return _C.cuda_current_device()
    if isinstance(device, int):
        return device
    if not str(device).startswith("cuda"):
        raise ValueError(f"[cuda] expected a CUDA device. However, got {device!r}.")
    return _C.device(str(device)).index


def synchronize(device=None):
    """Waits until every stream of ``device`` (default: the current device; an index, "cuda:i"
    or a flow.device) has finished the work queued on it, as torch.cuda.synchronize does."""
    _C.cuda_synchronize(_index(device))


def current_device():
    """The index of the device "cuda" names (0 until set_device), as torch's."""
    return _C.cuda_current_device()


def set_device(device):
    """Makes "cuda" name ``device`` (an index, "cuda:i" or a flow.device) in this process: what a
    process of a multi-GPU job calls first, set_device(LOCAL_RANK), as in torch."""
    _C.cuda_set_device(_index(device))


def memory_allocated(device=None):
    """Bytes of tensors live on ``device`` (its caching allocator's count)."""
    return _C.cuda_memory_stats(_index(device))[0]


def max_memory_allocated(device=None):
    """The most bytes live on ``device`` since the start or reset_peak_memory_stats()."""
    return _C.cuda_memory_stats(_index(device))[1]


def memory_reserved(device=None):
    """Bytes the allocator holds on ``device``: live plus cached for reuse."""
    return _C.cuda_memory_stats(_index(device))[2]


def reset_peak_memory_stats(device=None):
    _C.cuda_reset_peak(_index(device))


def empty_cache():
    """Returns the cached blocks of every device to CUDA (live tensors keep theirs)."""
    _C.cuda_empty_cache()


class _DeviceProperties:
    def __init__(self, d):
        self.name = d["name"]
        self.major, self.minor = d["major"], d["minor"]
        self.total_memory = d["total_memory"]
        self.multi_processor_count = d["multi_processor_count"]

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None):
    return _DeviceProperties(_C.cuda_properties(_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    p = get_device_properties(device)
    return p.major, p.minor


def is_bf16_supported():
    """Whether the current device computes in bfloat16 (compute capability 8.0 and up)."""
    return is_available() and get_device_capability()[0] >= 8


def manual_seed(seed):
    """The seed of every device: random values are counter-based and the same on the CPU and
    on GPUs (Note [Random values on every device]), so this is flow.manual_seed, and it seeds
    the CPU's draws too (torch keeps a generator per device: a script seeding its GPUs apart
    from its CPU seeds both here)."""
    import oneflowlike as flow  # noqa: PLC0415

    flow.manual_seed(seed)


manual_seed_all = manual_seed


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
