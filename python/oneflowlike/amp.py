"""Mixed precision in eager mode: flow.autocast, as torch.autocast (Note [Eager autocast] in
oneflowlike/autocast.h), and flow.amp.GradScaler, as torch.amp.GradScaler. For nn.Graph use
graph.config.enable_amp (Note [Mixed precision] in compiler/passes/amp.cpp)."""

import functools

from oneflowlike import _C

__all__ = ["autocast", "GradScaler"]


class autocast:  # noqa: N801 (torch's name)
    """Within the block, ops run by torch.autocast's policy on this thread (Note [Mixed
    precision policy] in oneflowlike/op.h): matmul-class ops and attention (matmul, linear,
    bmm, scaled_dot_product_attention) cast their float32 inputs to ``dtype`` and return
    ``dtype``; data movement and cheap elementwise ops (reshape, transpose, add, gelu, ...) run
    in their inputs' dtype, float32 when it meets ``dtype``; softmax, norms, losses and
    reductions cast up to float32. Parameters and their gradients stay float32.

    ``device_type``: "cpu" or "cuda" (the same policy for both). ``dtype``: flow.bfloat16 (the
    default) or flow.float16, which, as in PyTorch, wants a flow.amp.GradScaler around the
    backward and the step (float16's range loses small gradients otherwise). One difference
    from torch: ``F.linear`` with a bias adds the float32 bias after the low-precision product,
    so it returns float32 (torch rounds the bias and returns ``dtype``). Usable as a decorator.
    ``cache_enabled`` (default True, as torch's): a weight (a float32 leaf that requires grad)
    is cast once per region rather than once per use, but only while gradients are off
    (no_grad, generation; Note [Autocast weight cache] in oneflowlike/autocast.h): a write into
    it casts again, and the cache empties when the outermost region ends.
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type not in ("cpu", "cuda"):
            raise ValueError("[autocast] device_type must be 'cpu' or 'cuda'. However, got "
                             f"{device_type!r}.")
        if dtype is None:
            dtype = _C.dtype.bfloat16
        # A disabled scope takes any dtype, as torch's: `autocast(dtype=d, enabled=d != float32)`.
        if enabled and (not isinstance(dtype, _C.dtype)
                        or dtype not in (_C.dtype.bfloat16, _C.dtype.float16)):
            raise TypeError("[autocast] dtype must be flow.bfloat16 (or flow.float16). However, "
                            f"got {dtype!r}.")
        self.dtype = dtype if enabled else _C.dtype.float32
        # torch's weight-cast cache (Note [Autocast weight cache] in oneflowlike/autocast.h):
        # each float32 weight is cast once per region while gradients are off.
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        self._previous = []

    def __enter__(self):
        self._previous.append((_C.autocast_dtype(), _C.autocast_cache_enabled()))
        _C.set_autocast_cache_enabled(self.cache_enabled)
        _C.set_autocast_dtype(self.dtype)
        return self

    def __exit__(self, *exc):
        dtype, cache_enabled = self._previous.pop()
        _C.set_autocast_dtype(dtype)
        _C.set_autocast_cache_enabled(cache_enabled)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped


def _global_tensor_type():
    from oneflowlike.framework.global_tensor import GlobalTensor  # noqa: PLC0415

    return GlobalTensor


def _count_nonfinite(grads):
    """The inf and nan elements of ``grads``: local ones counted here, global ones where they
    live, one multi-tensor count per (placement, layout, dtype), summed onto every rank of the
    job (the same on each: every rank runs the same program, in the same order)."""
    import oneflowlike as flow  # noqa: PLC0415
    from oneflowlike.framework import global_tensor  # noqa: PLC0415

    found, total = 0.0, None
    for group in global_tensor.multi_tensor_groups(grads):
        count = global_tensor.multi_tensor_call(_C.multi_tensor_count_nonfinite, group,
                                                name="GradScaler.unscale_")
        if not isinstance(count, global_tensor.GlobalTensor):
            found += float(count.numpy())
            continue
        count = count.to_global(placement=flow.placement.all(count.placement.type),
                                sbp=flow.sbp.broadcast)
        total = count if total is None else total + count
    if total is not None:
        found += float(total.numpy())
    return found


class GradScaler:
    """Dynamic loss scaling for float16 training in eager mode, as torch.amp.GradScaler:

        scaler = flow.amp.GradScaler()
        with flow.autocast("cpu", dtype=flow.float16):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)     # unscales; skips the step if a gradient is inf or nan
        scaler.update()            # halves the scale after a skip, doubles it after
                                   # growth_interval good steps

    The scale and its growth count are in state_dict() for checkpoints. On global tensors the
    check counts every gradient's inf and nan where it lives (one multi-tensor count per
    placement and layout) and sums the counts onto every rank, so every rank skips or steps
    alike, whichever rank holds the overflowing piece (a pipeline stage's gradients are on its
    ranks only). nn.Graph takes one through graph.set_grad_scaler (Note [Dynamic loss scaling in
    a graph]).
    """

    def __init__(self, device="cpu", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        del device  # the same on every device here
        if not (growth_factor > 1.0 and 0.0 < backoff_factor < 1.0 and init_scale > 0):
            raise ValueError("[GradScaler] needs init_scale > 0, growth_factor > 1 and "
                             "0 < backoff_factor < 1. However, got "
                             f"init_scale={init_scale}, growth_factor={growth_factor}, "
                             f"backoff_factor={backoff_factor}.")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 1:
            raise ValueError("[GradScaler] growth_interval must be an int >= 1. However, got "
                             f"{growth_interval!r}.")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_inf = {}  # id(optimizer) -> whether its gradients had an inf or nan
        self._stepped = set()  # id(optimizer) of those stepped since the last update()
        self._scaled = False  # scale() was called since the last update()

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        """``outputs`` (a tensor, or a list or tuple of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, (_C.Tensor, _global_tensor_type())):
            raise TypeError("[GradScaler] scale() takes a tensor or a list of tensors. However, "
                            f"got {type(outputs).__name__}.")
        self._scaled = True
        return outputs * self._scale

    def unscale_(self, optimizer):
        """Divides the gradients of ``optimizer``'s parameters by the scale, once per step, and
        notes whether any is inf or nan."""
        if not self._enabled:
            return
        if id(optimizer) in self._found_inf:
            raise RuntimeError("[GradScaler] unscale_() was already called on this optimizer "
                               "since the last update().")
        if not self._scaled:
            # The gradients came from an unscaled loss: dividing them by the scale would make
            # the update that many times too small, silently.
            raise RuntimeError(f"[GradScaler] unscale_() or step() without scale() since the "
                               f"last update(): the gradients were not scaled, so dividing them "
                               f"by the scale ({self._scale:g}) would shrink the update as much. "
                               f"Call scaler.scale(loss).backward() before scaler.step().")
        inverse = 1.0 / self._scale
        grads = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.grad = p.grad * inverse
                grads.append(p.grad)
        self._found_inf[id(optimizer)] = _count_nonfinite(grads) > 0

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(), unless a gradient was inf or nan: then the parameters and the
        optimizer's state are left as they are. Returns what step() returned, or None."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) in self._stepped:
            raise RuntimeError("[GradScaler] step() was already called on this optimizer since "
                               "the last update().")
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        if self._found_inf[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """Backs the scale off after a step with an inf or nan gradient, grows it after
        growth_interval steps without; ``new_scale`` sets it instead."""
        if not self._enabled:
            return
        if new_scale is None and not self._found_inf:
            raise RuntimeError("[GradScaler] update() needs a step() or unscale_() since the "
                               "last update(): no gradients were checked for inf or nan.")
        if new_scale is not None:
            if not (isinstance(new_scale, (int, float)) and 0 < float(new_scale) < float("inf")):
                raise ValueError(f"[GradScaler] update(new_scale) needs a positive finite scale. "
                                 f"However, got {new_scale!r}.")
            self._scale = float(new_scale)
        elif any(self._found_inf.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._found_inf = {}
        self._stepped = set()
        self._scaled = False

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state):
        if not self._enabled:
            return
        if "scale" not in state:
            raise ValueError("[GradScaler] the state has no 'scale': it is not a GradScaler's "
                             f"state_dict. However, got keys {sorted(state)}.")
        self._scale = float(state["scale"])
        self._growth_factor = float(state.get("growth_factor", self._growth_factor))
        self._backoff_factor = float(state.get("backoff_factor", self._backoff_factor))
        self._growth_interval = int(state.get("growth_interval", self._growth_interval))
        self._growth_tracker = int(state.get("_growth_tracker", 0))
