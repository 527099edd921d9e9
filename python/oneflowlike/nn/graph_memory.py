"""nn.Graph's memory verdict: graph.memory_report() (Note [Memory report] in
compiler/physical/memory_report.h), peak_bytes(), workspace_bytes(), and the check of Note
[Memory limit] that refuses, on every rank, a plan over the limit, with the changes that fit."""

from oneflowlike import env
from oneflowlike.framework.sizes import format_bytes


class MemoryReport(list):
    """graph.memory_report(): one dict per rank (Note [Memory report]); str() is one line per
    rank."""

    def __init__(self, ranks, text):
        super().__init__(ranks)
        self.text = text

    def __str__(self):
        return self.text


class GraphMemoryMixin:
    """The memory of an nn.Graph's plan; a part of Graph, whose first call (_compile) records
    the candidate blocks and calls _check_memory with its tracer."""

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


def _needed_bytes(reports):
    """Each rank's memory need by its memory report: the planned peak plus the kernel workspace
    its compute actors keep (Note [Memory report]); what the limit, the baseline and every
    recompiled alternative of Note [Memory limit] are measured by."""
    return {r["rank"]: r["planned_peak"] + r["workspace"] for r in reports}
