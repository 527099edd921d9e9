"""What local tensors and modules gain from the distributed front end: ``to_global``,
``is_global``, ``backward`` on a traced loss, ``Module.to_global``, and the ``placement=`` /
``sbp=`` arguments of the creation functions."""

import functools
import inspect

from oneflowlike import _C
from oneflowlike import sbp as _sbp
from oneflowlike.framework import global_tensor as _gt
from oneflowlike.nn.parameter import record_replacement
from oneflowlike.placement import placement as _placement


def _tensor_to_global(self, placement=None, sbp=None, shape=None, check_meta=True):
    """This rank's piece as part of a global tensor (every rank of ``placement`` gives its
    own); inside nn.Graph.build, the traced value laid out as ``sbp`` on ``placement``. With
    ``check_meta`` (OneFlow's name) the ranks first check that they agree on the logical shape,
    dtype, placement and sbp (Note [Ranks agree] in agreement.py): one small all-reduce; False
    skips it where every rank is known to pass the same."""
    tracer = _gt.current_tracer()
    if tracer is not None:
        if placement is None:
            if not self.is_lazy:
                raise ValueError("[to_global] needs a placement for a tensor made outside build().")
            from oneflowlike.nn.graph import _placement_from_c

            placement = _placement_from_c(tracer.placement_of(self))
        if sbp is None:
            raise ValueError("[to_global] inside build() needs an sbp.")
        nd = _sbp.normalize(sbp, placement, "to_global")
        return tracer.to_global(self, placement._c, _gt._strings(nd))
    if placement is None or sbp is None:
        raise ValueError("[to_global] a local tensor needs both placement and sbp.")
    return _gt.local_to_global(self, placement, sbp, shape, check_meta=check_meta,
                               refuse_grad=True)


_eager_backward = _C.Tensor.backward


def _backward(self, *args, **kwargs):
    if self.is_lazy:
        tracer = _gt.current_tracer()
        if tracer is None:
            raise RuntimeError("[backward] a traced loss can only be marked inside build().")
        tracer.set_loss(self)
        owner = _gt.current_tracer_object()
        if owner is not None:
            owner.loss_marked = True
        return None
    from oneflowlike.autograd import after_backward  # noqa: PLC0415

    with after_backward():
        _eager_backward(self, *args, **kwargs)
    return None


def _module_to_global(self, placement, sbp, keep_split=False, sbp_for=None):
    """Lays every parameter and buffer out on ``placement`` with ``sbp`` (the same for all), or,
    with keep_split, keeps the SBP of those already global and only moves them; ``sbp_for``
    (a function of a parameter's or buffer's name in this module) may give one its own SBP
    instead (Megatron's splits), so that it is laid out once. The values are the module's
    current ones, which every rank must hold alike (build modules after flow.manual_seed with
    the same seed), or, for a module built on the meta device, made piece by piece from their
    initialisers (Note [Meta tensors]). Returns the module."""
    if not isinstance(placement, _placement):
        raise TypeError(f"[to_global] placement must be a flow.placement. However, got {placement!r}.")
    from oneflowlike import env
    from oneflowlike.framework import agreement

    nd = _sbp.normalize(sbp, placement, "Module.to_global")
    held = {}  # name -> the shape, dtype and values digest of a local value every rank gives
    for sub_name, sub in self.named_modules():
        for registry in (sub._parameters, sub._buffers):
            for key, value in list(registry.items()):
                if value is None:
                    continue
                target = nd
                own = sbp_for(f"{sub_name}.{key}" if sub_name else key) if sbp_for else None
                if own is not None:
                    target = _sbp.normalize(own, placement, "Module.to_global")
                if getattr(value, "is_meta", False):  # Note [Meta tensors]: pieces from its Init
                    trainable = value.requires_grad
                    g = value.to_global(placement, target)
                elif isinstance(value, _gt.GlobalTensor):
                    if keep_split and len(value.sbp) == len(nd) and own is None:
                        target = value.sbp
                    trainable = getattr(value, "_ofl_trainable", True)
                    g = value.to_global(placement=placement, sbp=target)  # a move, if any
                else:
                    trainable = value.requires_grad
                    whole = value.detach().numpy()
                    if env.get_world_size() > 1:
                        held[f"{sub_name}.{key}" if sub_name else key] = (
                            f"{tuple(whole.shape)} {whole.dtype} {agreement.digest(whole)}")
                    g = _gt.from_logical(whole, placement, target)
                g._ofl_trainable = trainable
                if registry is sub._parameters:
                    record_replacement(value, g)
                registry[key] = g
    # Note [Ranks agree]: each rank keeps its piece of the values it holds, so ranks holding
    # different values (built without one seed) would train a model no rank has.
    agreement.agree("Module.to_global", held,
                    "every rank must hold the same values of a module it lays out with "
                    "to_global (build it after flow.manual_seed with one seed on every rank, or "
                    "load one checkpoint)", ranks=placement.flat_ranks)
    return self


# Note [Sharded creation]: these make only this rank's piece (framework/sharded_creation.py);
# the others (tensor, arange, linspace) slice the whole value every rank is given or computes.
_SHARDED = {"randn", "rand", "randint", "normal", "zeros", "ones", "full", "empty"}


def _with_placement(fn):
    """``fn(*size, ..., placement=, sbp=)``: a global tensor with the values ``fn`` gives the
    whole logical shape on one device (counter-based random numbers are the same whatever the
    placement), each rank holding its piece."""

    @functools.wraps(fn)
    def wrapper(*args, placement=None, sbp=None, **kwargs):
        if placement is None:
            if sbp is not None:
                raise ValueError(f"[{fn.__name__}] sbp needs a placement.")
            return fn(*args, **kwargs)
        if sbp is None:
            raise ValueError(f"[{fn.__name__}] a placement needs an sbp.")
        if fn.__name__ == "tensor":
            return _agreed_creation(fn, args, kwargs, placement, sbp)
        return _created(fn, args, kwargs, placement, sbp)

    return wrapper


def _created(fn, args, kwargs, placement, sbp):
    """``fn``'s global tensor: made piece by piece (Note [Sharded creation]) or sliced from the
    whole value ``fn`` gives every rank alike (arange, linspace)."""
    if fn.__name__ in _SHARDED:
        from oneflowlike.framework import sharded_creation

        return sharded_creation.make(fn.__name__, fn, args, dict(kwargs), placement, sbp)
    requires_grad = kwargs.pop("requires_grad", False)
    result = _gt.from_logical(fn(*args, **kwargs), placement, sbp)
    if requires_grad:
        result.requires_grad = True
    return result


def _agreed_creation(fn, args, kwargs, placement, sbp):
    """flow.tensor's global tensor, checked to be the same on every rank of ``placement`` (Note
    [Ranks agree] in agreement.py): its logical shape, dtype, placement and sbp, and the values,
    which every rank gives whole. The other creation functions take only sizes and scalars,
    computed alike by a program that runs alike, and run in models' hot loops (a position
    arange per step), so they are not checked: each check is a small all-reduce that also
    waits for the slowest rank."""
    from oneflowlike import env
    from oneflowlike.framework import agreement

    name = fn.__name__
    if not isinstance(placement, _placement):
        raise TypeError(f"[{name}] placement must be a flow.placement. However, got "
                        f"{placement!r}.")
    fields = {"logical shape": "?", "dtype": "?", "placement": repr(placement),
              "sbp": str(sbp)}
    result, error = None, None
    try:
        requires_grad = kwargs.pop("requires_grad", False)
        value = fn(*args, **kwargs)
        if env.get_world_size() > 1:
            fields["values"] = agreement.digest(value.numpy())
        result = _gt.from_logical(value, placement, sbp)
        if requires_grad:
            result.requires_grad = True
        fields["logical shape"] = str(tuple(result.shape))
        fields["dtype"] = str(result.dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        if env.get_world_size() == 1:
            raise
        error = e
    fields.setdefault("values", "")
    agreement.agree(name, fields, f"every rank must make the same global tensor: {name} takes "
                    "the whole logical value, alike on every rank (to give each rank its own "
                    "piece, use flow.tensor(piece).to_global(placement, sbp))", error,
                    ranks=placement.flat_ranks)
    return result


def _is_tensor(obj):
    """Whether ``obj`` is a tensor, local or global (torch.is_tensor holds for DTensors too)."""
    return isinstance(obj, (_C.Tensor, _gt.GlobalTensor))


def _has_global(values):
    for v in values:
        if isinstance(v, _gt.GlobalTensor):
            return True
        if isinstance(v, (list, tuple)) and _has_global(v):
            return True
        if isinstance(v, dict) and _has_global(v.values()):
            return True
    return False


def describe_argument(value):
    """How an argument is named in an error: its kind and shape, not its repr."""
    if isinstance(value, _C.Tensor):
        kind = "a traced tensor" if value.is_lazy else "a tensor"
        return f"{kind} {tuple(value.shape)} {repr(value.dtype).split('.')[-1]}"
    if isinstance(value, _gt.GlobalTensor):
        return f"a global tensor {value.shape} {repr(value.dtype).split('.')[-1]}"
    if isinstance(value, (list, tuple)):
        kind = type(value).__name__
        if value and all(_is_tensor(v) for v in value):
            return f"a {kind} of {len(value)} tensors"
        text = repr(value)
        return text if len(text) <= 40 else f"a {kind} of {len(value)} items"
    if value is None or isinstance(value, (str, bool, int, float)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(value).__name__}"


def _signature(fn):
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def arguments_error(name, fn, args, kwargs):
    """Note [Argument errors in the library's words], for functions written in Python: what it
    takes and what it got, instead of the TypeError or AttributeError Python raised deep inside
    when an argument was of the wrong kind."""
    got = [describe_argument(a) for a in args]
    got += [f"{k}={describe_argument(v)}" for k, v in kwargs.items()]
    return TypeError(f"[{name}] takes {_signature(fn)}. However, got ({', '.join(got)}).")


def _eager_global_forms():
    """Functions whose eager global form is not their one-op graph (outside a trace)."""
    from oneflowlike.framework import global_dropout
    from oneflowlike.ops import attention, random, sampling

    # Note [Eager global dropout]: dropout, and attention with dropout_p, draw as F.dropout;
    # multinomial draws its uniforms as flow.rand with a placement (Note [Eager global draws]).
    return {random.dropout: global_dropout.dropout,
            attention.scaled_dot_product_attention: attention._eager_global,
            sampling.multinomial: sampling._eager_global,
            random.randn_like: random._eager_global_like("randn_like", "randn"),
            random.rand_like: random._eager_global_like("rand_like", "rand")}


_EAGER_GLOBAL_FORMS = {}


def _global_aware(fn, name):
    """``fn`` that also takes global tensors (as arguments, or inside list arguments such as
    cat's): with one among the arguments, ``fn`` runs as a compiled graph over them instead.
    Local calls pay one scan of their arguments. Arguments of the wrong kind get the library's
    TypeError naming what ``fn`` takes."""

    eager_global = _EAGER_GLOBAL_FORMS.get(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            if _has_global(args) or _has_global(kwargs.values()):
                if eager_global is not None and _gt.current_tracer() is None:
                    return eager_global(*args, **kwargs)
                return _gt.apply(fn, args, kwargs, name=name)
            return fn(*args, **kwargs)
        except (TypeError, AttributeError) as e:
            if str(e).startswith("["):
                raise
            raise arguments_error(name, fn, args, kwargs) from e

    return wrapper


# Tensor methods that take no tensor operand, or must not be redirected.
_NOT_OPS = {"__repr__", "__str__", "__len__", "__array__", "__float__", "__int__", "__bool__",
            "__hash__", "tolist", "is_lazy", "allclose", "__format__", "stride",
            "is_contiguous"}

# flow functions that take no tensor, make their own placement, or (allclose) call the
# global-aware functions themselves.
_NOT_WRAPPED = {"randn", "rand", "randint", "zeros", "ones", "full", "empty", "tensor", "arange",
                "linspace", "manual_seed", "seed", "initial_seed", "from_numpy", "is_tensor",
                "normal", "as_tensor_like", "allclose"}


def install(flow):
    _EAGER_GLOBAL_FORMS.update(_eager_global_forms())
    _C.Tensor.to_global = _tensor_to_global
    _C.Tensor.is_global = property(lambda self: False)
    _C.Tensor.is_local = property(lambda self: True)
    _C.Tensor.backward = _backward
    from oneflowlike.nn.modules.module import Module

    Module.to_global = _module_to_global
    _gt.install_operators()
    from oneflowlike.ops import inplace

    for name, fn in inplace.TENSOR_METHODS.items():  # in place on global tensors too
        setattr(_gt.GlobalTensor, name, fn)
    flow.is_tensor = _is_tensor
    for name in ("randn", "rand", "randint", "normal", "zeros", "ones", "full", "empty", "tensor",
                 "arange", "linspace"):
        setattr(flow, name, _with_placement(getattr(flow, name)))
    from oneflowlike import ops
    from oneflowlike.nn import functional

    # A local tensor's methods and operators with a global operand (x * g, x.matmul(g)) run as
    # the global op too: inside a trace that captures g, eagerly it refuses the local tensor.
    for module in ops._modules:
        for name, fn in getattr(module, "TENSOR_METHODS", {}).items():
            if callable(fn) and not isinstance(fn, property) and name not in _NOT_OPS:
                setattr(_C.Tensor, name, _global_aware(fn, f"Tensor.{name}"))

    for name in ops.__all__:
        if name not in _NOT_WRAPPED and callable(getattr(flow, name, None)):
            setattr(flow, name, _global_aware(getattr(flow, name), name))
    for name, fn in list(vars(functional).items()):
        if callable(fn) and not name.startswith("_") and not isinstance(fn, type):
            setattr(functional, name, _global_aware(fn, "F." + name))
