"""How an example model is laid out over dp x cp x tp x pp ranks, with placements and SBP only.

The model has three kinds of parts: ``embed`` (first stage), ``blocks`` (a ModuleList cut into
pp contiguous stages, the first n_layer % pp stages getting one more) and ``head`` (last stage).
Stage s of pp runs on the n = dp * cp * tp ranks [s * n, (s + 1) * n), a placement whose
dimensions are those of dp, cp and tp above one, in that order (tensor-parallel ranks adjacent,
as Megatron orders them). Tensor parallelism follows Megatron: parameters whose names end with
one of ``column`` are split by output features (S(0) of a Linear weight), those ending with one
of ``row`` by input features (S(1)); the compiler inserts the all-reduces. Expert parallelism
(Note [Expert parallelism as SBP] in examples/llama/moe.py) splits the parameters named in
``experts`` (suffix -> the axis tensor parallelism splits) over the data-parallel ranks on
their expert axis, and has each mixture-of-experts layer exchange its tokens between the
layouts.

Note [Context parallelism as SBP]: Llama 3's context parallelism is a layout of the tokens,
nothing more. Over a placement dimension of its own (``cp``) the tokens, and so the activations
(B, T, C), are split along the sequence (T, axis 1), and the parameters are replicated there (their
gradients summed over the cp ranks as over the data-parallel ones). Attention is the one op whose
rows need other ranks' tokens, and the compiler's SBP inference picks, per attention, the
cheapest of the layouts that give them: an all-to-all of q, k and v into a split of the batch
(where it divides), or of the heads (DeepSpeed-Ulysses, where they divide), or the queries kept
split along the sequence with k and v gathered whole (Note [Sequence-split attention] in
oneflowlike/ops/attention.h; always possible, and the cheapest where k and v are small beside
q, as with one key/value head).
No hint: the layouts after the attention are the compiler's too. Split contiguously, the
causal attention of later pieces has more keys to see (the last of n pieces about 2n - 1 times
the first's work), so by default (``cp_order`` "zigzag") the sequences come in the order that
balances it, piece i holding chunks i and 2n-1-i of 2n (Note [Zigzag order] in
oneflowlike/ops/attention.h): the tokens and targets are fed in that order (``in_order``), and
the model's one change is to be told it (config.zigzag), for its positions and its attention.
The loss, a mean over tokens, does not depend on the order.
Megatron's sequence parallelism needs no flag either: tensor parallelism already reduce-scatters
a row-parallel product's partial sums and computes the norms and residual adds on the pieces
(of the batch, in the plans checked), then all-gathers before the next column-parallel product,
because that costs half of an all-reduce.
"""

import oneflowlike as flow

B = flow.sbp.broadcast
S1 = flow.sbp.split(1)  # along the sequence of (B, T) tokens and (B, T, C) activations


def _nested(ranks, shape):
    """``ranks`` as nested lists of ``shape``, row-major (a flat list for one dimension)."""
    if len(shape) == 1:
        return ranks
    step = len(ranks) // shape[0]
    return [_nested(ranks[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


class Layout:
    def __init__(self, dp=1, tp=1, pp=1, device="cpu", column=(), row=(), experts=None, cp=1,
                 cp_order="zigzag"):
        for name, v in (("dp", dp), ("cp", cp), ("tp", tp), ("pp", pp)):
            if v < 1:
                raise ValueError(f"--{name} must be at least 1. However, got {v}.")
        if cp_order not in ("zigzag", "contiguous"):
            raise ValueError(f"--cp-order must be zigzag or contiguous. However, got "
                             f"{cp_order!r}.")
        self.dp, self.cp, self.tp, self.pp = dp, cp, tp, pp
        self.cp_order = cp_order
        # What the model's config.zigzag gets: the pieces its sequences are ordered for.
        self.zigzag = cp if cp > 1 and cp_order == "zigzag" else 0
        self.world_size = dp * cp * tp * pp
        self.device = device  # the placements' type: every stage computes there
        self.column, self.row = tuple(column), tuple(row)
        self.experts = dict(experts or {})

    def _dims(self):
        """The placement's dimensions: (name, size) of dp, cp and tp above one (dp alone when
        none is)."""
        dims = [(n, v) for n, v in (("dp", self.dp), ("cp", self.cp), ("tp", self.tp)) if v > 1]
        return dims or [("dp", 1)]

    def placement(self, stage):
        n = self.dp * self.cp * self.tp
        return flow.placement(self.device, ranks=_nested(list(range(stage * n, (stage + 1) * n)),
                                                         [v for _, v in self._dims()]))

    def dp_index(self, rank):
        """Which data-parallel shard ``rank`` reads."""
        return (rank % (self.dp * self.cp * self.tp)) // (self.cp * self.tp)

    def sbp(self, over_dp, over_tp, over_cp=B):
        """One SBP per placement dimension: ``over_dp`` on the data-parallel one, ``over_cp``
        on the context-parallel one, ``over_tp`` on the tensor-parallel one (only the
        dimensions the placement has)."""
        over = {"dp": over_dp, "cp": over_cp, "tp": over_tp}
        return tuple(over[n] for n, _ in self._dims())

    def data_sbp(self):
        """The tokens' and targets' (B, T): split by batch over dp and along the sequence over
        cp (Note [Context parallelism as SBP])."""
        return self.sbp(flow.sbp.split(0), B, S1)

    def in_order(self, rows):
        """(batch, block_size) tokens or targets (numpy or a tensor) in the sequence order
        the model is told (Note [Zigzag order]): F.zigzag's where the layout balances causal
        attention."""
        if not self.zigzag:
            return rows
        if isinstance(rows, flow.Tensor):
            return flow.nn.functional.zigzag(rows, 1, self.zigzag)
        return flow.nn.functional.zigzag(flow.tensor(rows), 1, self.zigzag).numpy()

    def stage_input_sbp(self, x):
        """What a pipeline stage's input takes: tokens and activations as the data, a vector per
        sequence (the experts' losses) split by batch only."""
        return self.data_sbp() if x.ndim >= 2 else self.sbp(flow.sbp.split(0), B)

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
        if self.cp > config.block_size:
            raise ValueError(f"--cp {self.cp} splits the sequence: it must be at most "
                             f"--block-size {config.block_size}.")
        if getattr(config, "zigzag", 0) != self.zigzag:
            # The tokens come in this layout's order (feed): a model not told it would take
            # wrong positions and let rows see later tokens, training without an error.
            raise ValueError(f"the model's config.zigzag ({getattr(config, 'zigzag', 0)}) must "
                             f"be the layout's ({self.zigzag}: --cp {self.cp}, --cp-order "
                             f"{self.cp_order}): set config.zigzag = layout.zigzag.")
        if self.zigzag and config.block_size % (2 * self.cp):
            raise ValueError(f"--cp {self.cp} in the zigzag order cuts each sequence in "
                             f"{2 * self.cp} chunks: --block-size {config.block_size} must be a "
                             f"multiple of {2 * self.cp} (or use --cp-order contiguous).")
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
                graph.set_stage(module, stage, p, input_sbp=self.stage_input_sbp)
        if self.dp > 1:
            # The dispatched tokens (E, B * C, D) split over experts (axis 0), the experts'
            # outputs (E, B, C, D) over the batch (axis 1), both whole over tensor parallelism.
            for module in model.modules():
                if hasattr(module, "lay_out_tokens"):
                    module.lay_out_tokens(self.sbp(flow.sbp.split(0), B),
                                          self.sbp(flow.sbp.split(1), B))

