"""How an example model is laid out over dp x tp x pp ranks, with placements and SBP only.

The model has three kinds of parts: ``embed`` (first stage), ``blocks`` (a ModuleList cut into
pp contiguous stages, the first n_layer % pp stages getting one more) and ``head`` (last stage).
Stage s of pp runs on ranks [s * dp * tp, (s + 1) * dp * tp): a 2-D placement (dp, tp) when both
are above one, else 1-d. Tensor parallelism follows Megatron: parameters whose names end with one
of ``column`` are split by output features (S(0) of a Linear weight), those ending with one of
``row`` by input features (S(1)); the compiler inserts the all-reduces. Expert parallelism
(Note [Expert parallelism as SBP] in examples/llama/moe.py) splits the parameters named in
``experts`` (suffix -> the axis tensor parallelism splits) over the data-parallel ranks on
their expert axis, and has each mixture-of-experts layer exchange its tokens between the
layouts.
"""

import oneflowlike as flow

B = flow.sbp.broadcast


class Layout:
    def __init__(self, dp=1, tp=1, pp=1, device="cpu", column=(), row=(), experts=None):
        for name, v in (("dp", dp), ("tp", tp), ("pp", pp)):
            if v < 1:
                raise ValueError(f"--{name} must be at least 1. However, got {v}.")
        self.dp, self.tp, self.pp = dp, tp, pp
        self.world_size = dp * tp * pp
        self.device = device  # the placements' type: every stage computes there
        self.column, self.row = tuple(column), tuple(row)
        self.experts = dict(experts or {})

    def placement(self, stage):
        n = self.dp * self.tp
        ranks = list(range(stage * n, (stage + 1) * n))
        if self.dp > 1 and self.tp > 1:
            ranks = [ranks[i * self.tp:(i + 1) * self.tp] for i in range(self.dp)]
        return flow.placement(self.device, ranks=ranks)

    def sbp(self, over_dp, over_tp):
        """One SBP per placement dimension: ``over_dp`` on the data-parallel one, ``over_tp``
        on the tensor-parallel one (only the dimensions the placement has)."""
        if self.dp > 1 and self.tp > 1:
            return (over_dp, over_tp)
        if self.tp > 1:
            return (over_tp,)
        return (over_dp,)

    def data_sbp(self):
        return self.sbp(flow.sbp.split(0), B)

    def stage_of_block(self, i, n_layer):
        per, extra = divmod(n_layer, self.pp)
        bounds, start = [], 0
        for s in range(self.pp):
            start += per + (1 if s < extra else 0)
            bounds.append(start)
        return next(s for s, end in enumerate(bounds) if i < end)

    def check(self, config, batch_size, micro_batches):
        """Refuses a layout the model cannot take, naming the flags. ``config`` has n_layer,
        n_head, tied_head and, for grouped-query attention, n_kv_head."""
        if config.n_layer < self.pp:
            raise ValueError(f"--pp {self.pp} needs at least {self.pp} layers. However, "
                             f"--n-layer is {config.n_layer}.")
        if config.n_head % self.tp:
            raise ValueError(f"--tp {self.tp} must divide --n-head {config.n_head}.")
        n_kv_head = getattr(config, "n_kv_head", None)
        if n_kv_head is not None and n_kv_head % self.tp:
            raise ValueError(f"--tp {self.tp} must divide --n-kv-head {n_kv_head}.")
        if batch_size % (self.dp * micro_batches):
            raise ValueError(f"--batch-size {batch_size} must divide into --dp {self.dp} x "
                             f"--micro-batches {micro_batches}.")
        n_experts = getattr(config, "n_experts", 0)
        if n_experts and n_experts % self.dp:
            raise ValueError(f"--dp {self.dp} must divide --n-experts (each data-parallel rank "
                             f"holds n_experts / dp experts). However, got {n_experts}.")
        if config.tied_head and self.pp > 1:
            raise ValueError("--tied-head needs the embedding and the head on one stage: use "
                             "--pp 1.")

    def param_sbp(self, name):
        """The SBP of parameter ``name`` under tensor and expert parallelism (None:
        replicated)."""
        for suffix, axis in self.experts.items():
            if name.endswith(suffix):
                return self.sbp(flow.sbp.split(0), flow.sbp.split(axis))
        if self.tp > 1 and name.endswith(self.column):
            return self.sbp(B, flow.sbp.split(0))
        if self.tp > 1 and name.endswith(self.row):
            return self.sbp(B, flow.sbp.split(1))
        return None

    def apply(self, model, graph):
        """Lays the model's parameters out and tells ``graph`` the pipeline stages."""
        n_layer = model.config.n_layer
        parts = [(model.embed, 0), (model.head, self.pp - 1)]
        parts += [(block, self.stage_of_block(i, n_layer)) for i, block in enumerate(model.blocks)]
        for module, stage in parts:
            p = self.placement(stage)
            # Each parameter laid out once, in its final SBP: a model built on the meta device
            # makes only its pieces.
            module.to_global(p, self.sbp(B, B), sbp_for=self.param_sbp)
            if self.pp > 1:
                graph.set_stage(module, stage, p, input_sbp=self.data_sbp())
        if self.dp > 1:
            # The dispatched tokens (E, B * C, D) split over experts (axis 0), the experts'
            # outputs (E, B, C, D) over the batch (axis 1), both whole over tensor parallelism.
            for module in model.modules():
                if hasattr(module, "lay_out_tokens"):
                    module.lay_out_tokens(self.sbp(flow.sbp.split(0), B),
                                          self.sbp(flow.sbp.split(1), B))
