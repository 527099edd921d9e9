"""The optimizer of an nn.Graph: which of the modules' parameters it trains, the kind and
hyper-parameters compiled into the plan (_optimizer_setup), the parameter groups, what it is fed
each step and the state it keeps per parameter."""


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


def _trains(value, trained):
    """Whether parameter ``value`` is trained: it requires grad (Note [Trainable global
    tensors]) and, when the graph has an optimizer, the optimizer holds it (``trained``: their
    ids), as torch trains only the optimizer's parameters."""
    return value.requires_grad and (trained is None or id(value) in trained)


class GraphOptimizerMixin:
    """nn.Graph's one optimizer (add_optimizer keeps it in self._optimizers); a part of Graph,
    whose modules (_named_variables) hold the parameters it trains."""

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

    def _optimizer_state_suffixes(self):
        from oneflowlike import optim

        if not self._optimizers:
            return ()
        if isinstance(self._optimizers[0], optim.Adam):
            return (".exp_avg", ".exp_avg_sq")
        return (".momentum",)

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
