"""flow.nn.Graph: trace a model's training step once, compile it into a plan over every rank
of its placements, and run it on the actor runtime.

    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model                       # modules used in build()
            self.add_optimizer(optimizer, lr_sch=scheduler)
            self.config.set_gradient_accumulation_steps(4)

        def build(self, x, y):
            loss = self.model(x, y)
            loss.backward()                          # marks the loss: the plan trains on it
            return loss

    graph = TrainGraph()
    loss = graph(x, y)                               # first call traces and compiles

The first call runs ``build`` on lazy tensors (Note [Lazy tensors] in oneflowlike/lazy.h): each
op the modules apply joins a logical graph; the compiler adds the backward, the optimizer and
every collective the placements and SBP need. Later calls only feed inputs and fetch outputs.
Parameters are the graph's variables: ``graph.state_dict()`` reads their trained values, and
``graph.sync_to_modules()`` copies them back into the modules.
"""

import copy
import inspect
import os
import sys
import time

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike.framework.sizes import format_bytes, parse_limit
from oneflowlike import sbp as _sbp
from oneflowlike.framework import agreement as _agreement
from oneflowlike.framework import global_tensor as _gt
from oneflowlike.framework import job as _job
from oneflowlike.ops.core import on_host
from oneflowlike.placement import placement as _placement

__all__ = ["Graph", "GraphConfig"]

# Note [Training state in a graph's state dict]
# Resuming must give exactly the uninterrupted curve, so graph.state_dict() holds, besides the
# variables, what the optimizer and LR scheduler carry in Python: the step count (Adam's bias
# correction and SGD's first step read it), the param groups' hyper-parameters (the lr a
# schedule reached) and the scheduler's state. They are JSON values, which flow.save keeps in
# the manifest.
OPTIMIZER_STATE = "_graph.optimizer"  # {"step": int, "param_groups": [hyper-parameters]}
LR_SCHEDULER_STATE = "_graph.lr_scheduler"  # the scheduler's state_dict()
# set_grad_scaler: {"scale", "good_steps", "steps"}, the graph's variables of Note [Dynamic loss
# scaling in a graph], which every rank holds.
GRAD_SCALER_STATE = "_graph.grad_scaler"
_SCALER_VARIABLES = {"scale": "_loss_scale", "good_steps": "_loss_scale.good_steps",
                     "steps": "_loss_scale.steps"}

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_location():
    """'file:line' of the innermost frame outside this package: the user's line in build()."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


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

    def set_memory_limit(self, limit):
        """Note [Memory limit]: the bytes every rank may plan at most (an int or "6GiB");
        compilation fails on every rank, before anything is allocated, when one does not fit,
        naming the rank, its peak, its largest items and the changes that would fit, each with
        the peak a recompilation gives. None or 0: no limit."""
        self.memory_limit = parse_limit(limit, "[nn.Graph] set_memory_limit")

    def set_gradient_bucket_bytes(self, n):
        """Reduces the gradients of replicated parameters in buckets of about ``n`` bytes
        (default 4 MiB; 0: each on its own), as DDP's bucket_cap_mb."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"[nn.Graph] the gradient bucket size must be an int >= 0. However, got {n!r}.")
        self.gradient_bucket_bytes = n

    def enable_trace(self, mode=True):
        """Records every act of the runtime: graph.chrome_trace() returns them as Chrome trace
        JSON (chrome://tracing, Perfetto)."""
        self.trace = bool(mode)

    def set_gradient_accumulation_steps(self, n):
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
        if stage not in (1, 2, 3):
            raise ValueError(f"[nn.Graph] ZeRO stage must be 1, 2 or 3. However, got {stage!r}.")
        self.zero_stage = stage if mode else 0


def _default_input_sbp(placement):
    # A pipeline stage's input: split over the first (data-parallel) dimension, whole over the
    # others.
    return (_sbp.split(0),) + (_sbp.broadcast,) * (len(placement.hierarchy) - 1)


def _optimizer_setup(optimizer):
    """(kind, hyper): the compiled optimizer. Groups may differ in lr (fed each step) and
    weight_decay (compiled per group: hyper["group_weight_decay"], Note [Parameter groups] in
    compiler/passes/optimizer.cpp); the rest is one for all groups."""
    from oneflowlike import optim

    groups = optimizer.param_groups
    first = groups[0]
    for g, group in enumerate(groups[1:], start=1):
        for key in ("momentum", "dampening", "nesterov", "betas", "eps", "clip_grad_max_norm"):
            if group.get(key) != first.get(key):
                raise NotImplementedError(
                    f"[nn.Graph] param_groups[{g}] has {key}={group.get(key)!r} and "
                    f"param_groups[0] {key}={first.get(key)!r}: in a graph, parameter groups may "
                    "differ in lr and weight_decay only (clipping is over all gradients).")
    hyper = {"lr": float(first["lr"]), "weight_decay": float(first.get("weight_decay", 0.0))}
    if len(groups) > 1:
        hyper["group_weight_decay"] = tuple(float(g.get("weight_decay", 0.0)) for g in groups)
    if "clip_grad_max_norm" in first:
        hyper["clip_grad_max_norm"] = float(first["clip_grad_max_norm"])
    if isinstance(optimizer, optim.AdamW):
        kind = "adamw"
    elif isinstance(optimizer, optim.Adam):
        kind = "adam"
    elif isinstance(optimizer, optim.SGD):
        kind = "sgd"
        hyper["momentum"] = float(first.get("momentum", 0.0))
        hyper["dampening"] = float(first.get("dampening", 0.0))
        hyper["nesterov"] = float(bool(first.get("nesterov", False)))
    else:
        raise NotImplementedError(
            f"[nn.Graph] {type(optimizer).__name__} is not supported in a graph: use SGD, Adam "
            "or AdamW."
        )
    if kind in ("adam", "adamw"):
        hyper["beta1"], hyper["beta2"] = (float(b) for b in first["betas"])
        hyper["eps"] = float(first["eps"])
    return kind, hyper


class MemoryReport(list):
    """graph.memory_report(): one dict per rank (Note [Memory report]); str() is one line per
    rank."""

    def __init__(self, ranks, text):
        super().__init__(ranks)
        self.text = text

    def __str__(self):
        return self.text


class Graph:
    """Base class of compiled training and inference steps (OneFlow's nn.Graph)."""

    def __init__(self):
        object.__setattr__(self, "_modules", {})
        self.config = GraphConfig()
        self._optimizers = []
        self._lr_schedulers = []
        self._grad_scaler = None  # set_grad_scaler
        self._pending_scaler_state = None  # a loaded scaler state, written once compiled
        self._stages = []  # (module, stage, placement, input sbp)
        self._recomputed = []  # modules whose activations are recomputed
        self._compiled = False
        self._local_device = "cpu:0"  # Note [Local graphs on a GPU]
        self._plan = None
        self._runtime = None
        self._step = 0
        self._debug = 0
        self._pending_state = None
        self._runtime = None
        # trace_seconds, compile_seconds (this rank's part of the plan), first_call_setup_seconds
        # (trace + compile + load + initial values), first_step_seconds (the whole first call).
        self.timings = {}
        self._local_variables = set()
        self._variable_sbp = {}

    def __setattr__(self, name, value):
        from oneflowlike.nn.modules.module import Module

        if isinstance(value, Module):
            self.__dict__["_modules"][name] = value
        object.__setattr__(self, name, value)

    def build(self, *args):
        raise NotImplementedError("[nn.Graph] subclasses define build(*inputs).")

    def set_grad_scaler(self, scaler):
        """Dynamic loss scaling in the compiled step, as OneFlow's graph.set_grad_scaler: the
        loss is multiplied by the scale, the gradients divided by it, and a step whose gradients
        hold an inf or nan on any rank is skipped on every rank while the scale backs off
        (Note [Dynamic loss scaling in a graph] in compiler/passes/autograd.cpp). ``scaler``: a
        flow.amp.GradScaler, whose settings are taken; the scale then lives in the graph
        (graph.loss_scale). Needed by enable_amp(dtype=flow.float16)."""
        from oneflowlike.amp import GradScaler

        if not isinstance(scaler, GradScaler):
            raise TypeError("[nn.Graph] set_grad_scaler takes a flow.amp.GradScaler. However, "
                            f"got {type(scaler).__name__}.")
        if self._compiled:
            raise RuntimeError("[nn.Graph] set_grad_scaler must come before the first call: "
                               "the scaling is compiled into the step.")
        self._grad_scaler = scaler if scaler.is_enabled() else None

    @property
    def loss_scale(self):
        """The current loss scale under set_grad_scaler (read from the graph on the rank that
        holds it; None elsewhere, before the first call, or without a scaler)."""
        if self._grad_scaler is None or self._runtime is None:
            return None
        try:
            piece = self._runtime.read_variable_pieces("_loss_scale").get(env.get_rank())
        except LookupError:  # this rank's part of the plan does not hold it
            return None
        return None if piece is None else float(piece.numpy())

    def add_optimizer(self, optimizer, *, lr_sch=None):
        if self._compiled:
            raise RuntimeError("[nn.Graph] add_optimizer must come before the first call.")
        if self._optimizers:
            raise NotImplementedError("[nn.Graph] one optimizer per graph is supported.")
        self._optimizers.append(optimizer)
        if lr_sch is not None:
            self._lr_schedulers.append(lr_sch)

    def set_stage(self, module, stage_id, placement, input_sbp=None):
        """Runs ``module`` as pipeline stage ``stage_id`` on ``placement``: its parameters move
        there and its tensor inputs are moved there with ``input_sbp`` (default: split(0) over
        the first placement dimension, broadcast over the others)."""
        if not isinstance(placement, _placement):
            raise TypeError(f"[nn.Graph] set_stage needs a flow.placement. However, got {placement!r}.")
        sbp = _default_input_sbp(placement) if input_sbp is None else _sbp.normalize(
            input_sbp, placement, "set_stage")
        self._stages.append((module, int(stage_id), placement, sbp))
        module.to_global(placement, (_sbp.broadcast,) * len(placement.hierarchy), keep_split=True)

    def set_activation_checkpointing(self, module, enabled=True):
        """Recomputes ``module``'s forward activations for the backward instead of keeping them
        (less memory, more compute). OneFlow's module config.activation_checkpointing."""
        if self._compiled:
            raise RuntimeError("[nn.Graph] set_activation_checkpointing must come before the first call.")
        self._recomputed = [m for m in self._recomputed if m is not module]
        if enabled:
            self._recomputed.append(module)

    def debug(self, v_level=1):
        """Prints the plan summary when the graph compiles (and the logical graph at level 2)."""
        self._debug = v_level

    # --- the first call: trace and compile --------------------------------------------------
    def _named_variables(self):
        seen = set()
        for attr, module in self._modules.items():
            for kind, registry_name in (("param", "_parameters"), ("buffer", "_buffers")):
                for sub_name, sub in module.named_modules(prefix=attr):
                    for name, value in getattr(sub, registry_name).items():
                        if value is None or id(value) in seen:
                            continue
                        seen.add(id(value))
                        full = f"{sub_name}.{name}" if sub_name else name
                        yield full, sub, registry_name, name, value, kind == "param"

    def _default_placement(self, args):
        for a in args:
            if isinstance(a, _gt.GlobalTensor):
                return a.placement, True
        for *_, value, _ in self._named_variables():
            if isinstance(value, _gt.GlobalTensor):
                return value.placement, True
        self._local_device = self._device_of_local_tensors(args)
        kind = "cpu" if self._local_device == "cpu:0" else "cuda"
        return _placement(kind, [env.get_rank()]), False

    # Note [Local graphs on a GPU]
    # A graph of local tensors runs where they are: on this rank's CPU, or, when its inputs,
    # parameters and buffers are on one CUDA device, on a CUDA placement of this rank whose
    # plan takes that GPU (the runtime's first_gpu). The runtime takes and gives local pieces
    # in host memory (its copy tasks move them to and from the GPU), so inputs are handed over
    # on the host and results and state_dict() come back on the device (on_host,
    # _on_local_device). Tensors on two devices are refused, naming one on each; a module moved
    # after the trace is refused at the next call (_held_as in the fingerprint).
    def _device_of_local_tensors(self, args):
        """The device of every local input and variable ("cpu:0" without any)."""
        where = {}
        for i, a in enumerate(args):
            if isinstance(a, _C.Tensor):
                where.setdefault(str(a.device), f"input {i}")
        for full, *_, value, _ in self._named_variables():
            if isinstance(value, _C.Tensor):
                where.setdefault(str(value.device), f"'{full}'")
        if len(where) > 1:
            (d1, t1), (d2, t2) = list(where.items())[:2]
            raise ValueError(
                f"[nn.Graph] {type(self).__name__}'s local inputs and parameters must be on one "
                f"device. However, {t1} is on {d1} and {t2} on {d2}: move the module and the "
                "inputs to one device (module.to(device)).")
        return next(iter(where), "cpu:0")

    def _input_names(self, count):
        """build()'s parameter names, for messages ("input 'x'")."""
        try:
            names = [p.name for p in inspect.signature(self.build).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        return [f"input '{names[i]}'" if i < len(names) else f"input {i}" for i in range(count)]

    def _check_one_kind(self, args, placement):
        """Note [Local and global do not mix in a graph]: a graph whose inputs or parameters are
        global runs one plan over all its ranks, where a local tensor would be taken as the
        same value on every rank: local data would train without reducing gradients and
        local weights could drift apart, silently. Every rank refuses it, naming the tensor
        and the fix."""
        names = self._input_names(len(args))
        for name, a in zip(names, args):
            if isinstance(a, _C.Tensor):
                raise TypeError(
                    f"[nn.Graph] {name} of {type(self).__name__} is a local tensor "
                    f"{tuple(a.shape)}, but the graph is global (its tensors are placed on "
                    f"{placement!r}): each rank would train on its own data without reducing "
                    "gradients. Make it global, each rank giving its shard: "
                    f"x.to_global(placement={placement!r}, sbp=flow.sbp.split(0)).")
        for full, _, registry_name, _, value, _ in self._named_variables():
            if not isinstance(value, _gt.GlobalTensor):
                kind = "parameter" if registry_name == "_parameters" else "buffer"
                raise TypeError(
                    f"[nn.Graph] {kind} '{full}' {tuple(value.shape)} of {type(self).__name__} is "
                    f"a local tensor, but the graph is global (placed on {placement!r}): each "
                    "rank would start from and keep its own copy. Lay the module out first: "
                    f"module.to_global({placement!r}, flow.sbp.broadcast).")

    def _trained_parameters(self):
        """ids of the modules' parameters the optimizer trains (Note [Replaced parameters]);
        refuses an optimizer holding a parameter the graph's modules do not."""
        if not self._optimizers:
            return None
        from oneflowlike.nn.parameter import replaced_values

        holder = {}  # id of a parameter, or of a value it replaced -> the parameter
        for *_, value, is_param in self._named_variables():
            if is_param:
                holder[id(value)] = value
                for old in replaced_values(value):
                    holder.setdefault(id(old), value)
        trained, outside = set(), []
        for g, group in enumerate(self._optimizers[0].param_groups):
            for k, p in enumerate(group["params"]):
                if id(p) in holder:  # alive (p is), so the id is p's
                    trained.add(id(holder[id(p)]))
                else:
                    outside.append(f"param_groups[{g}]['params'][{k}] {tuple(p.shape)}")
        if outside:
            raise ValueError(
                f"[nn.Graph] the optimizer of {type(self).__name__} holds parameters that are not "
                f"in the graph's modules ({list(self._modules)}): {', '.join(outside[:8])}"
                f"{' ...' if len(outside) > 8 else ''}. The graph trains only its modules' "
                "parameters: build the optimizer over them (model.parameters() of a module set as "
                "a graph attribute), or add the module that owns these to the graph.")
        return trained

    def _compile(self, args):
        start = time.perf_counter()
        placement, is_global = self._default_placement(args)
        if is_global:
            self._check_one_kind(args, placement)
        trained = self._trained = self._trained_parameters()
        self._is_global = is_global
        self._tracer_placement = placement
        tracer = _gt._Tracer(type(self).__name__, placement)
        tracer.set_location_provider(_user_location)
        tracer.set_constants_allowed(not is_global)
        self._inputs = []  # (name, is_global)
        lazy_args = []
        m = self.config.gradient_accumulation_steps
        for i, a in enumerate(args):
            name = f"_input_{i}"
            shape = tuple(a.shape) if isinstance(a, (_gt.GlobalTensor, _C.Tensor)) else ()
            if m > 1:
                # build() sees one micro-batch: the batch axis cut into m pieces.
                if not shape or shape[0] % m:
                    raise ValueError(
                        f"[nn.Graph] with {m} gradient accumulation steps, input {i}'s batch axis "
                        f"must divide by {m}. However, its shape is {shape}."
                    )
                shape = (shape[0] // m,) + shape[1:]
            if isinstance(a, _gt.GlobalTensor):
                tracer.ranks |= set(a.placement.flat_ranks)
                lazy_args.append(tracer.input(name, shape, a.dtype, a.placement._c, _gt._strings(a.sbp)))
            elif isinstance(a, _C.Tensor):
                ndim = len(placement.hierarchy)
                lazy_args.append(tracer.input(name, shape, a.dtype, placement._c, ["B"] * ndim))
            else:
                raise TypeError(
                    f"[nn.Graph] inputs must be tensors. However, input {i} is {type(a).__name__}."
                )
            self._inputs.append(name)
        self._input_signature = [_signature(a) for a in args]
        # Parameters and buffers become variables; the modules see lazy tensors while tracing.
        self._variables = []  # (name, value at trace time, owner, registry name, key)
        self._compiled_trains = {}  # name -> whether the plan trains it
        swapped = []
        try:
            for full, owner, registry_name, key, value, trainable in self._named_variables():
                if getattr(value, "is_meta", False):
                    raise RuntimeError(
                        f"[nn.Graph] '{full}' is a meta tensor (shape {tuple(value.shape)}, no "
                        "data): lay the module out first (module.to_global(placement, sbp) "
                        "makes each rank's piece from its initialiser).")
                if isinstance(value, _gt.GlobalTensor):
                    tracer.ranks |= set(value.placement.flat_ranks)
                    vp, vsbp = value.placement, value.sbp
                else:
                    vp, vsbp = placement, (_sbp.broadcast,) * len(placement.hierarchy)
                trainable = trainable and _trains(value, trained)
                self._compiled_trains[full] = trainable
                lazy = tracer.variable(full, tuple(value.shape), value.dtype, vp._c, _gt._strings(vsbp),
                                       trainable)
                self._variables.append((full, value, owner, registry_name, key))
                getattr(owner, registry_name)[key] = lazy
                swapped.append((owner, registry_name, key, value))
            restores = self._wrap_stages(tracer) + self._wrap_candidates(tracer)
            try:
                with _gt.tracing(tracer.c, tracer):
                    outputs = self.build(*lazy_args)
            finally:
                for module, forward in restores:
                    if forward is None:
                        del module.forward
                    else:
                        module.forward = forward
        finally:
            for owner, registry_name, key, value in swapped:
                getattr(owner, registry_name)[key] = value
        tracer.ranks |= set(tracer.c.ranks())  # placements reached only by to_global too
        if not is_global and tracer.ranks != {env.get_rank()}:
            raise ValueError(
                f"[nn.Graph] {type(self).__name__}'s inputs and parameters are local, so it runs "
                f"on this rank alone; build() moved a tensor to ranks {sorted(tracer.ranks)}. "
                "Make the inputs and parameters global (to_global) to run over several ranks.")
        self._traced_modes = [(name, m, m.training) for attr, module in self._modules.items()
                              for name, m in module.named_modules(prefix=attr)]
        self._traced_fingerprint = self._fingerprint()
        self._single = not isinstance(outputs, (tuple, list))
        outs = [outputs] if self._single else list(outputs)
        self._fetches = []
        for o in outs:
            if not (isinstance(o, _C.Tensor) and o.is_lazy):
                raise TypeError(
                    "[nn.Graph] build() must return tensors computed in build(). However, got "
                    f"{type(o).__name__}."
                )
            p = tracer.placement_of(o)
            shape = tuple(o.shape)
            m = self.config.gradient_accumulation_steps
            if m > 1 and tracer.derives_from_input(o):
                shape = (m,) + shape  # one value per micro-batch, stacked
            self._fetches.append((tracer.fetch(o), _placement_from_c(p), shape, o.dtype))
        if self._optimizers:
            if not tracer.loss_marked:
                raise RuntimeError(
                    "[nn.Graph] a graph with an optimizer must call loss.backward() in build() "
                    "to say what to minimize."
                )
            kind, hyper = _optimizer_setup(self._optimizers[0])
            tracer.set_optimizer(kind, {k: v for k, v in hyper.items()
                                        if k != "group_weight_decay"})
            if "group_weight_decay" in hyper:
                tracer.set_param_groups(list(hyper["group_weight_decay"]), self._group_of())
            self._compiled_optimizer = (kind, {k: v for k, v in hyper.items() if k != "lr"})
        tracer.set_gradient_accumulation_steps(self.config.gradient_accumulation_steps)
        tracer.set_zero_stage(self.config.zero_stage)
        scaler = self._grad_scaler
        if self.config.amp_dtype == _C.dtype.float16 and scaler is None:
            raise ValueError(
                "[nn.Graph] enable_amp(dtype=flow.float16) needs dynamic loss scaling: call "
                "graph.set_grad_scaler(flow.amp.GradScaler()) before the first step (without it "
                "small gradients silently become 0).")
        if scaler is not None:
            tracer.set_dynamic_loss_scale(scaler._scale, scaler._growth_factor,
                                          scaler._backoff_factor, scaler._growth_interval)
        if self.config.amp_dtype is not None:
            tracer.set_amp_dtype(self.config.amp_dtype)
        if self.config.reduce_dtype is not None:
            tracer.set_grad_reduce_dtype(self.config.reduce_dtype)
        tracer.set_gradient_bucket_bytes(self.config.gradient_bucket_bytes)
        if self._debug >= 2 and env.get_rank() == 0:
            print(tracer.graph_text())
        self._tracer = tracer
        rank = env.get_rank()
        self._plan = None
        traced = time.perf_counter()
        if self.config.memory_limit:
            self._check_memory(tracer)
        if rank in tracer.ranks:
            self._plan = tracer.compile([rank])
            self._output_sbp = self._plan.fetch_sbp
            self._output_shapes = self._plan.output_shapes()
            if self._debug >= 1:
                print(f"[nn.Graph] rank {rank}: {self._plan.summary()}")
            self.timings["compile_seconds"] = time.perf_counter() - traced
            gpu = -1  # Note [Local graphs on a GPU]
            if not self._is_global and self._local_device != "cpu:0":
                gpu = _C.device(self._local_device).index
            self._runtime = _job.current().runtime(self._plan, trace=self.config.trace, gpu=gpu)
            self._local_variables = set(self._runtime.variable_names())
            self._variable_sbp = self._plan.variable_sbp
            self._hyper_inputs = self._plan.hyper_inputs  # read once: a new dict per access
            self._runtime.initialize_variables()
            for name, value in tracer.constants().items():
                self._runtime.write_variable(name, value)
            _gt.write_captured(tracer, self._runtime, self._local_variables)
        self._compiled = True
        for full, value, *_ in self._variables:
            self._write_variable(full, value)
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            self._write_state(state)
        if self._pending_scaler_state is not None and self._runtime is not None:
            saved, self._pending_scaler_state = self._pending_scaler_state, None
            self._write_scaler_state(saved)
        self.timings["trace_seconds"] = traced - start
        self.timings["first_call_setup_seconds"] = time.perf_counter() - start

    def _wrap_candidates(self, tracer):
        """With a memory limit, records which traced ops each repeated block makes (the
        elements of an nn.ModuleList or nn.Sequential not already recomputed): the activation
        checkpointing alternative of the verdict recompiles with each block as a group
        (_memory_alternatives). self._candidate_ranges: [(first op, end op, block name)]."""
        from oneflowlike.nn.modules.container import ModuleList, Sequential

        self._candidate_ranges = []
        restores = []
        if not self.config.memory_limit:
            return restores
        recomputed = {id(m) for m in self._recomputed}
        candidates = []  # (name, block): the outermost containers' elements
        for attr, top in self._modules.items():
            for name, container in top.named_modules(prefix=attr):
                if not isinstance(container, (ModuleList, Sequential)) or any(
                        name == outer or name.startswith(outer + ".") for outer, _ in candidates):
                    continue
                for child_name, block in container.named_children():
                    if id(block) not in recomputed and list(block.parameters()):
                        candidates.append((f"{name}.{child_name}", block))
        for block_name, block in candidates:
            forward = block.forward
            had_own = "forward" in block.__dict__

            def recorded(*xs, _forward=forward, _name=block_name, **kw):
                begin = tracer.num_ops()
                out = _forward(*xs, **kw)
                self._candidate_ranges.append((begin, tracer.num_ops(), _name))
                return out

            block.forward = recorded
            restores.append((block, forward if had_own else None))
        return restores

    def _wrap_stages(self, tracer):
        restores = []
        for module, stage, placement, sbp in self._stages:
            forward = module.forward
            had_own = "forward" in module.__dict__

            def staged(*xs, _forward=forward, _at=placement, _layout=sbp, _stage=stage, **kw):
                moved = [
                    x.to_global(placement=_at, sbp=_layout)
                    if isinstance(x, _C.Tensor) and x.is_lazy else x
                    for x in xs
                ]
                return _forward(*moved, **kw)

            module.forward = staged
            restores.append((module, forward if had_own else None))
        for i, module in enumerate(self._recomputed):
            forward = module.forward
            had_own = "forward" in module.__dict__

            def recomputed(*xs, _forward=forward, _group=f"checkpoint{i}", **kw):
                tracer.set_checkpoint_group(_group)
                try:
                    return _forward(*xs, **kw)
                finally:
                    tracer.set_checkpoint_group("")

            module.forward = recomputed
            restores.append((module, forward if had_own else None))
        return restores

    def _optimizer_state_suffixes(self):
        from oneflowlike import optim

        if not self._optimizers:
            return ()
        if isinstance(self._optimizers[0], optim.Adam):
            return (".exp_avg", ".exp_avg_sq")
        return (".momentum",)

    def _plan_layout(self, name, value):
        """(placement, sbp) of variable ``name`` in the plan (ZeRO may split what the module
        holds whole); the module's own layout where this rank holds no part of it."""
        if isinstance(value, _gt.GlobalTensor):
            placement, sbp = value.placement, value.sbp
        else:
            placement = self._tracer_placement
            sbp = (_sbp.broadcast,) * len(placement.hierarchy)
        if name in self._variable_sbp:
            sbp = tuple(_sbp.sbp(x) for x in self._variable_sbp[name])
        return placement, sbp

    def _write_variable(self, name, value):
        """Writes ``value`` (a local tensor holding the whole value, or a global tensor in any
        layout) into variable ``name``; every rank of the value's placement must call it."""
        if isinstance(value, _gt.GlobalTensor):
            placement, sbp = self._plan_layout(name, value)
            if value.placement != placement or value.sbp != sbp:
                # ZeRO's B -> S needs no communication: each rank slices its own piece (a
                # compiled reshard would keep its runtime and memory for the process's life).
                sliced = _gt.sliced_locally(value, sbp) if value.placement == placement else None
                value = sliced if sliced is not None else value.to_global(placement=placement,
                                                                          sbp=sbp)
            if name in self._local_variables:
                self._runtime.write_variable_pieces(name, {env.get_rank(): value.to_local()})
        elif name in self._local_variables:
            self._runtime.write_variable(name, on_host(value))

    def _on_local_device(self, local):
        """A local graph's result on the device its tensors are on (Note [Local graphs on a
        GPU]); the runtime hands results over in host memory."""
        if local is None or self._local_device == "cpu:0":
            return local
        return local._to_device(self._local_device)

    # --- every call ----------------------------------------------------------------------------
    def __call__(self, *args):
        if not self._compiled:
            start = time.perf_counter()
            self._compile(args)
            out = self._call(args)
            self.timings["first_step_seconds"] = time.perf_counter() - start
            return out
        return self._call(args)

    def _call(self, args):
        if len(args) != len(self._inputs):
            raise TypeError(
                f"[nn.Graph] was built with {len(self._inputs)} inputs. However, got {len(args)}."
            )
        for i, (a, traced) in enumerate(zip(args, self._input_signature)):
            if _signature(a) != traced:
                raise ValueError(
                    f"[nn.Graph] input {i} must be like the one the graph was traced with: "
                    f"{_describe(traced)}. However, got {_describe(_signature(a))}."
                )
        self._check_unchanged_since_trace()
        rank = env.get_rank()
        step = self._step + 1
        if self._runtime is None:
            outputs = [
                _gt.GlobalTensor(None, shape, dtype, p, (_sbp.broadcast,) * len(p.hierarchy))
                for _, p, shape, dtype in self._fetches
            ]
        else:
            pieces = {}
            for name, a in zip(self._inputs, args):
                if isinstance(a, _gt.GlobalTensor) and a._local is None:
                    continue
                local = a.to_local() if isinstance(a, _gt.GlobalTensor) else a
                pieces[name] = {rank: on_host(local)}
            for name, dtype in self._hyper_inputs.items():
                value = self._hyper_value(name, step)
                array = np.asarray(value, dtype=np.float64 if dtype == _C.dtype.float64 else np.float32)
                pieces[name] = {rank: _C.from_numpy(array)}
            fetched = self._runtime.run_local(pieces)
            outputs = []
            for name, p, shape, dtype in self._fetches:
                local = fetched.get(name, {}).get(rank)
                if not self._is_global:
                    outputs.append(self._on_local_device(local))
                    continue
                nd = tuple(_sbp.sbp(s) for s in self._output_sbp.get(name, ["B"] * len(p.hierarchy)))
                assert tuple(self._output_shapes.get(name, shape)) == shape, (name, shape)
                outputs.append(_gt.GlobalTensor(local, shape, dtype, p, nd))
        self._step = step
        for scheduler in self._lr_schedulers:
            scheduler.step()
        return outputs[0] if self._single else tuple(outputs)

    def _group_of(self):
        """{variable name: its parameter group} for the trained parameters of groups > 0. A
        group may hold the value a parameter replaced (Note [Replaced parameters])."""
        from oneflowlike.nn.parameter import replaced_values

        index = {id(p): g for g, group in enumerate(self._optimizers[0].param_groups)
                 for p in group["params"]}
        groups = {}
        for full, *_, value, is_param in self._named_variables():
            if not is_param:
                continue
            for candidate in [value, *replaced_values(value)]:
                if index.get(id(candidate), 0) > 0:
                    groups[full] = index[id(candidate)]
                    break
        return groups

    def _hyper_value(self, name, step):
        """What the optimizer input ``name`` gets this step: "lr" / "lr@k" group 0's lr,
        "lr_g<g>@k" group g's (Note [Parameter groups]), "step" / "step@k" the step."""
        base = name.split("@")[0]
        if base == "lr":
            return self._optimizers[0].param_groups[0]["lr"]
        if base.startswith("lr_g"):
            return self._optimizers[0].param_groups[int(base[4:])]["lr"]
        return step

    def _fingerprint(self):
        """What decides the plan's variables and which of them train: the objects the modules
        hold, their requires_grad, and the optimizer's parameters. One pass, compared each
        call."""
        held = tuple((full, id(value), value.requires_grad, _held_as(value))
                     for full, _, _, _, value, _ in self._named_variables())
        optimized = tuple((g, id(p)) for g, group in enumerate(self._optimizers[0].param_groups)
                          for p in group["params"]) if self._optimizers else ()
        return held, optimized

    def _check_unchanged_since_trace(self):
        """The plan holds what the trace saw: the modules' train/eval modes (dropout), their
        parameters and which of them train, the optimizer's kind and hyper-parameters but lr.
        A change would be silently ignored: refuse it."""
        fingerprint = self._fingerprint()
        if fingerprint != self._traced_fingerprint:
            held = {full: value for full, _, _, _, value, _ in self._named_variables()}
            traced = {full: value for full, value, *_ in self._variables}
            replaced = sorted(n for n in set(held) | set(traced)
                              if held.get(n) is not traced.get(n))
            if replaced:
                raise RuntimeError(
                    f"[nn.Graph] the modules' parameters or buffers {replaced[:8]} were added, "
                    f"removed or replaced after {type(self).__name__} traced them: the graph "
                    "keeps its own copies. Lay the model out before the first call, or build a "
                    "new graph.")
            traced_as = {f: h for f, _, _, h in self._traced_fingerprint[0]}
            moved = sorted(full for full, value, *_ in self._variables
                           if _held_as(value) != traced_as.get(full))
            if moved:
                raise RuntimeError(
                    f"[nn.Graph] the modules' parameters or buffers {moved[:8]} moved to another "
                    f"device or dtype (module.to) after {type(self).__name__} traced them: the "
                    "graph keeps its own copies where it compiled them. Move the model before "
                    "the first call, or build a new graph.")
            trained = self._trained_parameters()
            changed = sorted(full for full, value, _, registry_name, _ in self._variables
                             if registry_name == "_parameters"
                             and _trains(value, trained) != self._compiled_trains[full])
            raise RuntimeError(
                f"[nn.Graph] which parameters train changed after {type(self).__name__} "
                f"compiled ({changed[:8]}: requires_grad or the optimizer's params): the plan "
                "trains what it compiled with. Build a new graph to freeze or unfreeze "
                "parameters.")
        for name, module, training in self._traced_modes:
            if module.training != training:
                mode = "train()" if training else "eval()"
                raise RuntimeError(
                    f"[nn.Graph] {type(self).__name__} was traced with '{name}' in {mode} mode, "
                    f"and it is now in {'train()' if module.training else 'eval()'} mode: a "
                    "compiled graph keeps the mode it was traced in. Build a separate graph for "
                    "evaluation (one graph per mode, as in OneFlow), sharing the modules.")
        if self._optimizers:
            kind, hyper = _optimizer_setup(self._optimizers[0])
            hyper.pop("lr")
            compiled_kind, compiled = self._compiled_optimizer
            hyper["kind"], compiled = kind, dict(compiled, kind=compiled_kind)
            changed = sorted(k for k in set(hyper) | set(compiled)
                             if hyper.get(k) != compiled.get(k))
            if changed:
                raise ValueError(
                    f"[nn.Graph] the optimizer's {', '.join(changed)} changed after "
                    f"{type(self).__name__} compiled ({', '.join(f'{k}={compiled.get(k)}' for k in changed)}"
                    f" -> {', '.join(f'{k}={hyper.get(k)}' for k in changed)}): the plan keeps the "
                    "compiled values, and only lr is fed each step. Build a new graph to train "
                    "with other hyper-parameters.")

    # --- state -----------------------------------------------------------------------------------
    def _state_entries(self):
        """(name, the module value whose layout it shares) of every parameter, buffer and, once
        compiled, optimizer state ("<param>.momentum", "<param>.exp_avg", ...)."""
        if self._compiled:
            variables = [(full, value, registry_name == "_parameters")
                         for full, value, _, registry_name, _ in self._variables]
        else:
            variables = [(full, value, is_param)
                         for full, _, _, _, value, is_param in self._named_variables()]
        trained = self._trained if self._compiled else self._trained_parameters()
        entries = []
        for full, value, is_param in variables:
            entries.append((full, value))
            if is_param and _trains(value, trained):
                # A template before the first call: the state has its parameter's layout.
                for suffix in self._optimizer_state_suffixes():
                    entries.append((full + suffix, value))
        return entries

    def state_dict(self):
        """Every parameter, buffer and optimizer state by name (the modules' names prefixed by
        the graph attribute): global tensors in a global graph, local tensors otherwise. Before
        the first call, the modules' values (the layouts flow.load(like=...) needs)."""
        return self._state_dict()

    def _state_dict(self):
        rank = env.get_rank()
        out = {}
        for name, value in self._state_entries():
            if not self._compiled:
                # The modules' values; optimizer state starts at zero, in its parameter's layout.
                is_state = name.endswith(self._optimizer_state_suffixes())
                out[name] = _zeros_like(value) if is_state else value
                continue
            local = None
            if name in self._local_variables:
                local = self._runtime.read_variable_pieces(name).get(rank)
            if isinstance(value, _gt.GlobalTensor):
                placement, sbp = self._plan_layout(name, value)
                out[name] = _gt.GlobalTensor(local, value.shape, value.dtype, placement, sbp)
            else:
                out[name] = self._on_local_device(local)
        out.update(self._training_state())
        return out

    def _training_state(self):
        """Note [Training state in a graph's state dict]."""
        if not self._optimizers:
            return {}
        groups = [{k: v for k, v in group.items() if k != "params"}
                  for group in self._optimizers[0].param_groups]
        state = {OPTIMIZER_STATE: copy.deepcopy({"step": self._step, "param_groups": groups})}
        if self._lr_schedulers:
            state[LR_SCHEDULER_STATE] = copy.deepcopy(self._lr_schedulers[0].state_dict())
        if self._grad_scaler is not None:
            state[GRAD_SCALER_STATE] = self._scaler_state()
        return state

    def _scaler_state(self):
        """The loss scale and its step counts: from the graph once compiled (every rank holds
        them), the scaler's starting values before."""
        if self._runtime is None:
            return {"scale": self._grad_scaler._scale, "good_steps": 0.0, "steps": 0.0}
        rank = env.get_rank()
        state = {}
        for key, name in _SCALER_VARIABLES.items():
            piece = self._runtime.read_variable_pieces(name).get(rank)
            if piece is None:  # every rank of the job holds them (autograd.cpp)
                raise RuntimeError(f"[nn.Graph] rank {rank} holds no '{name}': the loss scale "
                                   "is missing from this rank's part of the plan.")
            state[key] = float(piece.numpy())
        return state

    def _write_scaler_state(self, saved):
        rank = env.get_rank()
        for key, name in _SCALER_VARIABLES.items():
            value = _C.from_numpy(np.asarray(saved[key], dtype=np.float32))
            self._runtime.write_variable_pieces(name, {rank: value})

    def _load_training_state(self, state, strict):
        """Restores the step count, the param groups' hyper-parameters and the scheduler's
        state (Note [Training state in a graph's state dict])."""
        for key, present in ((OPTIMIZER_STATE, bool(self._optimizers)),
                             (LR_SCHEDULER_STATE, bool(self._lr_schedulers)),
                             (GRAD_SCALER_STATE, self._grad_scaler is not None)):
            if strict and key in state and not present:
                what = {OPTIMIZER_STATE: "an optimizer", LR_SCHEDULER_STATE: "an LR scheduler",
                        GRAD_SCALER_STATE: "a grad scaler"}[key]
                raise KeyError(f"[nn.Graph] load_state_dict got '{key}', but "
                               f"{type(self).__name__} has no {what}.")
            if strict and present and key not in state:
                raise KeyError(
                    f"[nn.Graph] load_state_dict needs '{key}' (from graph.state_dict()): "
                    "without it training would resume with the step count or schedule of a new "
                    "run. Pass strict=False to load the variables alone.")
        saved = state.get(OPTIMIZER_STATE)
        if saved is not None and self._optimizers:
            groups = self._optimizers[0].param_groups
            if len(saved["param_groups"]) != len(groups):
                raise ValueError(f"[nn.Graph] the saved optimizer has {len(saved['param_groups'])} "
                                 f"param groups. However, this one has {len(groups)}.")
            for group, saved_group in zip(groups, saved["param_groups"]):
                for key, value in saved_group.items():
                    if isinstance(group.get(key), tuple) and isinstance(value, list):
                        value = tuple(value)  # JSON has no tuples (betas)
                    group[key] = value
            self._step = int(saved["step"])
        saved = state.get(LR_SCHEDULER_STATE)
        if saved is not None and self._lr_schedulers:
            self._lr_schedulers[0].load_state_dict(copy.deepcopy(saved))
        saved = state.get(GRAD_SCALER_STATE)
        if saved is not None and self._grad_scaler is not None:
            if self._runtime is None:
                self._pending_scaler_state = dict(saved)  # written once compiled
            else:
                self._write_scaler_state(saved)

    def load_state_dict(self, state, strict=True):
        """Writes values (as state_dict gives them, in any layout) into the graph, with the
        optimizer's step count and hyper-parameters and the LR scheduler's state; before the
        first call the tensors are kept and written once it has compiled. ``strict``: every
        key must be known and present."""
        state = dict(state)
        training = {k: state.pop(k) for k in (OPTIMIZER_STATE, LR_SCHEDULER_STATE,
                                              GRAD_SCALER_STATE) if k in state}
        names = [name for name, _ in self._state_entries()]
        if not self._compiled:  # optimizer state is known by its suffixes before the first call
            unknown = sorted(k for k in state if k not in names and not any(
                k.startswith(n + ".") for n in names))
        else:
            unknown = sorted(set(state) - set(names))
        missing = [n for n in names if n not in state]
        if strict and (unknown or missing):
            raise KeyError(f"[nn.Graph] load_state_dict got unexpected keys {unknown} and lacks "
                           f"keys {missing[:8]}{' ...' if len(missing) > 8 else ''}. Pass "
                           "strict=False to load a part.")
        # Everything is checked before anything changes: no half-loaded state.
        for name, value in self._state_entries():
            if name in state and tuple(state[name].shape) != tuple(value.shape):
                raise ValueError(f"[nn.Graph] '{name}' has shape {tuple(value.shape)}. However, "
                                 f"load_state_dict got {tuple(state[name].shape)}.")
        self._check_local_values_agree(state)
        self._load_training_state(training, strict)
        if not self._compiled:
            self._pending_state = state
            return
        self._write_state(state)

    def _check_local_values_agree(self, state):
        """Note [Local and global do not mix in a graph], for loaded values: a local tensor
        given for a global variable is taken as its whole value, which is right only when every
        rank gives the same (flow.load without like=); one that differs between ranks is
        refused on every rank (collective: every rank loads the same names)."""
        local = {name: state[name].numpy() for name, value in self._state_entries()
                 if name in state and isinstance(value, _gt.GlobalTensor)
                 and isinstance(state[name], _C.Tensor)}
        differ = _agreement.differing(local)
        if differ:
            raise ValueError(
                f"[nn.Graph] load_state_dict got local tensors for global variables of "
                f"{type(self).__name__} that differ between ranks: {differ[:8]}. Each rank would "
                "load its own value of one variable. Load with flow.load(path, "
                "like=graph.state_dict()) (each rank reads its pieces), or pass global tensors.")

    def _write_state(self, state):
        for name, _ in self._state_entries():
            if name in state:
                self._write_variable(name, state[name])

    def sync_to_modules(self):
        """Copies the trained values into the modules' parameters and buffers."""
        current = self._state_dict()
        for full, value, owner, registry_name, key in self._variables:
            new = current[full]
            if isinstance(value, _gt.GlobalTensor):
                if new.placement != value.placement or new.sbp != value.sbp:
                    new = new.to_global(placement=value.placement, sbp=value.sbp)
                value._local = new._local
            elif new is not None:
                from oneflowlike.autograd import no_grad

                with no_grad():  # as an optimizer's step writes them
                    _C._assign_(value, new, "sync_to_modules")

    @property
    def step_count(self):
        """How many steps the graph has run (the optimizer's step, for Adam's bias correction).
        Read-only: load_state_dict restores it with the rest of a checkpoint."""
        return self._step

    def chrome_trace(self):
        """The acts since the last call as Chrome trace JSON (config.enable_trace())."""
        if self._runtime is None:
            return '{"traceEvents":[]}'
        return self._runtime.chrome_trace()

    def _check_memory(self, tracer):
        """Note [Memory limit]: with a limit (set_memory_limit, or the launcher's
        --memory-per-rank as OFL_MEMORY_PER_RANK), every rank compiles the whole job's plan, not
        only its part, and checks every rank's planned peak: all refuse together, with the same
        message, before anything is allocated. The message says what fills the worst rank
        (Note [Memory report]) and which changes lower its peak, recompiled from the same trace
        (_memory_alternatives)."""
        limit = self.config.memory_limit
        whole = tracer.compile([])
        reports = whole.memory_report()
        peaks = _needed_bytes(reports)
        over = {r: p for r, p in sorted(peaks.items()) if p > limit}
        if not over:
            return
        worst = max(over, key=over.get)
        lines = [f"[nn.Graph] every rank must fit the memory limit of {format_bytes(limit)} "
                 f"({limit} bytes). However, rank {r} plans a peak of {format_bytes(p)}"
                 for r, p in over.items()]
        report = next(r for r in reports if r["rank"] == worst)
        kinds = sorted(report["by_kind"].items(), key=lambda kv: -kv[1])
        text = ";\n".join(lines) + f".\nRank {worst} at its peak ('{report['peak_task']}'): " + \
            ", ".join(f"{k} {format_bytes(b)}" for k, b in kinds if b) + \
            f"; its largest tensors: {whole.largest_registers(worst, 3)}."
        fits = self._memory_alternatives(tracer, max(peaks.values()))
        if fits:
            text += "\nChanges that give a smaller peak (recompiled):\n" + "\n".join(
                f"  - {what}: peak {format_bytes(peak)} on the largest rank"
                f"{' (fits)' if peak <= limit else ''}" for what, peak in fits)
        if not any(peak <= limit for _, peak in fits):
            text += (f"\nNo change tried here fits the limit of {format_bytes(limit)} on these "
                     "ranks.")
        text += "\nOther remedies: " + ("" if getattr(self, "_candidate_ranges", []) else
                                        "activation checkpointing (set_activation_checkpointing), ") \
            + "more tensor or pipeline parallelism, or a larger limit."
        raise MemoryError(text)

    def _memory_alternatives(self, tracer, now):
        """(change, worst need) for higher ZeRO stages, more micro-batches and activation
        checkpointing of the repeated blocks that lower ``now`` (the worst rank's need as
        traced: _needed_bytes), each recompiled from the same trace; the trace's settings are
        restored afterwards."""
        out = []
        cfg = self.config
        variants = []
        ranges = getattr(self, "_candidate_ranges", [])
        if self._optimizers:
            for stage in range(cfg.zero_stage + 1, 4):
                variants.append((f"ZeRO stage {stage} (config.enable_zero(stage={stage}))",
                                 lambda s=stage: tracer.set_zero_stage(s),
                                 lambda: tracer.set_zero_stage(cfg.zero_stage), []))
        m = cfg.gradient_accumulation_steps
        variants.append((f"{2 * m} micro-batches (set_gradient_accumulation_steps)",
                         lambda: tracer.set_gradient_accumulation_steps(2 * m),
                         lambda: tracer.set_gradient_accumulation_steps(m), []))
        if ranges:
            blocks = sorted({name.rsplit(".", 1)[0] for _, _, name in ranges})
            variants.append((f"activation checkpointing of the {len(ranges)} blocks of "
                             f"{', '.join(repr(b) for b in blocks)} (set_activation_checkpointing "
                             "on each)", lambda: None, lambda: None,
                             [(begin, end, f"suggested:{name}") for begin, end, name in ranges]))
        for what, apply, restore, checkpoint_ranges in variants:
            apply()
            try:
                plan = tracer.compile([], checkpoint_ranges)
                peak = max(_needed_bytes(plan.memory_report()).values())
                if peak < now:  # only what lowers the peak is a remedy
                    out.append((what, peak))
            except Exception:  # noqa: BLE001 (a variant that does not compile is no remedy)
                pass
            finally:
                restore()
        return sorted(out, key=lambda item: item[1])

    def memory_report(self):
        """Note [Memory report] of every rank of this graph (traced: call it once first),
        recompiled as a whole job: per rank its planned peak, the task of its live peak, and
        the bytes of parameters, gradients, optimizer state, activations (the micro-batches in
        flight counted), buffers, communication buffers and kernel workspace there, and the
        model states' own high-water mark (``model_states_peak``, at ``model_states_task``:
        parameters, gradients and optimizer state, what DeepSpeed's formulas count). A list of
        dicts, one per rank; str() is a table."""
        if getattr(self, "_tracer", None) is None:
            raise RuntimeError("[nn.Graph] memory_report needs the traced graph: call the graph "
                               "once first.")
        whole = self._tracer.compile([])
        return MemoryReport(whole.memory_report(), whole.memory_report_text())

    def peak_bytes(self):
        """This rank's planned peak memory (registers and memory blocks), in bytes."""
        return self._plan.peak_bytes().get(env.get_rank(), 0) if self._plan is not None else 0

    def workspace_bytes(self):
        """This rank's kernel workspace (Note [Memory report]): what its compute actors keep
        for the job beside the planned peak, so the process needs peak_bytes() + this."""
        if self._plan is None:
            return 0
        rank = env.get_rank()
        return next((r["workspace"] for r in self._plan.memory_report() if r["rank"] == rank), 0)

    def plan_summary(self):
        return self._plan.summary() if self._plan is not None else ""

    def write_dot(self, path):
        """Writes this rank's plan as Graphviz dot (after the first call, which compiles it)."""
        if not self._compiled:
            raise RuntimeError(
                f"[nn.Graph] write_dot needs {type(self).__name__}'s plan, which the first call "
                "makes (it traces build() with the inputs' shapes and layouts): call the graph "
                "once, then write_dot.")
        if self._plan is None:
            raise RuntimeError(f"[nn.Graph] rank {env.get_rank()} holds no part of "
                               f"{type(self).__name__}: its plan is on other ranks.")
        with open(path, "w") as f:
            f.write(self._plan.dot())

    def __repr__(self):
        return f"{type(self).__name__}(compiled={self._compiled}, modules={list(self._modules)})"


def _needed_bytes(reports):
    """Each rank's memory need by its memory report: the planned peak plus the kernel workspace
    its compute actors keep (Note [Memory report]); what the limit, the baseline and every
    recompiled alternative of Note [Memory limit] are measured by."""
    return {r["rank"]: r["planned_peak"] + r["workspace"] for r in reports}


def _trains(value, trained):
    """Whether parameter ``value`` is trained: it requires grad (Note [Trainable global
    tensors]) and, when the graph has an optimizer, the optimizer holds it (``trained``: their
    ids), as torch trains only the optimizer's parameters."""
    return value.requires_grad and (trained is None or id(value) in trained)


def _zeros_like(value):
    if isinstance(value, _gt.GlobalTensor):
        local = None if value._local is None else _C.fill(tuple(value._local.shape), value.dtype, 0.0)
        return _gt.GlobalTensor(local, value.shape, value.dtype, value.placement, value.sbp)
    return _C.fill(tuple(value.shape), value.dtype, 0.0, value.device)


def _signature(a):
    if isinstance(a, _gt.GlobalTensor):
        return ("global", tuple(a.shape), a.dtype, a.placement, a.sbp)
    return ("local", tuple(a.shape), a.dtype, str(a.device))


def _describe(signature):
    if signature[0] == "global":
        _, shape, dtype, placement, sbp = signature
        return f"a global tensor {shape} {dtype!r} on {placement!r} with sbp {sbp}"
    return f"a local tensor {signature[1]} {signature[2]!r} on {signature[3]}"


def _held_as(value):
    """(dtype, device) of a module's local tensor, which Module.to changes in place."""
    if isinstance(value, _C.Tensor):
        return (value.dtype, value.device)
    return None


def _placement_from_c(c):
    flat = list(c.ranks)
    hierarchy = tuple(c.hierarchy)
    ranks = np.asarray(flat).reshape(hierarchy).tolist()
    return _placement(c.device_type, ranks)
