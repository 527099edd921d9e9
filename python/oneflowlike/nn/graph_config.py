"""GraphConfig: what an nn.Graph's compiler is told besides the model (graph.config); the
graph reads it when its first call compiles."""

import os

from oneflowlike.framework.sizes import parse_limit

__all__ = ["GraphConfig"]


class GraphConfig:
    """What the compiler is told besides the model (OneFlow's graph.config)."""

    def __init__(self):
        self.gradient_accumulation_steps = 1
        self.zero_stage = 0
        self.trace = False
        self.gradient_bucket_bytes = 4 << 20
        self.amp_dtype = None
        self.reduce_dtype = None
        # Note [Memory limit]: the launcher's --memory-per-rank reaches every rank as this.
        self.memory_limit = parse_limit(os.environ.get("OFL_MEMORY_PER_RANK"),
                                        "OFL_MEMORY_PER_RANK")
        self._compiled = False  # set by the graph's first call, which reads all of the above

    def _open(self, what):
        """Refuses a change after the first call compiled the graph: it would be ignored."""
        if self._compiled:
            raise RuntimeError(f"[nn.Graph] config.{what} must come before the first call: the "
                               "graph compiled with the config it had then, so the change would "
                               "be ignored. Build a new graph for another config.")

    def set_memory_limit(self, limit):
        """Note [Memory limit]: the bytes every rank may plan at most (an int or "6GiB");
        compilation fails on every rank, before anything is allocated, when one does not fit,
        naming the rank, its peak, its largest items and the changes that would fit, each with
        the peak a recompilation gives. None or 0: no limit."""
        limit = parse_limit(limit, "[nn.Graph] set_memory_limit")
        self._open("set_memory_limit")
        self.memory_limit = limit

    def set_gradient_bucket_bytes(self, n):
        """Reduces the gradients of replicated parameters in buckets of about ``n`` bytes
        (default 4 MiB; 0: each on its own), as DDP's bucket_cap_mb."""
        self._open("set_gradient_bucket_bytes")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"[nn.Graph] the gradient bucket size must be an int >= 0. However, got {n!r}.")
        self.gradient_bucket_bytes = n

    def enable_trace(self, mode=True):
        """Records every act of the runtime: graph.chrome_trace() returns them as Chrome trace
        JSON (chrome://tracing, Perfetto)."""
        self._open("enable_trace")
        self.trace = bool(mode)

    def set_gradient_accumulation_steps(self, n):
        self._open("set_gradient_accumulation_steps")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(
                f"[nn.Graph] gradient accumulation steps must be an int >= 1. However, got {n!r}."
            )
        self.gradient_accumulation_steps = n

    def enable_amp(self, mode=True, *, dtype=None, reduce_dtype=None):
        """Mixed precision, as OneFlow's graph.config.enable_amp, with flow.autocast's policy:
        matmul-class ops and attention run in ``dtype`` (flow.bfloat16), data movement and
        cheap elementwise ops follow their inputs, softmax, norms, losses and reductions run in
        float32, and parameters, gradients and optimizer state stay float32 (Note [Mixed
        precision] in compiler/passes/amp.cpp).
        flow.float16 needs graph.set_grad_scaler(flow.amp.GradScaler()) too (dynamic loss
        scaling; without it small gradients silently become 0). ``reduce_dtype``: what replicated gradients are
        reduced in between data-parallel ranks, flow.float32 (the default) or flow.bfloat16
        (half the bytes; Note [Gradient reduction dtype] in compiler/passes/optimizer.cpp)."""
        from oneflowlike import _C

        self._open("enable_amp")
        if dtype is None:
            dtype = _C.dtype.bfloat16
        if not isinstance(dtype, _C.dtype) or dtype not in (_C.dtype.bfloat16, _C.dtype.float16):
            raise TypeError("[nn.Graph] enable_amp takes dtype=flow.bfloat16 or flow.float16. "
                            f"However, got {dtype!r}.")
        if reduce_dtype is not None and reduce_dtype not in (_C.dtype.float32, _C.dtype.bfloat16):
            raise TypeError("[nn.Graph] enable_amp takes reduce_dtype=flow.float32 or "
                            f"flow.bfloat16. However, got {reduce_dtype!r}.")
        self.amp_dtype = dtype if mode else None
        self.reduce_dtype = reduce_dtype if mode else None

    def enable_zero(self, mode=True, *, stage=1):
        """Shards optimizer state (stage 1), also gradients (2: reduce-scattered) and also
        parameters (3: gathered before use, again for backward) over the ranks that replicate
        them (Note [ZeRO stages 1 and 2] in compiler/passes/zero.cpp)."""
        self._open("enable_zero")
        if stage not in (1, 2, 3):
            raise ValueError(f"[nn.Graph] ZeRO stage must be 1, 2 or 3. However, got {stage!r}.")
        self.zero_stage = stage if mode else 0
