r"""What every sweep family shares: cells, worlds, settings, grid checks, rows, claims, the
registry's record of a family.

A *family* (:class:`Family`) owns one kind of comparison from end to end, in two modules of
:mod:`treespec_sim.families`. Its *computing* module (``ddtree.py``) holds its *grid* (a frozen,
validated dataclass describing which regimes, temperatures, budgets, ... it compares), the
*cells* the grid expands into (the unit of work, of resumption and of distribution), the
runner of one cell (through :func:`treespec_sim.engine.run_round`) and the schema of the rows
it returns (a :class:`Row` dataclass); its *presenting* module (``ddtree_report.py``) turns
those rows into its tables and figures in the report and its *claims* (:class:`Claim`: a
statement, the measured number with its interval and unit, and a verdict). The sweep and the
report loop over the registry (:data:`treespec_sim.families.FAMILIES`) and never name a
family.

Worlds
------
A regime is a law over synthetic worlds, and one world's numbers scatter around the regime's
by more than an interval over that world's contexts shows. Every grid has ``worlds`` (default
3): a cell splits its ``rounds`` contexts over ``worlds`` worlds as evenly as possible (the
first ``rounds % worlds`` worlds get one more), world ``i`` being
``make_world(regime, seed + i)`` with ``seed`` the sweep's (:func:`world_shares`, the one place
that split and those seeds are written). Within a world the family's own randomness
convention applies with the world's seed in place of the sweep's, so world ``i`` of a cell is
exactly that cell run with ``worlds = 1`` at seed ``seed + i`` on its share of the rounds.
(Sweeps at seeds ``s`` and ``s + 1`` therefore share ``worlds - 1`` worlds: independent
replicates need seeds ``worlds`` apart.)

A row pools its per-context values over the worlds for the existing columns (``tau_mean``,
``tau_ci_low/high``: the interval over every context of every world; throughput over every
round; ``rel_ci_*`` resampling the pooled contexts) and adds the between-world summary
(:func:`treespec_sim.stats.world_columns`): ``worlds``, ``tau_world_means`` (one mean per
world) and ``tau_world_ci_low/high``, the t-interval over those means (``worlds - 1`` degrees
of freedom); relative comparisons add ``rel_world_means`` and ``rel_world_ci_low/high`` (each
world's ratio to the baseline and their t-interval). In ``results.csv`` the list columns are
written ``;``-joined.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from .. import synth
from ..cost import PiecewiseLinearCost, fit_monotone_convex, get_cost_model, round_time
from ..stats import LEVEL, mean_ci, throughput
from ..trace import load as load_trace
from ..validation import Interval, check_budget, check_param, check_temperature, is_int
from ..verdicts import (
    DECIDE_MARGIN,
    MIN_UNITS,
    NO_VERDICT,
    VERDICTS,
    ClaimedRange,
    Judgement,
    format_number,
    judge,
    second_stage,
)

__all__ = ["CALIBRATED", "COLUMNS", "DECIDE_MARGIN", "MIN_UNITS", "NO_VERDICT", "SYNTHETIC",
           "TRACE_PREFIX", "TSUBAME_PAGE", "UNIVER_PAGE", "VERDICTS", "Cell", "Claim",
           "ClaimedRange", "Family", "FigureSpec", "Judgement", "Row", "RunSettings",
           "WorldShare", "as_tuple", "check_budgets", "check_max_rounds", "check_regimes",
           "check_rounds", "check_temperatures", "check_trace_budget", "check_trace_temperatures",
           "check_worlds", "deciding_cost", "format_number", "headline", "interval_units",
           "is_trace", "judge", "paper_regimes", "pick_regimes", "second_stage",
           "seconds_per_unit", "shares", "smoke_test", "throughput_columns", "trace_for",
           "trace_regime", "trace_sha256", "unit_ci", "world_for", "world_shares"]

#: Columns of ``results.csv``, in order (cells that do not define a column leave it empty).
COLUMNS = (
    "family", "regime", "method", "verifier", "drafter", "temperature", "budget", "batch_size",
    "cost_model",
    "rounds", "seed", "tau_mean", "tau_ci_low", "tau_ci_high",
    "worlds", "tau_world_means", "tau_world_ci_low", "tau_world_ci_high", "tree_size_mean",
    "coverage_mean", "round_time_s", "throughput_tok_s", "speedup_vs_ar",
    "lost_uncovered", "lost_budget", "lost_depth_cap",
    "rel_to_baseline", "rel_ci_low", "rel_ci_high", "rel_world_means", "rel_world_ci_low",
    "rel_world_ci_high", "baseline", "rel_traversal", "rel_traversal_ci_low",
    "rel_traversal_ci_high", "lossless", "first_token_tv", "first_token_tv_ci_low",
    "first_token_tv_ci_high", "diff_to_baseline", "diff_ci_low", "diff_ci_high",
    "diff_contexts", "wall_s",
)

#: Calibrated regimes (``docs/results/calibration.md``); the presets use those installed.
CALIBRATED = ("math500", "gsm8k", "aime25", "humaneval", "mbpp", "livecodebench", "mt-bench",
              "alpaca")
#: Synthetic stand-ins when no calibrated regime is installed.
SYNTHETIC = ("low-entropy", "mid-entropy", "high-entropy")


def paper_regimes() -> tuple[str, ...]:
    """The calibrated regimes that are installed, else :data:`SYNTHETIC`."""
    return tuple(n for n in CALIBRATED if n in synth.REGIMES) or SYNTHETIC


def pick_regimes(regimes: tuple[str, ...], wanted: Sequence[str]) -> tuple[str, ...]:
    """A subset of ``regimes`` (``wanted`` if installed, else the first/middle/last)."""
    got = tuple(w for w in wanted if w in regimes)
    if got:
        return got
    idx = sorted({0, len(regimes) // 2, len(regimes) - 1})
    return tuple(regimes[i] for i in idx)


# ---------------------------------------------------------------------------------- cells
def as_tuple(x, cast, key: str) -> tuple:
    """``x`` (one value or a list) as a tuple, each value checked and converted by ``cast``:
    ``str`` (a string, else ``ValueError`` naming ``key``) or a check of
    :mod:`treespec_sim.validation` called as ``cast(value, key)`` (``check_budget``,
    ``check_temperature``, ...), so that a config's list refuses what the API refuses, with
    the same message (``"ddtree.budgets must be a positive integer; got 16.7"``)."""
    items = tuple(x) if isinstance(x, list | tuple) else (x,)
    if cast is str:
        for v in items:
            if not isinstance(v, str):
                raise ValueError(f"{key}: {v!r} is not a string")
        return items
    return tuple(cast(v, key) for v in items)


@dataclass(frozen=True)
class Cell:
    """One unit of work: a grid, a regime, and the family's coordinates."""

    grid: object
    regime: str
    temperature: float
    budget: int = 0
    option: str = ""

    @property
    def family(self) -> str:
        return self.grid.family

    @property
    def key(self) -> str:
        opt = f"__{self.option}" if self.option else ""
        return (f"{self.family}__{self.regime}{opt}__T{self.temperature!r}__B{self.budget}")


def check_regimes(regimes: tuple[str, ...], family: str) -> None:
    """At least one regime, every one of them known (a trace's regime, ``"trace:<name>"``, is
    checked against the plan's trace by the sweep: :func:`is_trace`)."""
    if not regimes:
        raise ValueError(f"{family}.regimes must name at least one regime")
    for name in regimes:
        if is_trace(name):
            continue
        if name not in synth.REGIMES:
            raise ValueError(f"{family}.regimes: unknown regime {name!r}; known regimes: "
                             f"{', '.join(sorted(synth.REGIMES))}, or a fitted regime's .json "
                             "file")


def check_temperatures(ts: tuple[float, ...], family: str, *, positive: bool = False) -> None:
    """Every temperature finite and ``>= 0`` (``> 0`` with ``positive``)."""
    for t in ts:
        check_temperature(t, f"{family}.temperatures", positive=positive)


def check_rounds(rounds: int, family: str) -> None:
    """``rounds`` an integer ``>= 2`` (an interval needs two)."""
    check_param(rounds, f"{family}.rounds", Interval("int", 2, numpy=False))


def check_worlds(worlds: int, rounds: int, family: str) -> None:
    """``1 <= worlds <= rounds`` (every world needs a context)."""
    check_param(worlds, f"{family}.worlds", Interval("int", 1, numpy=False))
    if rounds < worlds:
        raise ValueError(f"{family}.worlds must be at most {family}.rounds (every world needs "
                         f"a context); got worlds={worlds}, rounds={rounds}")


def check_max_rounds(max_rounds: int, rounds: int, family: str) -> None:
    """``max_rounds`` 0 (no adaptive contexts) or an integer ``>= rounds`` (the pilot)."""
    if not is_int(max_rounds, numpy=False) or max_rounds < 0 or (max_rounds
                                                                 and max_rounds < rounds):
        raise ValueError(f"{family}.max_rounds must be 0 or an integer >= rounds ({rounds}); "
                         f"got {max_rounds!r}")


def check_budgets(budgets: tuple[int, ...], family: str) -> None:
    """At least one budget, every one a positive integer
    (:func:`~treespec_sim.validation.check_budget`, its message)."""
    if not budgets:
        raise ValueError(f"{family}.budgets must name at least one budget")
    for b in budgets:
        check_budget(b, f"{family}.budgets")


# ---------------------------------------------------------------------------------- worlds
@dataclass(frozen=True)
class WorldShare:
    """One world of a cell: its index, its seed and how many of the cell's rounds it holds."""

    index: int
    seed: int
    rounds: int


def world_shares(rounds: int, worlds: int, seed: int) -> tuple[WorldShare, ...]:
    """How a cell's ``rounds`` contexts are split over its ``worlds`` worlds.

    World ``i`` (``0 <= i < worlds``) has seed ``seed + i`` and ``rounds // worlds`` contexts,
    one more for the first ``rounds % worlds`` worlds. Every family takes its worlds from here.

    Parameters
    ----------
    rounds : int
        The cell's contexts (or decoded rounds), ``>= worlds``.
    worlds : int
        ``>= 1``.
    seed : int
        The sweep's seed.
    """
    check_param(worlds, "worlds", Interval("int", 1, numpy=False))
    if not is_int(rounds, numpy=False) or rounds < worlds:
        raise ValueError(f"rounds must be an integer >= worlds ({worlds}); got {rounds!r}")
    base, extra = divmod(rounds, worlds)
    return tuple(WorldShare(i, seed + i, base + (i < extra)) for i in range(worlds))


def shares(cell: Cell, settings: RunSettings) -> tuple[WorldShare, ...]:
    """The worlds of ``cell`` (its grid's ``rounds`` and ``worlds``, the sweep's seed)."""
    return world_shares(cell.grid.rounds, cell.grid.worlds, settings.seed)


@functools.lru_cache(maxsize=6)  # worlds at V = 32768 hold ~0.5 GB of per-topic kernels each
def world_for(regime: str, seed: int, vocab: int | None = None, drafter: str | None = None):
    """The (cached) world of a cell: ``make_world(regime, seed)``, or the regime with a drafter
    variant (:func:`treespec_sim.synth.drafter_variant`) and an optional vocabulary cap."""
    if drafter is not None:
        spec = synth.drafter_variant(regime, drafter)
        cap = vocab if vocab and vocab < spec.vocab_size else None
        return synth.make_world(spec, seed=seed, vocab_size=cap)
    return synth.make_world(regime, seed=seed)


# ---------------------------------------------------------------------------------- traces
#: A trace's regime name is this prefix and the trace file's stem (``"trace:tiny-b256"``): the
#: recorded rounds of a real decode stand where a regime stands (``docs/traces.md``, "The
#: sweep on a trace").
TRACE_PREFIX = "trace:"


def is_trace(regime: str) -> bool:
    """Whether ``regime`` names a trace (``"trace:<name>"``) rather than a synthetic regime."""
    return isinstance(regime, str) and regime.startswith(TRACE_PREFIX)


def trace_regime(path: str | Path) -> str:
    """The regime name of the trace file ``path``: ``"trace:" + its stem``."""
    return TRACE_PREFIX + Path(path).stem


def _file_key(path: str | Path) -> tuple[str, int, int]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"trace: no such file {str(p)!r}")
    st = p.stat()
    return str(p.resolve()), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=4)
def _load_trace(key: tuple[str, int, int]):
    return load_trace(key[0])


def trace_for(path: str | Path):
    """The (cached) :class:`~treespec_sim.trace.Trace` of ``path`` (reloaded when the file
    changes); ``ValueError`` naming the file if it is missing or not a trace."""
    try:
        return _load_trace(_file_key(path))
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith("trace:") else f"trace: {msg}") from None


@functools.lru_cache(maxsize=4)
def _digest(key: tuple[str, int, int]) -> str:
    h = hashlib.sha256()
    with open(key[0], "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def trace_sha256(path: str | Path) -> str:
    """The SHA-256 of the trace file ``path`` (hex): its identity in cell fingerprints."""
    return _digest(_file_key(path))


def unit_ci(values: np.ndarray, units: np.ndarray | None):
    """:func:`treespec_sim.stats.mean_ci` over ``values`` (one unit each, ``units`` None) or
    over the groups of equal ``units`` (a trace's decoded prompts, in first-seen order)."""
    values = np.asarray(values, dtype=np.float64)
    if units is None:
        return mean_ci(values)
    units = np.asarray(units)
    return mean_ci([values[units == u] for u in dict.fromkeys(units.tolist())])


def check_trace_temperatures(temps, tr, key: str, regime: str) -> None:
    """Every temperature of ``temps`` recorded in the trace ``tr`` (else ``ValueError`` naming
    ``key``, the temperatures and the recorded ones)."""
    missing_t = [t for t in temps if float(t) not in tr.temperatures]
    if missing_t:
        raise ValueError(f"{key}: T = {', '.join(f'{t:g}' for t in missing_t)} not recorded "
                         f"in the trace {regime!r} (recorded: "
                         f"{', '.join(f'{t:g}' for t in tr.temperatures)})")


def check_trace_budget(budget: int, tr, key: str, regime: str) -> None:
    """``budget`` at most the trace's ``B_max`` and, for a top-k trace, its drafter's ``K``
    (else ``ValueError`` naming ``key``)."""
    if budget > tr.b_max:
        raise ValueError(f"{key}: budget {budget} is above the trace {regime!r}'s recorded "
                         f"B_max = {tr.b_max} (its largest replayable budget)")
    if tr.top_k and budget > tr.top_k:
        raise ValueError(f"{key}: budget {budget} is above the drafter's recorded top "
                         f"K = {tr.top_k} per depth in the trace {regime!r}")


@dataclass(frozen=True)
class RunSettings:
    """What every cell shares: the seed, the latency model for throughput columns, the regimes
    the plan read from files (fitted regimes: every worker registers them before it runs a
    cell) and, for a sweep on a trace, the trace file and its SHA-256 (cells of a
    ``"trace:..."`` regime read it: :func:`trace_for`)."""

    seed: int = 0
    cost_model: str = "h200-qwen3-8b"
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    trace: str = ""
    trace_sha256: str = ""
    regimes: tuple = ()

    def register_regimes(self) -> None:
        """Make the plan's file regimes known by name in this process
        (:func:`treespec_sim.synth.register_regime`)."""
        for spec in self.regimes:
            synth.register_regime(spec)

    def cost(self, name: str):
        """The latency model ``name`` (:func:`cost_model`, with this sweep's trace)."""
        return cost_model(name, self.trace)

    def trace_backend(self, regime: str):
        """The trace a cell of ``regime`` runs on (``ValueError`` if the sweep has none or
        another one)."""
        if not self.trace:
            raise ValueError(f"regime {regime!r} names a trace, but this sweep has none (give "
                             "--trace FILE or trace = \"FILE\")")
        if trace_regime(self.trace) != regime:
            raise ValueError(f"regime {regime!r} is not this sweep's trace "
                             f"{trace_regime(self.trace)!r}")
        return trace_for(self.trace)


#: The cost model name of a trace's own recorded timings (:func:`recorded_cost`): what a sweep
#: on a trace prices its throughput with by default.
RECORDED_COST = "recorded"


def recorded_cost(tr):
    """The latency model of a trace's recorded timings: the models and machine the trace was
    recorded on (``docs/traces.md``), not a preset's.

    Every recorded round measured its drafter pass (``draft_s``) and one verification forward
    of its superset tree (``verify_s`` over ``tree_size + 1`` query tokens), and of its sampled
    tree where one was recorded. The median seconds at each recorded query-token count, fitted
    by a non-decreasing convex sequence (:func:`treespec_sim.cost.fit_monotone_convex`), are
    the knots of a :class:`~treespec_sim.cost.PiecewiseLinearCost` (linear between them; past
    them it extends and says so, :class:`~treespec_sim.cost.ExtrapolationWarning`); the
    drafter's cost is the median ``draft_s``. Measured, not an estimate, but interpolated
    between the few tree sizes a decode records.
    """
    a = tr.arrays
    n = [np.asarray(a["tree_size"], dtype=np.float64) + 1]
    t = [np.asarray(a["verify_s"], dtype=np.float64)]
    if "s_verify_s" in a and "s_size" in a:
        n.append(np.asarray(a["s_size"], dtype=np.float64) + 1)
        t.append(np.asarray(a["s_verify_s"], dtype=np.float64))
    tokens, seconds = np.concatenate(n), np.concatenate(t)
    knots = np.unique(tokens)
    medians = np.array([float(np.median(seconds[tokens == k])) for k in knots])
    h = tr.header
    models = h.get("models") or {}
    where = f"{h.get('device', '?')}, {models.get('target', '?')} + {models.get('drafter', '?')}"
    return PiecewiseLinearCost(
        tuple(knots), tuple(fit_monotone_convex(knots, medians)),
        float(np.median(a["draft_s"])), name=RECORDED_COST,
        provenance=(f"the trace's recorded timings ({where}; {len(a['draft_s'])} rounds, "
                    f"query tokens {int(knots[0])}..{int(knots[-1])}, linear between the "
                    "recorded sizes)"),
        estimate=False)


def cost_model(name: str, trace: str = ""):
    """The latency model ``name``: :data:`RECORDED_COST` is the sweep's trace's own timings
    (:func:`recorded_cost`; ``ValueError`` without a trace), anything else
    :func:`treespec_sim.cost.get_cost_model`'s."""
    if name == RECORDED_COST:
        if not trace:
            raise ValueError(f"cost model {RECORDED_COST!r} is a trace's recorded timings; "
                             "this sweep has no trace (give --trace FILE)")
        return recorded_cost(trace_for(trace))
    return get_cost_model(name)


def throughput_columns(taus: np.ndarray, sizes: np.ndarray, cost, cost_name: str) -> dict:
    """The throughput columns of a row: modelled round time, tokens/s, speedup over AR."""
    seconds = np.asarray(round_time(cost, sizes), dtype=np.float64)
    thr = throughput(taus, seconds)
    return {"cost_model": cost_name, "round_time_s": float(seconds.mean()),
            "throughput_tok_s": thr, "speedup_vs_ar": thr * float(cost.verify_cost(1))}


def check_cost_models(names: Sequence[str], family: str) -> None:
    """Every name a latency preset or file :func:`treespec_sim.cost.get_cost_model` reads, or
    :data:`RECORDED_COST` (a trace's timings: checked against the plan's trace)."""
    for c in names:
        if c == RECORDED_COST:
            continue
        try:
            get_cost_model(c)
        except ValueError as exc:
            raise ValueError(f"{family}.cost_models: {exc}") from None


# ---------------------------------------------------------------------------------- claims
# (the verdict rule itself, :func:`judge`, is :mod:`treespec_sim.verdicts`'s)
#: Pages that explain a result which does not go the way a paper (or our own theory) says (a
#: claim's ``page``). Paths are from the repository root; the report rewrites them relative to
#: the run folder (where summary.md lies), results_page relative to its page.
UNIVER_PAGE = "[univer.md §3–4](docs/theory/univer.md#4-synthetic-results-at-t--1)"
TSUBAME_PAGE = "[tsubame.md §4](docs/theory/tsubame.md#4-results-synthetic-docsresultsstochastic)"

@dataclass(frozen=True)
class Claim:
    """A claim and what the sweep measured about it: a number, its interval, a verdict.

    Attributes
    ----------
    text : str
        The claim as stated (by a paper, or by the theory page ``page`` links).
    estimate, low, high : float
        The measured number and its 95% interval (``low <= estimate <= high``), in ``unit``.
    unit : str
        What the number counts, e.g. ``"tokens per round"`` or ``"%"``.
    verdict : str
        One of :data:`VERDICTS`, by :func:`judge` (:meth:`judged` builds a claim so).
    reason : str
        Why the verdict is what it is, when the number alone does not say (e.g. a number that
        contradicts the claim's label by design); for a headline, where else it was measured.
    page : str
        A Markdown link to the theory page that discusses the claim (from the repository
        root; the report rewrites it relative to the file it writes).
    scope : str
        Where the number comes from (``"math500, T = 0"``).
    family : str
        The family that measured it.
    units, unit_name : int, str
        The independent units the interval rests on and what they are (0: not known).
    needed : float
        For an undecided claim, the units that would decide it (``inf``: none would; 0: not
        undecided, or not known).
    seconds_per_unit : float
        What one unit cost in this run (the cell's wall clock over its units; 0: not known),
        so that a headline can say what deciding its undecided cells would cost.
    """

    text: str
    estimate: float
    low: float
    high: float
    unit: str
    verdict: str
    reason: str = ""
    page: str = ""
    scope: str = ""
    family: str = ""
    units: int = 0
    unit_name: str = "contexts"
    needed: float = 0.0
    seconds_per_unit: float = 0.0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(map(repr, VERDICTS))}; got "
                             f"{self.verdict!r}")
        nums = (self.estimate, self.low, self.high)
        if any(not isinstance(x, int | float) or math.isnan(x) for x in nums):
            raise ValueError(f"estimate, low and high must be numbers; got {nums!r}")
        # 1e-9: an estimate computed apart from its interval may differ by rounding
        if not self.low - 1e-9 <= self.estimate <= self.high + 1e-9:
            raise ValueError(f"the interval [{self.low}, {self.high}] must hold the estimate "
                             f"{self.estimate}")

    @classmethod
    def judged(cls, text: str, estimate: float, low: float, high: float, unit: str,
               claimed: ClaimedRange, *, units: int | None = None,
               unit_name: str = "contexts", reason: str = "", **kw) -> Claim:
        """A claim whose verdict is :func:`judge`'s on its interval; ``reason`` is put before
        the rule's own (e.g. why a claim reads as it does)."""
        j = judge(estimate, low, high, claimed, units=units, unit_name=unit_name, unit=unit)
        why = "; ".join(x for x in (reason, j.reason) if x)
        return cls(text, estimate, low, high, unit, j.verdict, reason=why,
                   units=units or 0, unit_name=unit_name, needed=j.needed, **kw)


def _number_or_none(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def interval_units(row: Row) -> tuple[int, str]:
    """``(n, what)``: the independent units a row's intervals rest on -- a trace's recorded
    prompts (``trace_units``), decoded sequences (``sequences``), else its paired contexts
    (``diff_contexts``) or contexts (``rounds``)."""
    for key, what in (("trace_units", "recorded prompts"), ("sequences", "decoded sequences"),
                      ("diff_contexts", "contexts"), ("rounds", "contexts")):
        v = _number_or_none(row.get(key))
        if v is not None:
            return int(v), what
    return 0, "contexts"


def seconds_per_unit(rows: Sequence[Row], row: Row, units: int) -> float:
    """What one unit of ``row``'s cell cost in its run: the cell's wall clock (the ``wall_s``
    of every row of the same ``cell``) over ``units`` (0 when not known)."""
    cell = row.get("cell")
    if not cell or not units:
        return 0.0
    wall = sum(_number_or_none(r.get("wall_s")) or 0.0 for r in rows if r.get("cell") == cell)
    return wall / units


def smoke_test(claims: Sequence[Claim]) -> str:
    """The banner of a run too small for verdicts (empty when every claim has one): how many
    claims rest on fewer than :data:`MIN_UNITS` units a cell."""
    small = [c for c in claims if c.verdict == NO_VERDICT]
    if not small:
        return ""
    fewest = min((c for c in small if c.units), key=lambda c: c.units, default=None)
    n = f" (as few as {fewest.units} {fewest.unit_name})" if fewest else ""
    return (f"**Smoke test, not a result.** {len(small)} of {len(claims)} claims rest on fewer "
            f"than {MIN_UNITS} independent units a cell{n}, the minimum a verdict needs: "
            "their numbers are reported without verdicts. Run the `paper` preset (or more "
            "rounds, or a trace of at least "
            f"{MIN_UNITS} prompts) for verdicts.")


#: Order of verdicts from the weakest support of a claim to the strongest.
_RANK = {"does not hold": 0, "undecided": 1, NO_VERDICT: 1, "holds": 2}


def _cost_text(seconds: float) -> str:
    """``"≈ 40 s"``, ``"≈ 12 min"``, ``"≈ 3.5 h"`` of one worker's time."""
    if seconds < 120:
        return f"≈ {seconds:.0f} s"
    if seconds < 7200:
        return f"≈ {seconds / 60:.0f} min"
    return f"≈ {seconds / 3600:.1f} h"


def deciding_cost(evidence: Sequence[Claim]) -> str:
    """What deciding the undecided cells of ``evidence`` would take: ``"deciding the 2
    undecided cells would take ≈ 140 and ≈ 2,300 contexts (now 33; ≈ 3 min of one worker at
    this run's pace)"``; what no number of units decides is said so. Empty if none is
    undecided."""
    open_ = [c for c in evidence if c.verdict == "undecided"]
    if not open_:
        return ""
    finite = sorted((c for c in open_ if math.isfinite(c.needed) and c.needed > 0),
                    key=lambda c: c.needed)
    never = len(open_) - len(finite)
    parts = []
    if finite:
        name = finite[0].unit_name
        now = "/".join(sorted({f"{c.units:,}" for c in finite if c.units}))
        nums = [f"≈ {int(c.needed):,}" for c in finite]
        shown = nums[0] if len(nums) == 1 else (f"{nums[0]} to {nums[-1]}")
        extra = sum(max(0.0, c.needed - c.units) * c.seconds_per_unit for c in finite)
        cost = (f"; {_cost_text(extra)} more of one worker at this run's pace" if extra > 0
                else "")
        parts.append(f"deciding {'it' if len(open_) == 1 else f'{len(finite)} of them'} "
                     f"would take {shown} {name} a cell (now {now or '?'}{cost})")
    if never:
        parts.append(f"{never} {'sits' if never == 1 else 'sit'} too close to an edge for "
                     "sampling to decide")
    return "; ".join(parts)


def headline(text: str, evidence: Sequence[Claim], *, margin: Callable[[Claim], float],
             page: str = "", cells: str = "cells", reason: str = "") -> Claim | None:
    """One claim from its per-cell evidence: the weakest cell's number, the verdict of all.

    The verdict is ``does not hold`` when any cell does not hold, else ``no verdict`` when a
    cell has none (a smoke test), ``holds`` when every cell holds, else ``undecided``. The
    number shown is the weakest cell's (lowest verdict, then the least ``margin``: how far the
    cell's interval lies on the claim's side), so a headline that holds is the least
    favourable cell, and one that does not hold shows a cell where it fails. An undecided
    headline says what deciding its undecided cells would take (:func:`deciding_cost`).

    Parameters
    ----------
    text : str
        The claim.
    evidence : sequence of Claim
        One per cell, with ``scope`` naming the cell (none: returns None).
    margin : callable
        ``Claim -> float``; larger is more in the claim's favour.
    page : str
        The theory page (default: the evidence's first).
    cells : str
        What one piece of evidence is, in the reason (``"cells"``, ``"regimes"``).
    reason : str
        Prepended to the reason (e.g. why the claim reads as it does).
    """
    if not evidence:
        return None
    weakest = min(evidence, key=lambda c: (_RANK[c.verdict], margin(c)))
    counts = {v: sum(c.verdict == v for c in evidence) for v in VERDICTS}
    n = len(evidence)
    verdict = ("does not hold" if counts["does not hold"] else
               NO_VERDICT if counts[NO_VERDICT] else
               "holds" if counts["holds"] == n else "undecided")
    tally = ", ".join(f"{v} in {counts[v]}" for v in VERDICTS if counts[v]) + f" of {n} {cells}"
    shown = f"shown: {'the weakest, ' if n > 1 else ''}{weakest.scope}" + (
        f" ({weakest.reason})" if weakest.reason else "")
    parts = [reason, tally, shown]
    miss = (1 - LEVEL) * n
    if 0 < counts["does not hold"] <= miss:
        # a few contrary cells among many can be chance: say how many intervals would miss
        parts.append(f"by chance alone about {miss:.1f} of {n} {100 * LEVEL:g}% intervals miss")
    if verdict == "undecided":
        parts.append(deciding_cost(evidence))
    return Claim(text, weakest.estimate, weakest.low, weakest.high, weakest.unit, verdict,
                 reason="; ".join(p for p in parts if p), page=page or weakest.page,
                 scope=weakest.scope, family=weakest.family, units=weakest.units,
                 unit_name=weakest.unit_name, needed=weakest.needed,
                 seconds_per_unit=weakest.seconds_per_unit)


# ---------------------------------------------------------------------------------- rows
class Row:
    """A result row: the base of every family's row schema.

    A family's schema is a frozen, keyword-only dataclass subclassing this (``DDTreeRow``,
    ...): its fields are the :data:`COLUMNS` it fills, in ``results.csv``'s order (``family``
    first, ``wall_s`` last), then its own values that are not columns (per-context values,
    exit laws, ...) and the two the sweep keeps with every row, ``cell`` (the cell's key) and
    ``extrapolated`` (the cell's latency-model extrapolations). ``None`` is an empty value
    (an empty cell of ``results.csv``). One writer writes every family's rows
    (:func:`treespec_sim.sweep_store.write_results`); a cell file keeps :meth:`as_dict` and is
    read back with :meth:`from_dict`.
    """

    def get(self, column: str, default: Any = None) -> Any:
        """The value of ``column``, or ``default`` where this family's rows have no such field
        or leave it empty (the report and the console read columns across families)."""
        value = getattr(self, column, None)
        return default if value is None else value

    def as_dict(self) -> dict[str, Any]:
        """Every field with a value (empty ones left out), in field order."""
        return {f.name: v for f in dataclasses.fields(self)
                if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """A row from :meth:`as_dict`'s form (a cell file's JSON); ``ValueError`` naming a key
        the schema does not have."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}")
        return cls(**data)

    def stamped(self, cell: Cell, settings: RunSettings, wall_s: float) -> Self:
        """The row as the sweep keeps it: its family, the sweep's seed and the grid's worlds
        where the runner left them empty, the cell's key and ``wall_s`` (its share of the
        cell's wall clock)."""
        return dataclasses.replace(
            self, family=cell.family, seed=settings.seed if self.seed is None else self.seed,
            worlds=cell.grid.worlds if self.worlds is None else self.worlds, wall_s=wall_s,
            cell=cell.key)


# ---------------------------------------------------------------------------------- families
@dataclass(frozen=True)
class FigureSpec:
    """One figure of a family: its title (on the results page), how to draw it, and which
    runs have it (``applies(rows)``; default: every run with rows of the family)."""

    title: str
    draw: Callable[[list[Row], Path], None]
    applies: Callable[[list[Row]], bool] = bool


@dataclass(frozen=True)
class Family:
    """What the registry holds for one family: its computing module's names and its
    presenting module's, read once (:meth:`of`).

    Attributes
    ----------
    name : str
        The family's name: its ``[table]`` in a config file, the rows' ``family``.
    grid : type
        Its frozen, validated grid dataclass (``family`` and ``unit`` class attributes,
        ``cells()``; optionally ``cell_axes``: the fields each cell takes one value of, which
        the sweep leaves out of a cell's settings fingerprint).
    row : type
        Its row schema (a :class:`Row` dataclass).
    run : callable
        ``run(cell, settings) -> list[row]``: one cell's rows.
    preset : callable
        ``preset(name)``: its grid in the sweep preset ``name`` (``"paper"``, ``"quick"``,
        its own name), None if that preset leaves it out.
    preset_note : str
        What its own preset (``--preset <name>``) runs.
    tables : callable
        ``tables(rows) -> list[str]``: its section of ``summary.md`` (Markdown lines).
    figures : mapping str -> FigureSpec
        File name -> figure, drawn from its rows.
    claims : callable
        ``claims(rows) -> list[Claim]``: its headline claims, measured on ``rows``.
    console_rows : callable
        ``console_rows(rows)``: the few of its rows the console table shows.
    presets : mapping
        Its further sweep presets, name -> (what it runs, grid factory).
    check_trace, trace_preset : callable or None
        A family that runs on traces: ``check_trace(grid, trace, regime)`` refuses what the
        trace does not hold, ``trace_preset(trace, regime)`` its grid for ``--trace FILE``.
    """

    name: str
    grid: type
    row: type[Row]
    run: Callable[[Cell, RunSettings], list[Row]]
    preset: Callable[[str], Any]
    preset_note: str
    tables: Callable[[list[Row]], list[str]]
    figures: Mapping[str, FigureSpec]
    claims: Callable[[list[Row]], list[Claim]]
    console_rows: Callable[[list[Row]], list[Row]]
    presets: Mapping[str, tuple[str, Callable[[], Any]]] = field(default_factory=dict)
    check_trace: Callable[..., None] | None = None
    trace_preset: Callable[..., Any] | None = None

    #: What the computing module names (the last three optional), and the presenting one.
    COMPUTING: ClassVar[tuple[str, ...]] = ("name", "grid", "row", "run", "preset",
                                            "preset_note")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("presets", "check_trace", "trace_preset")
    PRESENTING: ClassVar[tuple[str, ...]] = ("tables", "figures", "claims", "console_rows")

    @classmethod
    def of(cls, computing: Any, presenting: Any = None) -> Family:
        """The family of a computing module and a presenting one (``presenting`` None: one
        module holds both); ``ValueError`` naming what either lacks."""
        presenting = computing if presenting is None else presenting
        missing = ([a for a in cls.COMPUTING if not hasattr(computing, a)]
                   + [a for a in cls.PRESENTING if not hasattr(presenting, a)])
        if missing:
            who = getattr(computing, "name", None) or getattr(computing, "__name__", computing)
            raise ValueError(f"family {who!r} lacks {', '.join(missing)} (see "
                             "treespec_sim.families.Family)")
        return cls(**{a: getattr(computing, a) for a in cls.COMPUTING},
                   **{a: getattr(presenting, a) for a in cls.PRESENTING},
                   **{a: getattr(computing, a) for a in cls.OPTIONAL
                      if hasattr(computing, a)})
