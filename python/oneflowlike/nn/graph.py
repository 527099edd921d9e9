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

This file traces, compiles and runs; Graph's other parts are mixins, each in its own file:
graph_config.py (GraphConfig), graph_optimizer.py (the optimizer the plan compiles),
graph_refusals.py (what the plan would silently get wrong), graph_state.py (state_dict,
load_state_dict, sync_to_modules) and graph_memory.py (memory_report, Note [Memory limit]).
"""

import os
import sys
import time

import numpy as np

from oneflowlike import _C
from oneflowlike import env
from oneflowlike import sbp as _sbp
from oneflowlike.framework import global_tensor as _gt
from oneflowlike.framework import job as _job
from oneflowlike.nn.graph_config import GraphConfig
from oneflowlike.nn.graph_memory import GraphMemoryMixin
from oneflowlike.nn.graph_optimizer import GraphOptimizerMixin, _optimizer_setup, _trains
from oneflowlike.nn import graph_sharing
from oneflowlike.nn.graph_refusals import GraphRefusalsMixin
from oneflowlike.nn.graph_state import GraphStateMixin
from oneflowlike.ops.core import on_host
from oneflowlike.placement import placement as _placement

__all__ = ["Graph", "GraphConfig"]

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


def _default_input_sbp(placement):
    # A pipeline stage's input: split over the first (data-parallel) dimension, whole over the
    # others.
    return (_sbp.split(0),) + (_sbp.broadcast,) * (len(placement.hierarchy) - 1)


def on_local_device(local, device):
    """A local graph's result on ``device``, the one its tensors are on (Note [Local graphs on
    a GPU]); the runtime hands results over in host memory."""
    if local is None or device == "cpu:0":
        return local
    return local._to_device(device)


class Graph(GraphStateMixin, GraphMemoryMixin, GraphRefusalsMixin, GraphOptimizerMixin):
    """Base class of compiled training and inference steps (OneFlow's nn.Graph)."""

    def __init__(self):
        object.__setattr__(self, "_modules", {})
        self.config = GraphConfig()
        self._optimizers = []
        self._written_buffers = []  # Note [Buffers written in build]: what build() writes
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
        # trace_seconds, compile_seconds (this rank's part of the plan), first_call_setup_seconds
        # (trace + compile + load + initial values), first_step_seconds (the whole first call).
        self.timings = {}
        self._local_variables = set()
        self._variable_sbp = {}
        # Variable name -> graph_sharing.stamp of its module tensor when this graph last wrote
        # or read it (Note [Graphs sharing modules]).
        self._seen_stamps = {}
        # Note [Graphs sharing modules]: the variables whose runtime piece is the module tensor
        # itself (name -> (its data pointer, its storage)), those storages, and what a call
        # writes.
        self._bound = {}
        self._bound_storages = set()
        self._writes = frozenset()

    def __setattr__(self, name, value):
        from oneflowlike.nn.modules.module import Module

        if isinstance(value, Module):
            if "_modules" not in self.__dict__:
                raise RuntimeError(f"[nn.Graph] cannot hold module '{name}' before "
                                   f"nn.Graph.__init__() has run: call super().__init__() first "
                                   f"in {type(self).__name__}.__init__.")
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
        if lr_sch is not None:
            from oneflowlike.optim import lr_scheduler

            if isinstance(lr_sch, lr_scheduler.ReduceLROnPlateau):
                raise TypeError(
                    "[nn.Graph] ReduceLROnPlateau steps on a metric, which a graph's call does "
                    "not have: pass no lr_sch, and call scheduler.step(metric) yourself (the "
                    "graph reads each group's lr at every call).")
            if isinstance(lr_sch, lr_scheduler.OneCycleLR) and lr_sch.cycle_momentum:
                raise ValueError(
                    "[nn.Graph] OneCycleLR with cycle_momentum=True changes the optimizer's "
                    "momentum (betas) every step, and a graph compiles it once: pass "
                    "cycle_momentum=False (the lr still cycles).")
        self._optimizers.append(optimizer)
        if lr_sch is not None:
            self._lr_schedulers.append(lr_sch)

    def set_stage(self, module, stage_id, placement, input_sbp=None):
        """Runs ``module`` as pipeline stage ``stage_id`` on ``placement``: its parameters move
        there and its tensor inputs are moved there with ``input_sbp`` (default: split(0) over
        the first placement dimension, broadcast over the others), or, where ``input_sbp`` is a
        function, with ``input_sbp(x)`` for each input x (inputs of different ranks may need
        different layouts)."""
        if not isinstance(placement, _placement):
            raise TypeError(f"[nn.Graph] set_stage needs a flow.placement. However, got {placement!r}.")
        if input_sbp is None:
            sbp = _default_input_sbp(placement)
        elif callable(input_sbp):
            sbp = input_sbp
        else:
            sbp = _sbp.normalize(input_sbp, placement, "set_stage")
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
    def _holders_of(self):
        """id(tensor) -> every (module, registry name, key) holding it: a tensor registered in
        two modules (a buffer shared between layers) is one variable, and each holder must see
        its traced value (Note [Buffers written in build])."""
        holders = {}
        for module in self._modules.values():
            for sub in module.modules():
                for registry_name in ("_parameters", "_buffers"):
                    for name, value in getattr(sub, registry_name).items():
                        if value is not None:
                            entry = (sub, registry_name, name)
                            if entry not in holders.setdefault(id(value), []):
                                holders[id(value)].append(entry)
        return holders

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
        tracer.set_follows_no_grad(True)  # Note [No grad in a trace]: build() is the user's code
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
        holders = self._holders_of()
        try:
            # A list first: the swaps below change what a walk of the modules would see.
            for full, owner, registry_name, key, value, trainable in list(self._named_variables()):
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
                for holder, holder_registry, holder_key in holders.get(
                        id(value), [(owner, registry_name, key)]):
                    getattr(holder, holder_registry)[holder_key] = lazy
                    swapped.append((holder, holder_registry, holder_key, value))
            restores = self._wrap_stages(tracer) + self._wrap_candidates(tracer)
            try:
                with _gt.tracing(tracer.c, tracer):
                    outputs = self.build(*lazy_args)
                tracer.finish_writes()  # Note [Buffers written in build]
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
        self._snapshot_modules()
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
        self._written_buffers = list(tracer.written_variables())
        _refuse_shared_writes(self._written_buffers, self._variables)
        if self._written_buffers and self.config.gradient_accumulation_steps > 1:
            raise ValueError(
                f"[nn.Graph] build() writes buffers in place ({', '.join(self._written_buffers)}"
                f"), once per iteration; with {self.config.gradient_accumulation_steps} "
                "micro-batches (gradient accumulation, pipeline stages) each would need its own "
                "write, which is not supported: use one micro-batch, or keep the buffers out of "
                "the graph (BatchNorm: track_running_stats=False).")
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
        bindable = {}  # Note [Graphs sharing modules]
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
            self._variable_sbp = self._plan.variable_sbp
            # Note [Graphs sharing modules]: the module tensors themselves, where they can be.
            bindable = graph_sharing.bindable_pieces(self, self._variable_sbp)
            self._runtime = _job.current().runtime(self._plan, trace=self.config.trace, gpu=gpu,
                                                   bindable_variables=sorted(bindable))
            self._local_variables = set(self._runtime.variable_names())
            self._hyper_inputs = self._plan.hyper_inputs  # read once: a new dict per access
            self._runtime.initialize_variables()
            for name, value in tracer.constants().items():
                self._runtime.write_variable(name, value)
            _gt.write_captured(tracer, self._runtime, self._local_variables)
        self._compiled = True
        self.config._compiled = True
        self._module_values = {full: value for full, value, *_ in self._variables}
        self._writes = frozenset(self._written_buffers) | frozenset(
            full for full, trains in self._compiled_trains.items() if trains and self._optimizers)
        offered = set(bindable) & self._local_variables
        try:
            # Note [Graphs sharing modules]: the values another graph trained, then all of them.
            graph_sharing.release([value for _, value, *_ in self._variables], reader=self)
            for full, value, *_ in self._variables:
                if not (full in offered and graph_sharing.bind(self, full, value)):
                    self._write_variable(full, value)
                self._seen_stamps[full] = graph_sharing.stamp(value)
        except BaseException:
            # The offered variables not yet placed get memory of their own, written by the next
            # call (it has not seen them), so the runtime stays usable.
            for full in offered:
                if full not in self._bound:
                    self._runtime.bind_variable_pieces(full, {})
            raise
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            self._write_state(state)
            graph_sharing.claim(self, set(state))
        if self._pending_scaler_state is not None and self._runtime is not None:
            saved, self._pending_scaler_state = self._pending_scaler_state, None
            self._write_scaler_state(saved)
        self.timings["trace_seconds"] = traced - start
        self.timings["first_call_setup_seconds"] = time.perf_counter() - start

    def _wrap_stages(self, tracer):
        restores = []
        for module, stage, placement, sbp in self._stages:
            forward = module.forward
            had_own = "forward" in module.__dict__

            def staged(*xs, _forward=forward, _at=placement, _layout=sbp, _stage=stage, **kw):
                moved = [
                    x.to_global(placement=_at,
                                sbp=_sbp.normalize(_layout(x), _at, "set_stage")
                                if callable(_layout) else _layout)
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
        if name in self._bound:  # written into the module tensor itself
            graph_sharing.counted_write(self._module_values[name])

    def _on_local_device(self, local):
        return on_local_device(local, self._local_device)

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
        graph_sharing.before_call(self)
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
                if local._storage_id in self._bound_storages:
                    local = local.clone()  # the run may update the variable it shares memory with
                pieces[name] = {rank: on_host(local)}
            for name, dtype in self._hyper_inputs.items():
                value = self._hyper_value(name, step)
                array = np.asarray(value, dtype=np.float64 if dtype == _C.dtype.float64 else np.float32)
                pieces[name] = {rank: _C.from_numpy(array)}
            try:
                fetched = self._runtime.run_local(pieces)
                outputs = self._assemble(fetched, rank)
            except BaseException:
                graph_sharing.count_writes(self)  # a failed step may have written some
                raise
        self._step = step
        if self._optimizers:
            graph_sharing.claim(self)  # its runtime now holds the newest values
        elif self._written_buffers:
            graph_sharing.claim(self, self._written_buffers)
        for scheduler in self._lr_schedulers:
            scheduler.step()
        return outputs[0] if self._single else tuple(outputs)

    def _assemble(self, fetched, rank):
        """The call's results from this rank's fetched pieces."""
        outputs = []
        for name, p, shape, dtype in self._fetches:
            local = fetched.get(name, {}).get(rank)
            if not self._is_global:
                outputs.append(self._on_local_device(local))
                continue
            nd = tuple(_sbp.sbp(s) for s in self._output_sbp.get(name, ["B"] * len(p.hierarchy)))
            assert tuple(self._output_shapes.get(name, shape)) == shape, (name, shape)
            outputs.append(_gt.GlobalTensor(local, shape, dtype, p, nd))
        return outputs

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


def _refuse_shared_writes(written, variables):
    """Refuses a written buffer whose storage another variable shares (a buffer registered as
    a view of another): eagerly the write reaches both, in a graph each is a variable of its
    own, and the other would keep its old value without a word (ValueError naming both)."""
    values = {name: value for name, value, *_ in variables if isinstance(value, _C.Tensor)}
    for name in written:
        for other, value in values.items():
            if other != name and name in values and value._shares_storage_with(values[name]):
                raise ValueError(
                    f"[nn.Graph] build() writes buffer '{name}', whose memory '{other}' shares "
                    f"(one registered as a view of the other): a graph keeps each as a variable "
                    f"of its own, so '{other}' would not see the write. Register one tensor, or "
                    f"derive the other from it in forward().")


def _signature(a):
    if isinstance(a, _gt.GlobalTensor):
        return ("global", tuple(a.shape), a.dtype, a.placement, a.sbp)
    return ("local", tuple(a.shape), a.dtype, str(a.device))


def _describe(signature):
    if signature[0] == "global":
        _, shape, dtype, placement, sbp = signature
        return f"a global tensor {shape} {dtype!r} on {placement!r} with sbp {sbp}"
    return f"a local tensor {signature[1]} {signature[2]!r} on {signature[3]}"


def _placement_from_c(c):
    flat = list(c.ranks)
    hierarchy = tuple(c.hierarchy)
    ranks = np.asarray(flat).reshape(hierarchy).tolist()
    return _placement(c.device_type, ranks)
