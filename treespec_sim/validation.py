r"""Argument checks written once: arrays from real models, log-probabilities, budgets, tokens.

Inputs as real models give them
-------------------------------
Every array argument (drafter log-probabilities, target rows, proposals) may be a numpy array, a
nested list or a torch tensor of any float dtype (``bfloat16`` and ``float16`` included, on any
device). :func:`as_float_array` converts it once: ``float64`` and ``float32`` stay as they are
(``float32`` is the precision DDTree's reference ranks the drafter's log-softmax in, and keeping
it avoids a 3x slower selection), every other dtype becomes ``float64``.

Sums are checked against a tolerance suited to the *input* dtype
(:data:`ROW_SUM_TOL_BY_DTYPE`): a ``float32`` softmax over 32768 tokens sums to 1 within about
``1e-6`` (``1e-3`` is accepted, also for its ``.double()``), a ``bfloat16`` one within about
``1e-2`` (``3e-2`` accepted); a row that sums to 2 fails at every dtype.
Target rows that pass are renormalised in ``float64`` before use
(:func:`treespec_sim.rows.check_distribution_rows`). Drafter log-probabilities that pass are used
as given (no per-row shift: that would move DDTree's cross-depth ties away from the reference's);
rows that do not sum to 1 in probability -- raw or max-shifted logits -- are an error that says
how to normalise them, never a silently different tree.

Scalars
-------
Budgets (:func:`check_budget`: an integer ``>= 1``), counts (:func:`check_positive_int`,
:func:`check_nonnegative_int`), temperatures (:func:`check_temperature`: a finite real number
``>= 0``), root tokens, flags and generators are checked here and nowhere else: every public
entry point (``run_round``, the builders of :mod:`treespec_sim.policies`, ``verify``,
``expected_length``, ``make_world``, ...) and a sweep config's grids (``ddtree.budgets``, ...)
call the same function, so both refuse the same values with the same message, the argument's
name first. Nothing is rounded or coerced: ``16.7``, ``16.0``, ``True`` and ``"16"`` are not
budgets; numpy integers and floats are numbers.

Validation must not dominate the cost of a builder: the log-probability check reads the array
once for the row maxima (which also propagate NaN) and once for the rows' masses
(:mod:`treespec_sim.rowmass`: a compiled float32 ``exp`` with a stated error bound; a row within
that bound of the tolerance is decided by numpy's exact sum), without converting the array (no
``float64`` copy of a ``float32`` input). Every row's total mass is checked, at every size.
``clamp=False`` leaves tiny positive rounding in place for a caller that clamps the few values
it reads (the DDTree builder), instead of copying the array to clamp it.
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass

import numpy as np

from .rowmass import MASS_ERROR, row_masses

__all__ = [
    "LOGPROB_POSITIVE_TOL",
    "ROW_SUM_TOL_BY_DTYPE",
    "Interval",
    "as_float_array",
    "check_budget",
    "check_flag",
    "check_log_q",
    "check_log_q_shape",
    "check_log_qs",
    "check_masses",
    "check_nonnegative_int",
    "check_param",
    "check_positive_int",
    "check_real",
    "check_rng",
    "check_root_token",
    "check_root_tokens",
    "check_temperature",
    "check_tree",
    "checked_row_max",
    "is_index",
    "is_int",
    "is_number",
    "row_sum_tolerance",
]

#: Largest log-probability accepted as "not positive" (absorbs log-softmax rounding).
LOGPROB_POSITIVE_TOL = 1e-12

#: Tolerance on ``|sum(row) - 1|`` by the dtype the caller handed in. ``float32``: a softmax
#: over ~10^5 tokens accumulates ~1e-6 (worst case ~1e-3); ``float64`` gets the same, because a
#: float64 input is often a float32 softmax converted afterwards (``.double()``) and keeps its
#: error; 16-bit floats carry 8 (bfloat16) or 11 (float16) mantissa bits. Rows passing the check
#: are renormalised in float64, so the tolerance decides only what is accepted.
ROW_SUM_TOL_BY_DTYPE = {"float64": 1e-3, "float32": 1e-3, "float16": 3e-2, "bfloat16": 3e-2}
# numpy's dtype.name is computed in Python on every access: the hot path reads this instead
_FLOAT_NAMES = {"f": "float32", "d": "float64"}


def row_sum_tolerance(source_dtype: str) -> float:
    """The row-sum tolerance for an input of ``source_dtype`` (loosest for unknown dtypes)."""
    return ROW_SUM_TOL_BY_DTYPE.get(source_dtype, ROW_SUM_TOL_BY_DTYPE["float16"])


def as_float_array(x, name: str) -> tuple[np.ndarray, str]:
    """``(array, source dtype name)``: numpy, list or torch input as a float numpy array.

    ``float32``/``float64`` arrays are returned without a copy; torch tensors are detached and
    moved to the CPU (``bfloat16``/``float16`` as ``float64``, since numpy has no ``bfloat16``);
    integers and other floats become ``float64``.
    """
    if type(x) is np.ndarray and x.dtype.char in _FLOAT_NAMES:  # the builders' hot path
        return x, _FLOAT_NAMES[x.dtype.char]
    if type(x).__module__.split(".")[0] == "torch":  # a tensor; torch itself is not imported
        source = str(x.dtype).removeprefix("torch.")
        t = x.detach().cpu()
        if source not in ("float32", "float64"):
            if not (t.is_floating_point() or source.startswith(("int", "uint", "bool"))):
                raise ValueError(f"{name} must be a real float tensor; got dtype {x.dtype}")
            t = t.double()
        return t.numpy(), source
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a float array (numpy, list or torch); got "
                         f"{type(x).__name__}: {exc}") from None
    source = arr.dtype.name
    if arr.dtype in (np.float32, np.float64):
        return arr, source
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a float array; got dtype {arr.dtype}")
    return arr.astype(np.float64), source


def check_log_q(log_q, name: str = "log_q", *, check_sums: bool = True, clamp: bool = True
                ) -> tuple[np.ndarray, np.ndarray]:
    """Validate drafter log-probabilities; return ``(array, row_max)``.

    Parameters
    ----------
    log_q : array_like of float, shape (L, V)
        Log-probabilities at depths ``1..L`` (numpy, list or torch, any float dtype).
        ``-inf`` (probability 0) is allowed.
    check_sums : bool
        Check that every row sums to 1 in probability (within the input dtype's tolerance).
    clamp : bool
        Clamp entries in ``(0, LOGPROB_POSITIVE_TOL]`` to 0 (a copy of the array, only when
        such an entry exists). ``False`` returns the array as given; ``row_max`` is clamped
        either way, and the caller must clamp every value it uses.

    Returns
    -------
    lp : ndarray, shape (L, V)
        float32 or float64 (see the module docstring).
    row_max : ndarray of float64, shape (L,)

    Raises
    ------
    ValueError
        Wrong shape, NaN, positive (or ``+inf``) entries, a depth with no finite entry, or a
        row whose probabilities do not sum to 1 (logits instead of log-probabilities); the
        message names ``name`` and the offending ``[depth_index, token]``.
    """
    lp, source = as_float_array(log_q, name)
    check_log_q_shape(lp, name)
    row_max = checked_row_max(lp, name)
    if (row_max > 0).any():
        # Tiny positive rounding (within the tolerance) would let a child outscore its
        # parent; clamp it so path scores never increase with depth.
        if clamp:
            lp = np.minimum(lp, 0.0)
        row_max = np.minimum(row_max, 0.0)
    if check_sums:
        check_masses(lp, row_masses(np.ascontiguousarray(lp)), source, name)
    return lp, row_max


def check_log_qs(log_qs, name: str = "log_qs", *, check_sums: bool = True
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Validate a batch's drafter log-probabilities: one :func:`check_log_q` per request.

    Parameters
    ----------
    log_qs : sequence of array_like, each shape (L_i, V_i), or array_like, shape (b, L, V)
        Each request's log-probabilities at depths ``1..L_i`` (requests may differ in depth and
        vocabulary); at least one request.

    Returns
    -------
    list of (ndarray (L_i, V_i), ndarray (L_i,))
        ``(array, row_max)`` per request, as :func:`check_log_q` returns them.

    Raises
    ------
    ValueError
        An empty batch, something that is not a sequence, or a bad request (the message
        names ``log_qs[i]``).
    """
    if isinstance(log_qs, str | bytes) or not hasattr(log_qs, "__len__") \
            or not hasattr(log_qs, "__getitem__"):
        raise ValueError(f"{name} must be a sequence of (L, V) log-probability arrays, one per "
                         f"request; got {type(log_qs).__name__}")
    if len(log_qs) == 0:
        raise ValueError(f"{name} must hold at least one request's (L, V) log-probabilities; "
                         "got an empty batch")
    return [check_log_q(log_qs[i], f"{name}[{i}]", check_sums=check_sums)
            for i in range(len(log_qs))]


def check_root_tokens(root_tokens, vocab_sizes: list[int], name: str = "root_tokens"
                      ) -> list[int]:
    """A batch's root tokens: ``None`` (every root unknown, ``-1``) or one
    :func:`check_root_token` per request, as many as ``vocab_sizes``."""
    b = len(vocab_sizes)
    if root_tokens is None:
        return [-1] * b
    if isinstance(root_tokens, str | bytes) or not hasattr(root_tokens, "__len__"):
        raise ValueError(f"{name} must be None or a sequence of {b} token ids; got "
                         f"{type(root_tokens).__name__}")
    if len(root_tokens) != b:
        raise ValueError(f"{name} must hold one token per request ({b}); got "
                         f"{len(root_tokens)}")
    return [check_root_token(r, f"{name}[{i}]", vocab_size=v)
            for i, (r, v) in enumerate(zip(root_tokens, vocab_sizes, strict=True))]


def check_log_q_shape(lp: np.ndarray, name: str = "log_q") -> None:
    """Raise unless ``lp`` has shape ``(L, V)`` with ``L, V >= 1``."""
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise ValueError(f"{name} must have shape (L, V) with L, V >= 1; got {lp.shape}")


def checked_row_max(lp: np.ndarray, name: str = "log_q") -> np.ndarray:
    """The row maxima of ``(L, V)`` log-probabilities, float64 ``(L,)`` (not clamped); raises for
    a NaN, a positive entry beyond :data:`LOGPROB_POSITIVE_TOL` or a row without a finite entry,
    naming the first offending ``[depth_index, token]`` (numpy's maximum propagates NaN, so one
    read finds all three)."""
    row_max = lp.max(axis=1).astype(np.float64)
    bad = np.flatnonzero(~(row_max <= LOGPROB_POSITIVE_TOL))  # catches NaN and > tol
    if bad.size:
        d = int(bad[0])
        row = lp[d]
        if np.isnan(row_max[d]):
            t = int(np.flatnonzero(np.isnan(row))[0])
            raise ValueError(f"{name}[{d}, {t}] is NaN")
        t = int(np.argmax(row))
        raise ValueError(f"{name}[{d}, {t}] = {float(row[t])!r} is a positive log-probability "
                         "(logits? pass log_softmax(logits) instead)")
    dead = np.flatnonzero(np.isneginf(row_max))
    if dead.size:
        raise ValueError(f"{name}[{int(dead[0])}] has no finite entry (zero total probability)")
    return row_max


def check_masses(lp: np.ndarray, mass: np.ndarray, source: str, name: str = "log_q") -> None:
    """Raise unless every row of ``lp`` sums to 1 in probability within the tolerance for an input
    of dtype ``source``, given ``mass``, its rows' masses within
    :data:`~treespec_sim.rowmass.MASS_ERROR` (:func:`~treespec_sim.rowmass.row_masses`).

    A row within that error of the tolerance is decided by numpy's exact sum (``exp`` and the
    sum in the input's dtype); so is the error message's number.
    """
    tol = row_sum_tolerance(source)
    unclear = np.flatnonzero(~(np.abs(mass - 1.0) <= tol - MASS_ERROR * mass))
    for d in unclear.tolist():
        total = float(np.exp(lp[d]).sum(dtype=np.float64 if lp.dtype == np.float64 else None))
        if not abs(total - 1.0) <= tol:
            raise ValueError(
                f"{name}[{d}] sums to {total!r} in probability, not 1 (tolerance "
                f"{tol:g} for {source} input): pass log-probabilities, e.g. "
                "torch.log_softmax(logits, -1) or scipy.special.log_softmax(x, axis=1), not "
                "logits or max-shifted logits")


def _integer(value) -> bool:
    """A Python or numpy integer, not a bool (``True`` is an ``int`` to Python)."""
    if type(value) is int:  # the common case without the ABC check (a bool's type is bool)
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def is_int(value, *, numpy: bool = True) -> bool:
    """An integer, not a bool (``True`` is an ``int`` to Python): a Python or numpy integer,
    or with ``numpy=False`` a Python ``int`` only (a value read from JSON or TOML, which later
    goes back into JSON)."""
    if not numpy:
        return isinstance(value, int) and not isinstance(value, bool)
    return _integer(value)


def is_index(value) -> bool:
    """An integer as numpy's indexing reads one (``operator.index`` takes it: Python and
    numpy integers, 0-d integer arrays), not a bool."""
    if isinstance(value, bool | np.bool_):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def is_number(value, *, numpy: bool = True) -> bool:
    """A real number, not a bool: any :class:`numbers.Real`, or with ``numpy=False`` a Python
    ``int`` or ``float`` (``numpy.float64`` is a ``float``)."""
    if isinstance(value, bool | np.bool_):
        return False
    return isinstance(value, int | float) if not numpy else isinstance(value, numbers.Real)


@dataclass(frozen=True)
class Interval:
    """A declarative constraint on a number (in the style of scikit-learn's
    ``_param_validation``): its kind and bounds, checked by :func:`check_param`.

    Attributes
    ----------
    kind : {"int", "real"}
        ``"int"``: :func:`is_int`; ``"real"``: :func:`is_number` and finite.
    low, high : float, optional
        Bounds (``None``: unbounded).
    closed : {"both", "left", "right", "neither"}
        Which bounds belong to the interval.
    numpy : bool
        Accept numpy scalars (``False``: Python numbers only).
    """

    kind: str
    low: float | None = None
    high: float | None = None
    closed: str = "both"
    numpy: bool = True

    def __contains__(self, value) -> bool:
        if self.kind == "int":
            if not is_int(value, numpy=self.numpy):
                return False
        elif not (is_number(value, numpy=self.numpy) and math.isfinite(value)):
            return False
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is not None and (value < self.low or (value == self.low and not left)):
            return False
        return not (self.high is not None
                    and (value > self.high or (value == self.high and not right)))

    def describe(self) -> str:
        """``"an integer >= 1"``, ``"a number in [0, 1)"``, ... (integer bounds in full)."""
        what = "an integer" if self.kind == "int" else "a number"
        low, high = _bound_text(self.low), _bound_text(self.high)
        if self.low is not None and self.high is not None:
            lb = "[" if self.closed in ("both", "left") else "("
            rb = "]" if self.closed in ("both", "right") else ")"
            return f"{what} in {lb}{low}, {high}{rb}"
        if self.low is not None:
            return f"{what} {'>=' if self.closed in ('both', 'left') else '>'} {low}"
        if self.high is not None:
            return f"{what} {'<=' if self.closed in ('both', 'right') else '<'} {high}"
        return what


def _bound_text(x: float | None) -> str:
    """A bound as a message prints it: an integer in full, a float by ``:g``."""
    return str(int(x)) if _integer(x) else "" if x is None else f"{x:g}"


def check_param(value, name: str, constraint: Interval):
    """``value`` if it satisfies ``constraint``, else ``ValueError`` in the one format:
    ``"<name> must be <constraint.describe()>; got <value!r>"``."""
    if value not in constraint:
        raise ValueError(f"{name} must be {constraint.describe()}; got {value!r}")
    return value


def check_budget(budget, name: str = "budget") -> int:
    """A budget, the number of a tree's non-root nodes: an integer ``>= 1`` (numpy integers
    too) as a Python int. Bools, floats (``16.7`` and ``16.0`` alike) and strings are refused,
    never rounded: the API is as strict as a config's ``budgets``, with the same message.

    Raises
    ------
    ValueError
        ``"{name} must be a positive integer; got {budget!r}"``.
    """
    return check_positive_int(budget, name)


def check_positive_int(value, name: str) -> int:
    """An integer ``>= 1`` (numpy integers too, not a bool, a float or a string) as a Python
    int; ``ValueError`` naming ``name`` and the value otherwise."""
    if not _integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def check_nonnegative_int(value, name: str) -> int:
    """An integer ``>= 0`` (numpy integers too, not a bool, a float or a string) as a Python
    int: a seed, or a prefix of ``0`` nodes (the root alone)."""
    if not _integer(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value!r}")
    return int(value)


def check_flag(value, name: str) -> bool:
    """A bool (``numpy.bool_`` too) as a Python bool; ``ValueError`` naming ``name`` for
    anything else (``0``, ``"yes"``, ``None``)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_real(value, name: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    """A finite real number ``>= minimum`` (``> minimum`` with ``strict``) as a Python float:
    a cost in seconds, a rate, a margin (numpy numbers too; bools and strings refused)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number; got {value!r} "
                         f"({type(value).__name__})")
    x = float(value)
    if not math.isfinite(x) or x < minimum or (strict and x == minimum):
        raise ValueError(f"{name} must be finite and {'>' if strict else '>='} {minimum:g}; "
                         f"got {value!r}")
    return x


#: What a draft tree has (:class:`treespec_sim.tree.DraftTree`, which this module sits below):
#: its arrays, and the properties its class defines (looked up on the class: asking an
#: instance would compute them, and this check runs on every round).
_TREE_FIELDS = ("parent", "token", "depth")
_TREE_PROPERTIES = ("n_nodes", "child_lists", "levels")


def check_tree(tree, name: str = "tree"):
    """A draft tree (a :class:`~treespec_sim.tree.DraftTree`, read by its attributes: this
    module is below the tree's), returned as it is."""
    cls = type(tree)
    if not (all(hasattr(cls, a) for a in _TREE_PROPERTIES)
            and all(hasattr(tree, a) for a in _TREE_FIELDS)):
        raise ValueError(f"{name} must be a DraftTree (treespec_sim.DraftTree.from_parents); "
                         f"got {type(tree).__name__}")
    return tree


def check_rng(rng, name: str = "rng") -> np.random.Generator:
    """A ``numpy.random.Generator`` (every stochastic function takes one; no global state)."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"{name} must be a numpy.random.Generator; got {type(rng).__name__}")
    return rng


def check_root_token(root_token, name: str = "root_token", *, vocab_size: int | None = None
                     ) -> int:
    """An integer token id ``>= -1`` (``-1``: unknown), below ``vocab_size`` when given."""
    if not _integer(root_token):
        raise ValueError(f"{name} must be an integer >= -1; got {root_token!r}")
    if root_token < -1:
        raise ValueError(f"{name} must be >= -1 (-1 = unknown); got {root_token}")
    if vocab_size is not None and root_token >= vocab_size:
        raise ValueError(f"{name} = {root_token} is outside the vocabulary (V = {vocab_size})")
    return int(root_token)


def check_temperature(temperature, name: str = "temperature", *, positive: bool = False
                      ) -> float:
    """A sampling temperature as a Python float: a real number (not a string or a bool),
    finite and ``>= 0`` (``> 0`` with ``positive=True``); ``0`` means greedy decoding.

    Raises
    ------
    ValueError
        Naming ``name`` and the value, for anything else.
    """
    if isinstance(temperature, bool | np.bool_) or not isinstance(temperature, numbers.Real):
        raise ValueError(f"{name} must be a real number >= 0; got {temperature!r} "
                         f"({type(temperature).__name__})")
    t = float(temperature)
    if not math.isfinite(t) or t < 0 or (positive and t == 0):
        need = "> 0" if positive else ">= 0 (0 = greedy)"
        raise ValueError(f"{name} must be finite and {need}; got {temperature!r}")
    return t
