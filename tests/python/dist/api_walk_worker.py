"""Run by test_api_walk.py on 2 processes: walks the public API (every flow.* function, every
Tensor method and operator, every flow.nn.functional function) with a fixed list of argument
patterns, once with local tensors and once with global tensors laid out over both ranks.

What it asserts (issue 14, item 6):
- no message ever shows binding internals ("incompatible function arguments", "Invoked with",
  lazy-tensor wording for eager calls, Python's own AttributeError on our classes, ...);
- only the library's exception types come out;
- a call that works on local tensors works on global ones with the same values, or says in the
  library's words ("[op] ...") that it does not; those refusals are printed, so the README can
  list them.
Every rank walks the same calls in the same order (the global calls are collective).
"""

import inspect
import json
import sys

import numpy as np

import oneflowlike as flow

rank = flow.env.get_rank()
both = flow.placement("cpu", ranks=[0, 1])
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
_RNG = np.random.default_rng(0)
X = _RNG.standard_normal((4, 6)).astype(np.float32)
Y = _RNG.standard_normal((4, 6)).astype(np.float32)
W = _RNG.standard_normal((6, 4)).astype(np.float32)
I = _RNG.integers(0, 4, (4, 6)).astype(np.int64)
M = X > 0

# Texts that only come from the bindings or from Python tripping over our classes.
_INTERNAL = ("incompatible function arguments", "Invoked with", "Unable to cast", "pybind11",
             "'GlobalTensor' object", "not subscriptable", "'NoneType'", "_C.", "lazy tensor",
             "GraphTracer", "object has no attribute")
_ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError, KeyError,
            AttributeError, FileNotFoundError)
# Functions whose values are random: compared by shape only.
_RANDOM = {"dropout", "rand_like", "randn_like", "randint", "rand", "randn", "normal", "seed"}
# Not called: they change the process's state for the calls after them.
_SKIP = {"manual_seed", "seed", "save", "load"}
# Differ between a local and a global tensor by definition.
_KIND = {"is_global", "is_local", "to_global"}


def tensors(is_global):
    """Fresh operands each call (in-place methods write them)."""
    def make(array, sbp):
        if is_global:
            return flow.tensor(array, placement=both, sbp=sbp)
        return flow.tensor(array)

    return {"x": make(X, S0), "y": make(Y, B), "w": make(W, S1), "i": make(I, S1),
            "m": make(M, B), "s": make(np.float32(2.5), B)}


# (positional, keyword) argument patterns; strings name operands from tensors().
PATTERNS = [
    (["x"], {}), (["x", "y"], {}), (["x", 2], {}), (["x", 0.5], {}), (["x", 1], {}),
    (["x", -1], {}), (["x"], {"dim": 1}), (["x", 1, True], {}), ([["x", "y"]], {}),
    ([["x", "y"], 1], {}), (["x", (1, 0)], {}), (["x", (6, 4)], {}), (["x", 3, 8], {}),
    (["x", 0, 1, 2], {}), (["i"], {}), (["i", 4], {}), (["m", "x", "y"], {}),
    (["x", "m", 0.0], {}), (["ij->ji", "x"], {}), (["ij,jk->ik", "x", "w"], {}),
    (["x", "w"], {}), (["x", (0, slice(1, 3))], {}), (["x", "m", 1.0], {}), (["s"], {}),
    (["x", "y"], {"alpha": 2}), (["x"], {"min": -0.5, "max": 0.5}), (["i", "x"], {}),
    (["x", flow.float64], {}), (["x", (4,)], {}),
]


def resolve(value, operands):
    if isinstance(value, str) and value in operands:
        return operands[value]
    if isinstance(value, list):
        return [resolve(v, operands) for v in value]
    return value


def call(target, name, pattern, is_global):
    """(outcome, value): ("ok", result) or ("error", exception)."""
    operands = tensors(is_global)
    args = [resolve(a, operands) for a in pattern[0]]
    kwargs = {k: resolve(v, operands) for k, v in pattern[1].items()}
    try:
        if target == "method":
            if not args or not flow.is_tensor(args[0]):
                return "skip", None
            fn = getattr(args[0], name)
            result = fn(*args[1:], **kwargs) if callable(fn) else fn
        else:
            result = getattr(target, name)(*args, **kwargs)
        return "ok", result
    except _ALLOWED as e:
        return "error", e
    except Exception as e:  # noqa: BLE001 (reported as a failure below)
        return "error", e


def as_values(result):
    """The result as comparable values: arrays for tensors (gathered), nested."""
    if isinstance(result, (tuple, list)):
        return [as_values(r) for r in result]
    if flow.is_tensor(result):
        return result.numpy()
    if isinstance(result, (bool, int, float, str)) or result is None:
        return result
    if isinstance(result, (flow.dtype,)):
        return repr(result)
    return type(result).__name__


def same(a, b, name):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(p, q, name) for p, q in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape:
            return False
        if name in _RANDOM:
            return True
        if a.dtype.kind in "fc":
            return np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        return np.array_equal(a, b)
    return a == b


problems, refused, calls, compared = [], [], 0, 0
compared_names = set()


def check_error(where, e, is_global):
    message = str(e)
    if not isinstance(e, _ALLOWED):
        problems.append(f"{where}: {type(e).__name__}: {message[:300]}")
        return
    leaked = [t for t in _INTERNAL if t in message]
    if is_global is False:  # lazy wording is fine for calls that trace nothing only
        leaked = [t for t in leaked if t != "lazy tensor"]
    if leaked or (isinstance(e, AttributeError) and not message.startswith("[")):
        problems.append(f"{where}: {type(e).__name__} shows {leaked or 'Python internals'}: "
                        f"{message[:300]}")


def walk(target, label, names):
    global calls, compared
    for name in names:
        for k, pattern in enumerate(PATTERNS):
            where = f"{label}{name} pattern {k} {pattern}"
            local = call(target, name, pattern, False)
            if local[0] == "skip":
                continue
            calls += 1
            if local[0] == "error":
                check_error(where + " (local)", local[1], False)
            remote = call(target, name, pattern, True)
            if remote[0] == "error":
                check_error(where + " (global)", remote[1], True)
                if local[0] == "ok":
                    message = str(remote[1])
                    if not message.startswith("["):
                        problems.append(f"{where}: works locally, and on global tensors fails "
                                        f"without saying why in the library's words: "
                                        f"{type(remote[1]).__name__}: {message[:300]}")
                    else:
                        refused.append(f"{label}{name}: {message.splitlines()[0][:160]}")
            elif local[0] == "ok" and name not in _KIND:
                compared += 1
                compared_names.add(label + name)
                a, b = as_values(local[1]), as_values(remote[1])
                if not same(a, b, name):
                    problems.append(f"{where}: global result differs from local: {b!r:.200} vs "
                                    f"{a!r:.200}")


def public_functions(module):
    return sorted(n for n in dir(module) if not n.startswith("_") and n not in _SKIP
                  and callable(getattr(module, n)) and not inspect.isclass(getattr(module, n))
                  and not inspect.ismodule(getattr(module, n)))


OPERATORS = ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
             "__rtruediv__", "__matmul__", "__pow__", "__rpow__", "__neg__", "__abs__",
             "__getitem__", "__setitem__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
             "__ge__", "__len__", "__float__", "__bool__"]
methods = sorted(n for n in dir(flow.Tensor) if not n.startswith("_")) + OPERATORS

walk(flow, "flow.", public_functions(flow))
walk("method", "Tensor.", methods)
walk(flow.nn.functional, "F.", public_functions(flow.nn.functional))
summary = {"rank": rank, "calls": calls, "compared": compared, "problems": problems,
           "refused": sorted(set(refused)), "compared_names": sorted(compared_names)}
print("WALK " + json.dumps(summary), flush=True)
sys.exit(1 if problems else 0)
