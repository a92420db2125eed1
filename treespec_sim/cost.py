r"""Latency models: seconds per round for a draft tree of a given size.

One round costs a draft forward plus one verification forward over the root and the tree's
``B`` nodes:

.. math:: D(B) = C_d(\ell) + C_v(B + 1, \ell),

where :math:`\ell` is the context length. Every model here implements :class:`LatencyModel`
(``draft_cost``, ``verify_cost``, ``to_dict``) and round-trips through JSON
(:func:`cost_model_from_dict`, :func:`load_cost_model`, :meth:`save`). Token counts always
include the root: a tree of ``B`` nodes is verified with ``verify_cost(B + 1)``. (CaDDTree's
reference code looks its fit up with the non-root count; ``docs/theory/caddtree.md`` §1 records
that off-by-one; it is not reproduced here.)

Models
------
:class:`RooflineCost`
    max of two lines: a memory-bound floor with a small slope, then a compute-bound slope past the
    knee (BASTION's calibrated roofline, CaDDTree's measured shape). Convex.
:class:`PiecewiseLinearCost`
    linear interpolation between knots, extended linearly past the last one. Convex iff the
    slopes do not decrease (:attr:`is_convex`).
:class:`TabulatedCost`
    measured medians per context length, optionally replaced by their monotone + convex
    least-squares fit (:func:`fit_monotone_convex`: NNLS with scipy, equal to the cvxpy fit
    CaDDTree's ``cost_model.py`` uses, which the tests keep as a cross-check), interpolated
    linearly across context lengths (clamped outside the measured range, and
    :meth:`TabulatedCost.context_note` says so) and extended linearly past the last measurement.
:class:`TiledCost`
    cost jumps at every multiple of a tile size (GEMM tiles, kernel switches): not convex; the
    model where CaDDTree's greedy stop can be a strict local maximum.

Measured range
--------------
A :class:`TabulatedCost` knows the token counts and context lengths it was measured on, a
:class:`PiecewiseLinearCost` the span of its knots; roofline and tiled models are formulas
with no measured range. Asked to price outside that range (past the last token count it
extends the last slope; outside the measured contexts it clamps), such a model says so: an
:class:`ExtrapolationWarning` once per model and axis (``"tokens"``, ``"context"``), and every
such request in a :func:`record_extrapolation` block is logged with the requested and the
measured range (the sweep keeps that log per cell). No price changes.

Batches
-------
One verification pass over ``b`` requests reads the target's weights once, each request's KV
cache once, and computes over the total query tokens :math:`n = \sum_i (B_i + 1)`; the drafter
runs one forward for the batch. A :class:`BatchLatencyModel` prices that
(``batch_draft_cost(contexts)``, ``batch_verify_cost(n, contexts)``, one context length per
request) and :func:`batch_costs` hands a batch's :math:`(C_d, C_v)` to
:func:`treespec_sim.policies.batch_caddtree`:

:class:`BatchRooflineCost`
    the roofline of one pass: a fixed overhead plus the larger of the memory time (weights once,
    every request's cache) and the compute time (every query token, its attention over its
    context); convex in ``n``. The ``*-batch`` presets are datasheet estimates.
:class:`BatchTabulatedCost`
    measured tables, one :class:`TabulatedCost` per batch size over the pass's total query
    tokens (latency files ``treespec-latency/2``; ``real_models.profile --batch-sizes``).

Every other model prices batch 1 only (a ``treespec-latency/1`` file reads as batch 1).

Presets (:data:`PRESETS`, :func:`get_cost_model`): the measured A800 / HF-transformers profiles
for Qwen3-4B and Qwen3-8B from the CaDDTree release (data files in ``treespec_sim/data/latency``,
with attribution), and H100/H200 roofline estimates (``docs/theory/caddtree.md``, "The H100/H200
estimates"), marked ``estimate=True``; and the batched roofline estimates ``{a800,h100,h200}-
qwen3-{4b,8b}-batch`` from the GPUs' datasheets and the models' published shapes
(``docs/usage.md``, "Batched costs").
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .files import read_json
from .validation import check_positive_int

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "GPU_DATASHEETS",
    "PRESETS",
    "QWEN3_SHAPES",
    "ROOFLINE_ASSUMPTIONS",
    "BatchLatencyModel",
    "BatchRooflineCost",
    "BatchTabulatedCost",
    "ExtrapolationLog",
    "ExtrapolationWarning",
    "LatencyModel",
    "PiecewiseLinearCost",
    "RooflineCost",
    "TabulatedCost",
    "TiledCost",
    "VerifyCost",
    "batch_costs",
    "batch_sizes",
    "cost_model_from_dict",
    "fit_monotone_convex",
    "get_cost_model",
    "load_cost_model",
    "record_extrapolation",
    "round_cost",
    "round_time",
    "save_cost_model",
]

#: ``verify_cost(n_tokens) -> seconds`` at one context length: what a cost-aware policy is
#: handed (an int or an int array of query-token counts, root included, in; a float or a
#: float array of the same shape out).
VerifyCost = Callable[[int | np.ndarray], float | np.ndarray]

#: Context length used when a caller does not give one (tokens; a mid-length chat turn).
DEFAULT_CONTEXT_LENGTH = 1024

#: Identifies latency files written by this package (batch 1).
SCHEMA = "treespec-latency/1"
#: Latency files with a batch axis: a table per batch size (:class:`BatchTabulatedCost`) or a
#: :class:`BatchRooflineCost`. Files of :data:`SCHEMA` still read, as batch 1.
SCHEMA_BATCH = "treespec-latency/2"

#: Slack for monotonicity/convexity checks on measured tables (seconds; the released fits are
#: rounded to 1e-9 s, which makes some second differences -1e-9).
_SHAPE_TOL = 1e-8


@runtime_checkable
class LatencyModel(Protocol):
    """What a cost-aware policy needs: seconds for a draft and for a verification forward."""

    name: str
    provenance: str
    estimate: bool

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        """Seconds for one drafter forward (independent of the tree size)."""
        ...

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        """Seconds for one verification forward over ``n_tokens`` query tokens (root included);
        ``n_tokens`` may be an int or an int array."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description that :func:`cost_model_from_dict` reads back."""
        ...


def describe(model: LatencyModel) -> str:
    """One line: a latency model's class, name, provenance, and what it covers."""
    kind = type(model).__name__
    if isinstance(model, TabulatedCost):
        extent = (f"{model.node_counts[0]}..{model.node_counts[-1]} tokens at contexts "
                  f"{list(model.context_lengths)}")
    elif isinstance(model, PiecewiseLinearCost):
        extent = f"{len(model.tokens)} knots {model.tokens[0]:g}..{model.tokens[-1]:g} tokens"
    elif isinstance(model, BatchTabulatedCost):
        extent = f"batch sizes {list(model.batch_sizes)}"
    else:
        extent = ""
    prov = str(model.provenance)
    prov = prov if len(prov) <= 60 else prov[:59].rstrip() + "…"
    parts = [f"name={getattr(model, 'name', '?')!r}", f"provenance={prov!r}"]
    if extent:
        parts.append(extent)
    parts.append(f"draft {1e3 * float(model.draft_cost()):.3g} ms, verify(1) "
                 f"{1e3 * float(model.verify_cost(1)):.3g} ms")
    parts.append("estimate" if model.estimate else "measured")
    return f"{kind}({', '.join(parts)})"


class ExtrapolationWarning(UserWarning):
    """A latency model was asked to price a request outside the range it was measured on.

    Issued at most once per model instance and axis (``"tokens"``: query tokens per
    verification forward; ``"context"``: the context length; ``"batch"``: the batch size), so
    a policy that prices every budget up to 1024 on a table measured to 512 gets one line, not
    one per node. Every such request is still logged by :func:`record_extrapolation`.
    """


@dataclass
class ExtrapolationLog:
    """The requests outside a model's measured range made inside one
    :func:`record_extrapolation` block.

    Attributes
    ----------
    entries : dict
        ``(model name, model kind, axis, measured range) -> [lowest, highest]`` requested value
        among the requests that left the range (each request's own extremes, merged).
    """

    entries: dict[tuple, list[float]] = field(default_factory=dict)

    def add(self, model: LatencyModel, axis: str, low: float, high: float,
            measured: tuple[float, float]) -> None:
        key = (str(getattr(model, "name", "?")), type(model).__name__, axis,
               (float(measured[0]), float(measured[1])))
        got = self.entries.get(key)
        if got is None:
            self.entries[key] = [low, high]
        else:
            got[0], got[1] = min(got[0], low), max(got[1], high)

    def records(self) -> list[dict]:
        """One JSON-ready dict per (model, axis): ``model``, ``kind``, ``axis``, ``requested``
        and ``measured`` (``[low, high]`` each), ``action`` (what the model did outside)."""
        out = []
        for (name, kind, axis, measured), (low, high) in self.entries.items():
            if axis == "context":
                action = "clamped to the nearest measured context"
            elif axis == "batch":
                action = "clamped to the nearest measured batch size"
            else:
                action = "; ".join(
                    [*(["below: the first measured cost (clamped)"] if low < measured[0]
                       else []),
                     *(["above: the last measured slope extended"] if high > measured[1]
                       else [])])
            out.append({"model": name, "kind": kind, "axis": axis,
                        "requested": [_plain(low), _plain(high)],
                        "measured": [_plain(measured[0]), _plain(measured[1])],
                        "action": action})
        return out


def _plain(x: float) -> int | float:
    """``x`` as an int when it is one (token counts and context lengths read better so)."""
    return int(x) if float(x).is_integer() else float(x)


# The logs of the record_extrapolation blocks open in this thread or task (innermost last).
_LOGS: contextvars.ContextVar[tuple[ExtrapolationLog, ...]] = contextvars.ContextVar(
    "treespec_extrapolation_logs", default=())


@contextlib.contextmanager
def record_extrapolation() -> Iterator[ExtrapolationLog]:
    """Log every request a latency model prices outside its measured range in this block.

    The log lives in a context variable, so blocks in different threads (dask workers run
    cells in threads) or nested blocks each see their own requests; warnings are unaffected
    (:class:`ExtrapolationWarning`).

    Yields
    ------
    ExtrapolationLog
        Filled as the block runs; :meth:`ExtrapolationLog.records` gives the JSON form.

    Examples
    --------
    >>> with record_extrapolation() as log:
    ...     get_cost_model("a800-qwen3-8b").verify_cost(1025)   # doctest: +SKIP
    >>> log.records()[0]["requested"]                           # doctest: +SKIP
    [1025, 1025]
    """
    log = ExtrapolationLog()
    token = _LOGS.set((*_LOGS.get(), log))
    try:
        yield log
    finally:
        _LOGS.reset(token)


def _request_range(n: np.ndarray) -> tuple[float, float] | None:
    """Lowest and highest value of a checked token array (None if it is empty)."""
    if n.ndim == 0:
        v = float(n)
        return v, v
    if n.size == 0:
        return None
    return float(n.min()), float(n.max())


def _outside(model: LatencyModel, axis: str, request: tuple[float, float] | None,
             measured: tuple[float, float]) -> None:
    """Log and (once per model and axis) warn if ``request`` leaves the ``measured`` range."""
    if request is None:
        return
    low, high = request
    if low >= measured[0] and high <= measured[1]:
        return
    for log in _LOGS.get():
        log.add(model, axis, low, high, measured)
    # Not a dataclass field: frozen models stay hashable and equal to their JSON round trip;
    # this only remembers which axes have been warned about.
    warned = model.__dict__.setdefault("_extrapolation_warned", set())
    if axis in warned:
        return
    warned.add(axis)
    lo, hi = _plain(measured[0]), _plain(measured[1])
    if axis == "context":
        what = (f"context length {_plain(low if low < measured[0] else high)} is outside the "
                f"measured range [{lo}, {hi}]; the nearest measured curve is used (clamped)")
    elif axis == "batch":
        what = (f"batch size {_plain(low if low < measured[0] else high)} is outside the "
                f"measured batch sizes [{lo}, {hi}]; the nearest measured table is used "
                "(clamped)")
    else:
        asked = _plain(high if high > measured[1] else low)
        how = ("extended with the last measured slope" if high > measured[1]
               else "the first measured cost is used (clamped)")
        what = (f"asked to price {asked} query tokens, outside the measured range "
                f"[{lo}, {hi}] tokens; {how}")
    warnings.warn(f"latency model {model.name!r} ({type(model).__name__}): {what} (said once "
                  "per model and axis)", ExtrapolationWarning, stacklevel=3)


def _context_ignored(model: LatencyModel) -> None:
    # A model without a context axis answers the same at every context length; say so once.
    warnings.warn(f"latency model {model.name!r} ({type(model).__name__}) has no context axis: "
                  "the context length is ignored", UserWarning, stacklevel=3)


def round_cost(draft_cost: float, verify_cost: VerifyCost, budget: int | np.ndarray, *,
               batch_size: int = 1) -> float | np.ndarray:
    r"""Seconds for one round with ``budget`` tree nodes, :math:`D(B) = C_d + C_v(B + 1)`.

    The one place the round cost is written: a draft forward plus one verification forward
    over the root and the ``B`` nodes (``docs/theory/caddtree.md``). For a batch of ``b``
    requests, ``budget`` counts the nodes of all their trees and every request's root is
    verified too: :math:`D = C_d + C_v(B + b)` (``docs/theory/batch_caddtree.md``).

    Parameters
    ----------
    draft_cost : float
        :math:`C_d`, seconds per drafter forward (the batch's, for a batch).
    verify_cost : callable
        ``verify_cost(n_tokens) -> seconds`` for ``n_tokens`` query tokens, roots included;
        called once, with ``budget + batch_size`` (an int array when ``budget`` is one).
    budget : int or array_like of int, shape (k,)
        Tree nodes, roots excluded (summed over the batch's trees).
    batch_size : int, default 1
        Requests verified in the pass (one root each).

    Returns
    -------
    float or ndarray, shape (k,)
        :math:`D(B)` for each budget.
    """
    return draft_cost + verify_cost(np.asarray(budget) + batch_size)


def round_time(model: LatencyModel, budget: int | np.ndarray,
               context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
    r"""Seconds for one round with ``budget`` tree nodes under a latency model at
    ``context_length``: :func:`round_cost` with :math:`C_d(\ell)` and :math:`C_v(\cdot, \ell)`."""
    return round_cost(model.draft_cost(context_length),
                      lambda n: model.verify_cost(n, context_length), budget)


# ------------------------------------------------------------------------------ validation
def _positive_float(x, name: str, *, allow_zero: bool = True) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {x!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        kind = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {kind}; got {x!r}")
    return v


def _tokens(n_tokens) -> np.ndarray:
    n = np.asarray(n_tokens, dtype=np.float64)
    if not np.all(np.isfinite(n)) or np.any(n < 0):
        raise ValueError(f"n_tokens must be finite and >= 0; got {n_tokens!r}")
    return n


def _context(context_length) -> float:
    return _positive_float(context_length, "context_length")


def _scalar_or_array(x: np.ndarray, like) -> float | np.ndarray:
    return float(x) if np.ndim(like) == 0 else x


def _check_curve(tokens: np.ndarray, seconds: np.ndarray, name: str, *, convex: bool) -> None:
    """Raise if a measured curve is not non-decreasing (and, if asked, convex)."""
    slopes = np.diff(seconds) / np.diff(tokens)
    bad = np.flatnonzero(np.diff(seconds) < -_SHAPE_TOL)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name}: verification cost decreases from {seconds[i]:.6g} s at {tokens[i]:g} "
            f"tokens to {seconds[i + 1]:.6g} s at {tokens[i + 1]:g}; costs must be "
            "non-decreasing (fit them with fit_monotone_convex, or pass fit=True)")
    if convex:
        # seconds are rounded to ~1e-9: a slope over a gap g carries an error of order 1e-9 / g
        bad = np.flatnonzero(np.diff(slopes) < -_SHAPE_TOL / float(np.diff(tokens).min()))
        if bad.size:
            i = int(bad[0]) + 1
            raise ValueError(f"{name}: the cost's slope decreases at {tokens[i]:g} tokens; "
                             "a convex model needs non-decreasing slopes")


# ------------------------------------------------------------------------------- roofline
@dataclass(frozen=True)
class RooflineCost:
    r"""Max of two lines: a memory floor with a small slope, then a compute slope.

    .. math::
        C_v(n) = t_0 + s_{lo}(n - 1) + (s_{hi} - s_{lo})\,(n - n_0)_+
               = \max\bigl(t_0 + s_{lo}(n-1),\; t_0 + s_{lo}(n_0 - 1) + s_{hi}(n - n_0)\bigr)

    for :math:`s_{hi} \ge s_{lo}` (then it is convex). ``n`` counts query tokens, root included;
    ``C_v(0) = C_v(1)``. The context length enters through an optional attention term
    :math:`s_{ctx}\,\ell\,n` (a materialised tree mask reads the cache once per query token),
    which keeps the model convex in ``n``.

    Parameters
    ----------
    floor_s : float
        :math:`t_0 = C_v(1)` at context 0, seconds.
    floor_slope_s, compute_slope_s : float
        :math:`s_{lo}` and :math:`s_{hi}`, seconds per extra token.
    knee_tokens : float
        :math:`n_0`, where the compute slope takes over.
    draft_s : float
        Drafter forward, seconds (one pass gives every depth's marginal).
    context_slope_s : float
        :math:`s_{ctx}`, seconds per (query token x context token); default 0.
    """

    floor_s: float
    floor_slope_s: float
    knee_tokens: float
    compute_slope_s: float
    draft_s: float
    context_slope_s: float = 0.0
    name: str = "roofline"
    provenance: str = "user-defined"
    estimate: bool = True

    def __post_init__(self) -> None:
        _positive_float(self.floor_s, "floor_s", allow_zero=False)
        lo = _positive_float(self.floor_slope_s, "floor_slope_s")
        hi = _positive_float(self.compute_slope_s, "compute_slope_s")
        if _positive_float(self.knee_tokens, "knee_tokens") < 1:
            raise ValueError(f"knee_tokens must be >= 1; got {self.knee_tokens!r}")
        _positive_float(self.draft_s, "draft_s")
        _positive_float(self.context_slope_s, "context_slope_s")
        if hi < lo:
            raise ValueError(f"compute_slope_s ({hi}) must be >= floor_slope_s ({lo}): "
                             "a roofline's compute line is the steeper one")

    def __repr__(self) -> str:
        return describe(self)

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        _context(context_length)
        return float(self.draft_s)

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        n = np.maximum(_tokens(n_tokens), 1.0)
        ell = _context(context_length)
        t = (self.floor_s + self.floor_slope_s * (n - 1)
             + (self.compute_slope_s - self.floor_slope_s) * np.maximum(n - self.knee_tokens, 0)
             + self.context_slope_s * ell * n)
        return _scalar_or_array(t, n_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "cost_model": "roofline", **asdict(self)}


# ------------------------------------------------------------------------ piecewise linear
@dataclass(frozen=True)
class PiecewiseLinearCost:
    """Verification cost by linear interpolation between knots ``(tokens, seconds)``.

    Below the first knot the first value holds; past the last knot the last segment's slope
    continues (either way an :class:`ExtrapolationWarning`, once per model, and an entry in
    :func:`record_extrapolation`'s log). Context length is ignored (use :class:`TabulatedCost`
    for context-dependent measurements).

    Parameters
    ----------
    tokens : sequence of float, shape (K,)
        Strictly increasing token counts, ``K >= 1``.
    seconds : sequence of float, shape (K,)
        Non-negative, non-decreasing costs.
    draft_s : float
        Drafter forward, seconds.
    """

    tokens: tuple[float, ...]
    seconds: tuple[float, ...]
    draft_s: float
    name: str = "piecewise"
    provenance: str = "user-defined"
    estimate: bool = True

    def __post_init__(self) -> None:
        t = np.asarray(self.tokens, dtype=np.float64)
        s = np.asarray(self.seconds, dtype=np.float64)
        if t.ndim != 1 or t.size == 0 or s.shape != t.shape:
            raise ValueError("tokens and seconds must be non-empty 1-D sequences of equal length; "
                             f"got {t.shape} and {s.shape}")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(s))) or np.any(s < 0):
            raise ValueError("seconds must be finite and >= 0, tokens finite")
        if np.any(np.diff(t) <= 0):
            raise ValueError(f"tokens must be strictly increasing; got {self.tokens}")
        _check_curve(t, s, "seconds", convex=False)
        _positive_float(self.draft_s, "draft_s")
        object.__setattr__(self, "tokens", tuple(float(x) for x in t))
        object.__setattr__(self, "seconds", tuple(float(x) for x in s))

    @property
    def is_convex(self) -> bool:
        """Whether the slopes never decrease (CaDDTree's unimodality needs it)."""
        t, s = np.asarray(self.tokens), np.asarray(self.seconds)
        if t.size < 3:
            return True
        tol = _SHAPE_TOL / float(np.diff(t).min())
        return bool(np.all(np.diff(np.diff(s) / np.diff(t)) >= -tol))

    def __repr__(self) -> str:
        return describe(self)

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        _context(context_length)
        return float(self.draft_s)

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        if _context(context_length) != DEFAULT_CONTEXT_LENGTH:
            _context_ignored(self)
        n = _tokens(n_tokens)
        _outside(self, "tokens", _request_range(n), (self.tokens[0], self.tokens[-1]))
        return _scalar_or_array(_interp_extend(n, np.asarray(self.tokens),
                                               np.asarray(self.seconds)), n_tokens)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"], d["seconds"] = list(self.tokens), list(self.seconds)
        return {"schema": SCHEMA, "cost_model": "piecewise", **d}


def _interp_extend(n: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``np.interp`` clamped below, extended with the last slope above the last knot."""
    out = np.interp(n, xs, ys)
    if xs.size >= 2:
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        out = np.where(n > xs[-1], ys[-1] + slope * (n - xs[-1]), out)
    return out


# ------------------------------------------------------------------------------ tabulated
def fit_monotone_convex(tokens, seconds) -> np.ndarray:
    r"""Least-squares fit of measured costs by a non-decreasing convex sequence.

    .. math::
        \min_f \|f - t\|_2^2 \quad\text{s.t.}\quad f_{i+1} \ge f_i,\quad
        \frac{f_{i+2} - f_{i+1}}{n_{i+2} - n_{i+1}} \ge \frac{f_{i+1} - f_i}{n_{i+1} - n_i}.

    This is the fit of CaDDTree's ``cost_model.py`` (arXiv 2606.01813), written for uneven
    token spacing, and solved without an optional solver: every non-decreasing convex sequence
    on the knots :math:`n_0 < \dots < n_{K-1}` is

    .. math:: f_i = a + \sum_{k=0}^{K-2} d_k\,(n_i - n_k)_+, \qquad d_k \ge 0,\ a \in \mathbb R

    (:math:`d_0` is the first slope and :math:`d_k`, :math:`k \ge 1`, the slope increase at
    :math:`n_k`), and conversely. The free offset :math:`a` is eliminated by centring, which
    leaves a non-negative least-squares problem in :math:`d` (:func:`scipy.optimize.nnls`,
    an exact active-set method). The tests check it against the cvxpy formulation.

    Parameters
    ----------
    tokens : array_like, shape (K,)
        Strictly increasing token counts.
    seconds : array_like, shape (K,)
        Measured (median) costs.

    Returns
    -------
    ndarray, shape (K,)
        The fitted costs (float64, clipped at 0).

    Raises
    ------
    ValueError
        Empty, mismatched, non-finite or negative input, or tokens not strictly increasing.
    RuntimeError
        If the non-negative least-squares solver fails.
    """
    n = np.asarray(tokens, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.ndim != 1 or n.size == 0 or t.shape != n.shape:
        raise ValueError("tokens and seconds must be non-empty 1-D arrays of equal length; "
                         f"got {n.shape} and {t.shape}")
    if not (np.all(np.isfinite(n)) and np.all(np.isfinite(t))) or np.any(t < 0):
        raise ValueError("seconds must be finite and >= 0 (and tokens finite)")
    if np.any(np.diff(n) <= 0):
        raise ValueError("tokens must be strictly increasing")
    if n.size < 2:
        return t.copy()
    return _nnls_monotone_convex(n, t)


def _nnls_monotone_convex(n: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The fit of :func:`fit_monotone_convex` on checked float64 arrays of size >= 2."""
    from scipy.optimize import nnls

    # Work in units where both axes are O(1): tokens relative to their span, costs relative
    # to their largest value (the fit is equivariant under both scalings).
    t_scale = float(np.max(t)) or 1.0
    y = t / t_scale
    x = (n - n[0]) / (n[-1] - n[0])
    # column k: the hinge (x - x_k)_+ of the slope increase at knot k (k = 0: the first slope)
    hinge = np.maximum(x[:, None] - x[None, :-1], 0.0)
    # eliminate the free offset a: centre the columns and the data, a = mean(y - hinge @ d)
    hc = hinge - hinge.mean(axis=0)
    yc = y - y.mean()
    # scale columns to unit norm (an equivalent problem; better conditioned)
    norms = np.linalg.norm(hc, axis=0)
    norms[norms == 0] = 1.0
    try:
        d, _ = nnls(hc / norms, yc, maxiter=50 * hinge.shape[1])
    except RuntimeError as exc:  # pragma: no cover - active-set iteration limit
        raise RuntimeError(f"monotone-convex fit failed: {exc}") from None
    d = d / norms
    g = hinge @ d
    fitted = (g + (y - g).mean()) * t_scale
    # Remove rounding so the result passes exact shape checks.
    return np.maximum.accumulate(np.maximum(fitted, 0.0))


@dataclass(frozen=True)
class TabulatedCost:
    r"""Measured verification costs per context length, interpolated.

    ``verify_s[c][i]`` is the cost of a forward with ``node_counts[i]`` query tokens at context
    length ``context_lengths[c]``. Between measured token counts the curve is linear; past the
    last one it continues with the last slope (CaDDTree's extrapolation); at context lengths in
    between, the two nearest curves are mixed linearly; outside the measured contexts the nearest
    curve is used (clamped; :meth:`context_note` reports it). Convex curves stay convex under
    both interpolations. A request outside the measured token counts or contexts issues an
    :class:`ExtrapolationWarning` (once per model and axis) and is logged by
    :func:`record_extrapolation`.

    Parameters
    ----------
    node_counts : sequence of int, shape (N,)
        Strictly increasing query-token counts (root included).
    context_lengths : sequence of int, shape (C,)
        Strictly increasing context lengths.
    verify_s : sequence of sequences, shape (C, N)
        Seconds; each row non-decreasing.
    draft_s : float
        Drafter forward, seconds (measured at one context length; held constant, as CaDDTree).
    require_convex : bool
        Reject rows that are not convex (default True: the policies' guarantees need it).
    """

    node_counts: tuple[int, ...]
    context_lengths: tuple[int, ...]
    verify_s: tuple[tuple[float, ...], ...]
    draft_s: float
    name: str = "tabulated"
    provenance: str = "user-defined"
    estimate: bool = False
    require_convex: bool = True
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        n = np.asarray(self.node_counts, dtype=np.float64)
        c = np.asarray(self.context_lengths, dtype=np.float64)
        v = np.asarray(self.verify_s, dtype=np.float64)
        if n.ndim != 1 or n.size == 0:
            raise ValueError("node_counts must be a non-empty 1-D sequence; the measurement "
                             "table is empty")
        if c.ndim != 1 or c.size == 0:
            raise ValueError("context_lengths must be a non-empty 1-D sequence")
        if v.shape != (c.size, n.size):
            raise ValueError(f"verify_s must have shape (len(context_lengths), len(node_counts))"
                             f" = ({c.size}, {n.size}); got {v.shape}")
        if np.any(np.diff(n) <= 0) or np.any(n < 0):
            raise ValueError("node_counts must be non-negative and strictly increasing")
        if np.any(np.diff(c) <= 0) or np.any(c < 0):
            raise ValueError("context_lengths must be non-negative and strictly increasing")
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError("verify_s must be finite and >= 0")
        for ci, row in zip(self.context_lengths, v, strict=True):
            _check_curve(n, row, f"verify_s at context {ci}", convex=self.require_convex)
        _positive_float(self.draft_s, "draft_s")
        object.__setattr__(self, "node_counts", tuple(int(x) for x in n))
        object.__setattr__(self, "context_lengths", tuple(int(x) for x in c))
        object.__setattr__(self, "verify_s", tuple(tuple(float(x) for x in r) for r in v))

    @classmethod
    def from_measurements(cls, node_counts, context_lengths, verify_s, draft_s: float, *,
                          fit: bool = True, **kwargs) -> TabulatedCost:
        """Build from raw medians; ``fit=True`` replaces each row by its monotone-convex fit."""
        rows = np.asarray(verify_s, dtype=np.float64)
        if rows.size == 0:
            raise ValueError("verify_s: the measurement table is empty")
        if rows.ndim == 1:
            rows = rows[None, :]
        if fit:
            rows = np.stack([fit_monotone_convex(node_counts, r) for r in rows])
        return cls(tuple(node_counts), tuple(context_lengths), tuple(map(tuple, rows)),
                   draft_s, **kwargs)

    @property
    def is_convex(self) -> bool:
        n = np.asarray(self.node_counts, dtype=np.float64)
        try:
            for row in self.verify_s:
                _check_curve(n, np.asarray(row), "row", convex=True)
        except ValueError:
            return False
        return True

    def context_note(self, context_length: float) -> str | None:
        """A sentence for the run record if ``context_length`` lies outside the measurements."""
        lo, hi = self.context_lengths[0], self.context_lengths[-1]
        if context_length < lo or context_length > hi:
            return (f"{self.name}: context length {context_length:g} is outside the measured "
                    f"range [{lo}, {hi}]; the nearest measured curve is used (clamped)")
        return None

    def __repr__(self) -> str:
        return describe(self)

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        _context(context_length)
        return float(self.draft_s)

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        n = _tokens(n_tokens)
        ell = _context(context_length)
        _outside(self, "tokens", _request_range(n), (self.node_counts[0], self.node_counts[-1]))
        _outside(self, "context", (ell, ell), (self.context_lengths[0], self.context_lengths[-1]))
        xs = np.asarray(self.node_counts, dtype=np.float64)
        ctx = np.asarray(self.context_lengths, dtype=np.float64)
        j = int(np.searchsorted(ctx, ell, side="right"))
        if j == 0 or j == ctx.size:  # clamped (exactly at a measured length is not clamped)
            row = np.asarray(self.verify_s[0 if j == 0 else -1])
            return _scalar_or_array(_interp_extend(n, xs, row), n_tokens)
        w = (ell - ctx[j - 1]) / (ctx[j] - ctx[j - 1])
        a = _interp_extend(n, xs, np.asarray(self.verify_s[j - 1]))
        b = _interp_extend(n, xs, np.asarray(self.verify_s[j]))
        return _scalar_or_array((1 - w) * a + w * b, n_tokens)

    def to_dict(self) -> dict[str, Any]:
        """The latency-file schema (the same as the shipped presets)."""
        return {
            "schema": SCHEMA, "cost_model": "tabulated", "name": self.name,
            "attribution": self.provenance, "estimate": self.estimate,
            **self.meta,
            "draft_cost_s": self.draft_s,
            "node_counts": list(self.node_counts),
            "node_count_meaning": "number of query tokens in one verification forward "
                                  "(root included)",
            "context_lengths": list(self.context_lengths),
            "verify_cost_s": {str(c): list(r) for c, r in
                              zip(self.context_lengths, self.verify_s, strict=True)},
        }


# ---------------------------------------------------------------------------------- tiled
@dataclass(frozen=True)
class TiledCost:
    r"""A step cost: :math:`C_v(n) = t_0 + s\,n + \Delta\,\lceil n / w \rceil` (not convex).

    Models the jumps real kernels show at tile boundaries (e.g. every 64 or 128 query tokens) and
    at path switches. With it, CaDDTree's greedy stop can end at a strict local maximum of
    :math:`\theta(B)` (``docs/theory/caddtree.md``).

    Parameters
    ----------
    base_s : float
        :math:`t_0`, seconds.
    slope_s : float
        :math:`s`, seconds per token (0 for a pure staircase).
    tile_tokens : int
        :math:`w`, the tile width in tokens.
    step_s : float
        :math:`\Delta`, the jump per tile, seconds.
    draft_s : float
        Drafter forward, seconds.
    """

    base_s: float
    slope_s: float
    tile_tokens: int
    step_s: float
    draft_s: float
    name: str = "tiled"
    provenance: str = "user-defined"
    estimate: bool = True

    def __post_init__(self) -> None:
        _positive_float(self.base_s, "base_s")
        _positive_float(self.slope_s, "slope_s")
        _positive_float(self.step_s, "step_s")
        _positive_float(self.draft_s, "draft_s")
        check_positive_int(self.tile_tokens, "tile_tokens")

    def __repr__(self) -> str:
        return describe(self)

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        _context(context_length)
        return float(self.draft_s)

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        if _context(context_length) != DEFAULT_CONTEXT_LENGTH:
            _context_ignored(self)
        n = np.maximum(_tokens(n_tokens), 1.0)
        t = self.base_s + self.slope_s * n + self.step_s * np.ceil(n / self.tile_tokens)
        return _scalar_or_array(t, n_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "cost_model": "tiled", **asdict(self)}


# -------------------------------------------------------------------------------- batches
@runtime_checkable
class BatchLatencyModel(LatencyModel, Protocol):
    """A latency model with a batch axis: one pass over ``b`` requests, each at its context
    length (``context_lengths``, one per request; ``b = len(context_lengths)``)."""

    def batch_draft_cost(self, context_lengths: Sequence[float]) -> float:
        """Seconds for the drafter's forward over the batch."""
        ...

    def batch_verify_cost(self, n_tokens: int | np.ndarray, context_lengths: Sequence[float]
                          ) -> float | np.ndarray:
        """Seconds for one verification pass over ``n_tokens`` query tokens in all (every
        request's root included, so ``n_tokens >= b``)."""
        ...


def _contexts(context_lengths) -> np.ndarray:
    """Checked context lengths of a batch, float64 (b,), ``b >= 1``."""
    try:
        c = np.asarray(context_lengths, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("context_lengths must be a sequence of numbers, one per request; got "
                         f"{context_lengths!r}") from None
    if c.ndim != 1 or c.size == 0:
        raise ValueError("context_lengths must be a non-empty sequence, one context length per "
                         f"request; got {context_lengths!r}")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError(f"context_lengths must be finite and >= 0; got {context_lengths!r}")
    return c


def batch_sizes(model: LatencyModel) -> tuple[int, ...] | None:
    """The batch sizes a model prices from measurements: a :class:`BatchTabulatedCost`'s,
    ``(1,)`` for a model without a batch axis (every ``treespec-latency/1`` file), ``None`` for
    a formula valid at every batch size (:class:`BatchRooflineCost`)."""
    if isinstance(model, BatchTabulatedCost):
        return model.batch_sizes
    if isinstance(model, BatchLatencyModel):
        return None
    return (1,)


def batch_costs(model: LatencyModel, context_lengths: Sequence[float]
                ) -> tuple[float, VerifyCost]:
    """A batch's drafting seconds and its ``verify_cost(n)`` (``n`` query tokens in all, every
    root included): what :func:`treespec_sim.policies.batch_caddtree` takes.

    Parameters
    ----------
    model : LatencyModel
        A :class:`BatchLatencyModel`, or any model at batch 1 (one context length).
    context_lengths : sequence of float, shape (b,)
        Each request's context length.

    Raises
    ------
    ValueError
        Bad context lengths, or ``b > 1`` on a model without a batch axis.
    """
    c = _contexts(context_lengths)
    if isinstance(model, BatchLatencyModel):
        return (float(model.batch_draft_cost(c)),
                lambda n: model.batch_verify_cost(n, c))
    if c.size != 1:
        raise ValueError(f"latency model {getattr(model, 'name', '?')!r} "
                         f"({type(model).__name__}) prices batch 1 only; a batch of {c.size} "
                         "needs a batched model (the *-batch presets, a treespec-latency/2 "
                         "file from python -m real_models.profile --batch-sizes)")
    ell = float(c[0])
    return float(model.draft_cost(ell)), lambda n: model.verify_cost(n, ell)


class _OneRequest:
    """A batched model's :class:`LatencyModel` side: one request is a batch of one."""

    def draft_cost(self, context_length: float = DEFAULT_CONTEXT_LENGTH) -> float:
        return self.batch_draft_cost([_context(context_length)])

    def verify_cost(self, n_tokens: int | np.ndarray,
                    context_length: float = DEFAULT_CONTEXT_LENGTH) -> float | np.ndarray:
        return self.batch_verify_cost(n_tokens, [_context(context_length)])


@dataclass(frozen=True)
class BatchRooflineCost(_OneRequest):
    r"""The roofline of one pass over a batch: weights once, every cache, every token.

    For ``b`` requests with contexts :math:`c_i` and :math:`n` query tokens in all (roots
    included; :math:`n \ge b`), one verification pass takes

    .. math::
        C_v(n; c) = t_o + \max\Bigl(\frac{W + k\,(\sum_i c_i + n)}{\beta},\;
                                   \frac{(f + a\,\bar c)\,n}{\phi}\Bigr),

    the weights :math:`W` read once, every request's KV cache read (:math:`k` bytes per
    cached token) and the new tokens' written, against the matrix products (:math:`f` FLOPs per
    query token) and each token's attention over its context (:math:`a` FLOPs per query and
    context token, at the mean context :math:`\bar c`: exact for equal contexts); :math:`\beta`
    and :math:`\phi` the effective bandwidth and compute, :math:`t_o` a fixed overhead per pass.
    Memory-bound (flat but for the KV written) up to the crossover, compute-bound past it: convex
    in ``n``. The drafter's forward is the same roofline over its ``draft_tokens`` block
    positions per request. Batch 1 (``draft_cost``, ``verify_cost``) is ``b = 1``.

    Parameters
    ----------
    weight_bytes, kv_bytes_per_token, flops_per_token, attention_flops : float
        The target's :math:`W`, :math:`k`, :math:`f`, :math:`a`.
    bandwidth_bytes_s, flops_s : float
        Effective memory bandwidth (bytes/s) and compute (FLOP/s).
    overhead_s : float
        Fixed seconds per verification pass.
    draft_weight_bytes, draft_kv_bytes_per_token, draft_flops_per_token, draft_attention_flops
        The drafter's counterparts.
    draft_tokens : int
        Positions the drafter computes per request per round (a DFlash block).
    draft_overhead_s : float
        Fixed seconds per drafter forward.
    meta : dict
        Where the numbers come from (datasheet peaks, utilisation, model shapes); kept in the
        file.
    """

    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attention_flops: float
    bandwidth_bytes_s: float
    flops_s: float
    overhead_s: float
    draft_weight_bytes: float
    draft_kv_bytes_per_token: float
    draft_flops_per_token: float
    draft_attention_flops: float
    draft_tokens: int
    draft_overhead_s: float
    name: str = "batch-roofline"
    provenance: str = "user-defined"
    estimate: bool = True
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for f in ("weight_bytes", "kv_bytes_per_token", "flops_per_token", "attention_flops",
                  "overhead_s", "draft_weight_bytes", "draft_kv_bytes_per_token",
                  "draft_flops_per_token", "draft_attention_flops", "draft_overhead_s"):
            _positive_float(getattr(self, f), f)
        _positive_float(self.bandwidth_bytes_s, "bandwidth_bytes_s", allow_zero=False)
        _positive_float(self.flops_s, "flops_s", allow_zero=False)
        check_positive_int(self.draft_tokens, "draft_tokens")

    def __repr__(self) -> str:
        return describe(self)

    def batch_draft_cost(self, context_lengths: Sequence[float]) -> float:
        c = _contexts(context_lengths)
        mem = self.draft_weight_bytes + self.draft_kv_bytes_per_token * c.sum()
        compute = ((self.draft_flops_per_token + self.draft_attention_flops * c.mean())
                   * self.draft_tokens * c.size)
        return float(self.draft_overhead_s + max(mem / self.bandwidth_bytes_s,
                                                 compute / self.flops_s))

    def batch_verify_cost(self, n_tokens: int | np.ndarray, context_lengths: Sequence[float]
                          ) -> float | np.ndarray:
        c = _contexts(context_lengths)
        n = np.maximum(_tokens(n_tokens), float(c.size))  # every request verifies its root
        mem = self.weight_bytes + self.kv_bytes_per_token * (c.sum() + n)
        compute = (self.flops_per_token + self.attention_flops * c.mean()) * n
        t = self.overhead_s + np.maximum(mem / self.bandwidth_bytes_s, compute / self.flops_s)
        return _scalar_or_array(t, n_tokens)

    def crossover_tokens(self, context_lengths: Sequence[float]) -> float:
        """Query tokens in all where the pass turns from memory- to compute-bound."""
        c = _contexts(context_lengths)
        per_token = ((self.flops_per_token + self.attention_flops * c.mean()) / self.flops_s
                     - self.kv_bytes_per_token / self.bandwidth_bytes_s)
        fixed = (self.weight_bytes + self.kv_bytes_per_token * c.sum()) / self.bandwidth_bytes_s
        return float(fixed / per_token) if per_token > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "meta"}
        return {"schema": SCHEMA_BATCH, "cost_model": "batch-roofline", **self.meta, **d}


#: Keys of a table's JSON that belong to the whole batched file, not to one batch size.
_FILE_KEYS = ("schema", "cost_model", "name", "attribution", "estimate", "node_count_meaning")


@dataclass(frozen=True)
class BatchTabulatedCost(_OneRequest):
    """Measured verification and draft costs per batch size, interpolated.

    ``tables[j] = (b_j, T_j)``: a :class:`TabulatedCost` measured with ``b_j`` requests per
    pass, its ``node_counts`` the pass's total query tokens (every root included) and its
    contexts each request's context length. A batch of ``b`` requests at contexts ``c`` is
    priced at the mean context by the table of ``b`` if measured, else mixed linearly in ``b``
    between the two nearest measured batch sizes (convex tables stay convex), clamped outside
    them with an :class:`ExtrapolationWarning` (axis ``"batch"``). A ``treespec-latency/1``
    file is this with one table at batch 1 (:func:`batch_sizes` says ``(1,)`` of it).

    Parameters
    ----------
    tables : sequence of (int, TabulatedCost)
        Strictly increasing batch sizes, each with its table.
    """

    tables: tuple[tuple[int, TabulatedCost], ...]
    name: str = "tabulated-batch"
    provenance: str = "user-defined"
    estimate: bool = False
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        tables = tuple((check_positive_int(b, "batch size"), t) for b, t in self.tables)
        if not tables:
            raise ValueError("tables must hold at least one (batch size, TabulatedCost)")
        sizes = [b for b, _ in tables]
        if any(b2 <= b1 for b1, b2 in pairwise(sizes)):
            raise ValueError(f"batch sizes must be strictly increasing; got {sizes}")
        for b, t in tables:
            if not isinstance(t, TabulatedCost):
                raise ValueError(f"the table of batch {b} must be a TabulatedCost; got "
                                 f"{type(t).__name__}")
        object.__setattr__(self, "tables", tables)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(b for b, _ in self.tables)

    def __repr__(self) -> str:
        return describe(self)

    def _mix(self, b: int) -> list[tuple[float, TabulatedCost]]:
        """``(weight, table)`` pairs pricing batch ``b`` (warns outside the measured sizes)."""
        sizes = self.batch_sizes
        _outside(self, "batch", (b, b), (sizes[0], sizes[-1]))
        if b <= sizes[0]:
            return [(1.0, self.tables[0][1])]
        if b >= sizes[-1]:
            return [(1.0, self.tables[-1][1])]
        j = int(np.searchsorted(sizes, b))
        if sizes[j] == b:
            return [(1.0, self.tables[j][1])]
        w = (b - sizes[j - 1]) / (sizes[j] - sizes[j - 1])
        return [(1.0 - w, self.tables[j - 1][1]), (w, self.tables[j][1])]

    def batch_draft_cost(self, context_lengths: Sequence[float]) -> float:
        c = _contexts(context_lengths)
        return float(sum(w * t.draft_cost(float(c.mean())) for w, t in self._mix(c.size)))

    def batch_verify_cost(self, n_tokens: int | np.ndarray, context_lengths: Sequence[float]
                          ) -> float | np.ndarray:
        c = _contexts(context_lengths)
        n = _tokens(n_tokens)
        out = sum(w * np.asarray(t.verify_cost(n, float(c.mean()))) for w, t in self._mix(c.size))
        return _scalar_or_array(np.asarray(out, dtype=np.float64), n_tokens)

    def to_dict(self) -> dict[str, Any]:
        """The ``treespec-latency/2`` schema: one latency table per batch size."""
        batches = {}
        for b, t in self.tables:
            body = t.to_dict()
            for k in _FILE_KEYS:
                body.pop(k, None)
            batches[str(b)] = body
        return {"schema": SCHEMA_BATCH, "cost_model": "tabulated", "name": self.name,
                "attribution": self.provenance, "estimate": self.estimate, **self.meta,
                "batch_sizes": list(self.batch_sizes),
                "node_count_meaning": "query tokens in one verification pass over the whole "
                                      "batch (every request's root included)",
                "batches": batches}


# --------------------------------------------------------------------------- (de)serialise
_KINDS = {"roofline": RooflineCost, "piecewise": PiecewiseLinearCost, "tiled": TiledCost,
          "batch-roofline": BatchRooflineCost}
_TABLE_KEYS = ("draft_cost_s", "node_counts", "context_lengths", "verify_cost_s")


def cost_model_from_dict(d: dict[str, Any]) -> LatencyModel:
    """Rebuild a model from :meth:`to_dict` output or a latency file's contents.

    A dict with ``node_counts``, ``context_lengths``, ``verify_cost_s`` and ``draft_cost_s``
    (the schema of the CaDDTree-derived files) is read as a :class:`TabulatedCost` even without a
    ``cost_model`` key.
    """
    if not isinstance(d, dict):
        raise ValueError(f"a latency model must be a JSON object; got {type(d).__name__}")
    if "schema" in d and d["schema"] not in (SCHEMA, SCHEMA_BATCH):
        raise ValueError(f"schema: this package reads {SCHEMA!r} and {SCHEMA_BATCH!r} latency "
                         f"files; got {d['schema']!r}")
    if "batches" in d:
        return _batch_table_from_dict(d)
    kind = d.get("cost_model", "tabulated" if "verify_cost_s" in d else None)
    if kind == "tabulated":
        missing = [k for k in _TABLE_KEYS if k not in d]
        if missing:
            raise ValueError(f"latency table is missing key(s) {missing}; a tabulated latency "
                             f"file needs {list(_TABLE_KEYS)}")
        table = d["verify_cost_s"]
        if not isinstance(table, dict) or not table:
            raise ValueError("verify_cost_s must be a non-empty object {context length: costs}")
        ctx = sorted(table, key=float)
        contexts = [int(float(c)) for c in ctx]
        if contexts != [int(c) for c in d["context_lengths"]]:
            raise ValueError("verify_cost_s keys must match context_lengths "
                             f"({d['context_lengths']}); got {ctx}")
        # every other top-level key (device, model, versions, raw medians, ...) is kept, so a
        # profile round-trips with its metadata
        known = {"schema", "cost_model", "name", "attribution", "estimate", "node_counts",
                 "node_count_meaning", "context_lengths", "verify_cost_s", "draft_cost_s"}
        meta = {k: v for k, v in d.items() if k not in known}
        return TabulatedCost(tuple(d["node_counts"]), tuple(contexts),
                             tuple(tuple(table[c]) for c in ctx), d["draft_cost_s"],
                             name=d.get("name", "tabulated"),
                             provenance=d.get("attribution", d.get("source", "unknown")),
                             estimate=bool(d.get("estimate", False)), meta=meta)
    if kind is None:
        raise ValueError("latency model: no 'cost_model' key (the kind: tabulated, piecewise, "
                         "roofline, tiled) and no measurement table (draft_cost_s, node_counts, "
                         "context_lengths, verify_cost_s); see docs/usage.md, 'Latency files'")
    if kind not in _KINDS:
        raise ValueError(f"cost_model: unknown latency model kind {kind!r}; known kinds: "
                         f"{', '.join(['tabulated', *sorted(_KINDS)])}")
    cls = _KINDS[kind]
    fields = {k: v for k, v in d.items() if k not in ("schema", "cost_model")}
    if cls is BatchRooflineCost:  # every key that is no field is where the numbers came from
        names = set(BatchRooflineCost.__dataclass_fields__)
        fields = {k: v for k, v in fields.items() if k in names} | {
            "meta": {k: v for k, v in fields.items() if k not in names}}
    try:
        if cls is PiecewiseLinearCost:
            fields["tokens"], fields["seconds"] = tuple(fields["tokens"]), tuple(fields["seconds"])
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"bad fields for a {kind} latency model: {exc}") from None
    except KeyError as exc:
        raise ValueError(f"a {kind} latency model needs the key {exc}") from None


def _batch_table_from_dict(d: dict[str, Any]) -> BatchTabulatedCost:
    """A ``treespec-latency/2`` file's tables (:meth:`BatchTabulatedCost.to_dict`)."""
    batches = d["batches"]
    if not isinstance(batches, dict) or not batches:
        raise ValueError("batches must be a non-empty object {batch size: latency table}")
    name = d.get("name", "tabulated-batch")
    provenance = d.get("attribution", d.get("source", "unknown"))
    tables = []
    for key, body in batches.items():
        try:
            b = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"batches: key {key!r} is not a batch size") from None
        if b < 1 or str(b) != str(key).strip():
            raise ValueError(f"batches: key {key!r} is not a positive integer batch size")
        if not isinstance(body, dict):
            raise ValueError(f"batches[{key!r}] must be a latency table (an object)")
        try:
            table = cost_model_from_dict({**body, "cost_model": "tabulated",
                                          "name": f"{name}@b={b}", "attribution": provenance,
                                          "estimate": bool(d.get("estimate", False))})
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"batches[{key!r}]: {exc}") from None
        tables.append((b, table))
    tables.sort(key=lambda bt: bt[0])
    listed = d.get("batch_sizes")
    if listed is not None and [int(x) for x in listed] != [b for b, _ in tables]:
        raise ValueError(f"batch_sizes {listed} must match the keys of batches "
                         f"({[b for b, _ in tables]})")
    known = {"schema", "cost_model", "name", "attribution", "estimate", "batch_sizes",
             "node_count_meaning", "batches"}
    return BatchTabulatedCost(tuple(tables), name=name, provenance=provenance,
                              estimate=bool(d.get("estimate", False)),
                              meta={k: v for k, v in d.items() if k not in known})


def load_cost_model(path: str | Path) -> LatencyModel:
    """Read a latency file (JSON) written by :meth:`to_dict` / ``real_models.profile``."""
    p = Path(path)
    data = read_json(p, "latency file")
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a latency file holds a JSON object; this one holds "
                         f"{type(data).__name__}")
    try:
        return cost_model_from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise ValueError(f"{p}: {exc}") from None


def save_cost_model(model: LatencyModel, path: str | Path) -> None:
    """Write ``model.to_dict()`` as JSON."""
    Path(path).write_text(json.dumps(model.to_dict(), indent=1))


# -------------------------------------------------------------------------------- presets
_ROOFLINE = ("roofline estimate, docs/theory/caddtree.md 'The H100/H200 estimates' (Qwen3 "
             "weights streamed per verify vs bf16 compute per token; anchored on SGLang/vLLM "
             "batch-1 step times); not measured")


def _packaged(filename: str) -> TabulatedCost:
    text = resources.files("treespec_sim").joinpath("data", "latency", filename).read_text()
    model = cost_model_from_dict(json.loads(text))
    assert isinstance(model, TabulatedCost)
    return model


def _estimate(name: str, t0_ms: float, s_lo_us: float, knee: float, s_hi_us: float,
              draft_ms: float) -> RooflineCost:
    return RooflineCost(t0_ms * 1e-3, s_lo_us * 1e-6, knee, s_hi_us * 1e-6, draft_ms * 1e-3,
                        name=name, provenance=_ROOFLINE, estimate=True)


#: Datasheet peaks, ``(dense BF16 tensor-core FLOP/s, HBM bytes/s)``: NVIDIA's A800 80GB SXM
#: (312 TFLOPS, 2,039 GB/s), H100 SXM (989 TFLOPS, 3.35 TB/s) and H200 SXM (989 TFLOPS,
#: 4.8 TB/s) datasheets; the BF16 figures the datasheets headline are with sparsity, halved here.
GPU_DATASHEETS = {"a800": (312e12, 2.039e12), "h100": (989e12, 3.35e12),
                  "h200": (989e12, 4.8e12)}
#: Published shapes (Qwen/Qwen3-4B and Qwen/Qwen3-8B config.json): hidden size, MLP size; both
#: have 36 layers, 32 query and 8 KV heads of 128, a vocabulary of 151,936.
QWEN3_SHAPES = {"qwen3-4b": (2560, 9728), "qwen3-8b": (4096, 12288)}
#: What the roofline estimates assume (not measured): the shares of the datasheet peaks a
#: decode pass reaches, the fixed time per target pass and per drafter forward (launches,
#: sampling: the gap between the weight-streaming floor and the batch-1 step times engines
#: report, caddtree.md), and the drafter: DFlash, 5 layers of the target's width, block 16
#: (z-lab/Qwen3-{4B,8B}-DFlash-b16).
ROOFLINE_ASSUMPTIONS = {"bandwidth_utilisation": 0.8, "compute_utilisation": 0.6,
                        "overhead_s": 1.0e-3, "draft_overhead_s": 0.3e-3,
                        "drafter_layers": 5, "draft_block": 16, "bytes_per_parameter": 2}


def _batch_estimate(gpu: str, model: str) -> BatchRooflineCost:
    """The roofline of ``model`` on ``gpu`` from :data:`GPU_DATASHEETS`, :data:`QWEN3_SHAPES`
    and :data:`ROOFLINE_ASSUMPTIONS` (bf16 weights and cache)."""
    flops_peak, bw_peak = GPU_DATASHEETS[gpu]
    hidden, mlp = QWEN3_SHAPES[model]
    a = ROOFLINE_ASSUMPTIONS
    layers, q_heads, kv_heads, head_dim, vocab = 36, 32, 8, 128, 151936
    layer = 2 * hidden * q_heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * mlp
    lm_head = hidden * vocab
    nbytes = a["bytes_per_parameter"]
    kv = 2 * kv_heads * head_dim * nbytes  # K and V of one layer, per cached token
    d = a["drafter_layers"]
    return BatchRooflineCost(
        weight_bytes=nbytes * (layers * layer + lm_head),
        kv_bytes_per_token=layers * kv,
        flops_per_token=2 * (layers * layer + lm_head),
        attention_flops=4 * layers * q_heads * head_dim,
        bandwidth_bytes_s=a["bandwidth_utilisation"] * bw_peak,
        flops_s=a["compute_utilisation"] * flops_peak,
        overhead_s=a["overhead_s"],
        # the drafter reads its layers, its feature projection (d target layers -> hidden) and
        # the target's LM head; it computes its block's positions
        draft_weight_bytes=nbytes * (d * layer + d * hidden * hidden + lm_head),
        draft_kv_bytes_per_token=d * kv,
        draft_flops_per_token=2 * (d * layer + lm_head),
        draft_attention_flops=4 * d * q_heads * head_dim,
        draft_tokens=a["draft_block"],
        draft_overhead_s=a["draft_overhead_s"],
        name=f"{gpu}-{model}-batch", estimate=True,
        provenance=(f"roofline estimate from the {gpu.upper()} datasheet and {model}'s published "
                    "shapes (docs/usage.md, 'Batched costs'); not measured"),
        meta={"device": gpu, "model": model, "peak_bf16_dense_flops": flops_peak,
              "peak_bandwidth_bytes_s": bw_peak, "assumptions": dict(a)})


#: Named latency presets: name -> zero-argument factory (loading is lazy).
PRESETS = {
    "a800-qwen3-4b": lambda: _packaged("a800_qwen3_4b.json"),
    "a800-qwen3-8b": lambda: _packaged("a800_qwen3_8b.json"),
    "h100-qwen3-8b": lambda: _estimate("h100-qwen3-8b", 6.0, 5, 160, 25, 1.2),
    "h200-qwen3-8b": lambda: _estimate("h200-qwen3-8b", 5.0, 4, 128, 25, 1.0),
    "h100-qwen3-4b": lambda: _estimate("h100-qwen3-4b", 3.5, 3, 160, 13, 0.7),
    "h200-qwen3-4b": lambda: _estimate("h200-qwen3-4b", 3.0, 3, 128, 13, 0.6),
    # Not a device: the H200-8B floor with a 0.1 ms jump every 16 query tokens, to show what a
    # non-convex (tiled) cost does to CaDDTree's greedy stop.
    "tiled-illustrative": lambda: TiledCost(
        base_s=5e-3, slope_s=2e-6, tile_tokens=16, step_s=1e-4, draft_s=1e-3,
        name="tiled-illustrative", estimate=True,
        provenance="illustrative step cost, not measured: H200-8B-like floor (5 ms, 2 us/token) "
                   "plus 0.1 ms per 16-token tile"),
    # batched roofline estimates (a pass over b requests): datasheets, not measured
    **{f"{gpu}-{model}-batch": (lambda gpu=gpu, model=model: _batch_estimate(gpu, model))
       for gpu in GPU_DATASHEETS for model in QWEN3_SHAPES},
}


def get_cost_model(name_or_path: str | Path | LatencyModel) -> LatencyModel:
    """A preset by name, a latency file by path, or a model passed through.

    Raises
    ------
    ValueError
        Unknown name (the message lists the presets) or an unreadable file.
    """
    if isinstance(name_or_path, LatencyModel) and not isinstance(name_or_path, str | Path):
        return name_or_path
    if not isinstance(name_or_path, str | Path):
        raise ValueError(f"name_or_path must be a preset name, a latency file's path or a "
                         f"latency model; got {type(name_or_path).__name__} {name_or_path!r}")
    key = str(name_or_path)
    if key in PRESETS:
        return PRESETS[key]()
    if key.endswith(".json") or Path(key).is_file():
        return load_cost_model(key)
    raise ValueError(f"unknown cost model {key!r}; known presets: {', '.join(sorted(PRESETS))} "
                     "(or give the path of a latency .json file)")
