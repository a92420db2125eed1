r"""What every sweep family shares: cells, worlds, settings, grid checks, claims, the protocol.

A *family* (:class:`Family`) is one module of :mod:`treespec_sim.families` that owns one kind
of comparison from end to end: its *grid* (a frozen, validated dataclass describing which
regimes, temperatures, budgets, ... it compares), the *cells* the grid expands into (the unit
of work, of resumption and of distribution), the runner of one cell (through
:func:`treespec_sim.engine.run_round`), the rows it returns, its tables and figures in the
report, and its *claims* (:class:`Claim`: a statement, the measured number with its interval
and unit, and a verdict). The sweep and the report loop over the registry
(:data:`treespec_sim.families.FAMILIES`) and never name a family.

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

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from .. import synth
from ..cost import get_cost_model, round_time
from ..stats import LEVEL, mean_ci, throughput
from ..trace import load as load_trace
from ..validation import check_temperature

__all__ = ["CALIBRATED", "COLUMNS", "SYNTHETIC", "TRACE_PREFIX", "VERDICTS", "Cell", "Claim",
           "Family", "FigureSpec", "RunSettings", "WorldShare", "as_tuple", "check_budgets",
           "check_regimes", "check_rounds", "check_temperatures", "check_trace_budget",
           "check_trace_temperatures", "check_worlds", "headline",
           "is_trace", "paper_regimes", "pick_regimes", "shares", "throughput_columns",
           "trace_for", "trace_regime", "trace_sha256", "unit_ci", "world_for",
           "world_shares"]

#: Columns of ``results.csv``, in order (cells that do not define a column leave it empty).
COLUMNS = (
    "family", "regime", "method", "verifier", "drafter", "temperature", "budget", "cost_model",
    "rounds", "seed", "tau_mean", "tau_ci_low", "tau_ci_high",
    "worlds", "tau_world_means", "tau_world_ci_low", "tau_world_ci_high", "tree_size_mean",
    "coverage_mean", "round_time_s", "throughput_tok_s", "speedup_vs_ar",
    "lost_uncovered", "lost_budget", "lost_depth_cap",
    "rel_to_baseline", "rel_ci_low", "rel_ci_high", "rel_world_means", "rel_world_ci_low",
    "rel_world_ci_high", "baseline", "rel_traversal", "rel_traversal_ci_low",
    "rel_traversal_ci_high", "diff_to_baseline", "diff_ci_low", "diff_ci_high",
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
    """``x`` (one value or a list) as a tuple of ``cast`` values; a bad value names ``key``."""
    items = tuple(x) if isinstance(x, list | tuple) else (x,)
    out = []
    for v in items:
        if cast in (int, float) and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise ValueError(f"{key}: {v!r} is not a number")
        if cast is int and isinstance(v, float) and not v.is_integer():
            raise ValueError(f"{key}: {v!r} is not an integer")
        if cast is str and not isinstance(v, str):
            raise ValueError(f"{key}: {v!r} is not a string")
        out.append(cast(v))
    return tuple(out)


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
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"{family}.rounds must be an integer >= 2; got {rounds!r}")


def check_worlds(worlds: int, rounds: int, family: str) -> None:
    """``1 <= worlds <= rounds`` (every world needs a context)."""
    if isinstance(worlds, bool) or not isinstance(worlds, int) or worlds < 1:
        raise ValueError(f"{family}.worlds must be an integer >= 1; got {worlds!r}")
    if rounds < worlds:
        raise ValueError(f"{family}.worlds must be at most {family}.rounds (every world needs "
                         f"a context); got worlds={worlds}, rounds={rounds}")


def check_budgets(budgets: tuple[int, ...], family: str) -> None:
    """At least one budget, every one a positive integer."""
    if not budgets or any(not isinstance(b, int) or b < 1 for b in budgets):
        raise ValueError(f"{family}.budgets must be positive integers; got {budgets!r}")


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
    if isinstance(worlds, bool) or not isinstance(worlds, int) or worlds < 1:
        raise ValueError(f"worlds must be an integer >= 1; got {worlds!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < worlds:
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


def throughput_columns(taus: np.ndarray, sizes: np.ndarray, cost, cost_name: str) -> dict:
    """The throughput columns of a row: modelled round time, tokens/s, speedup over AR."""
    seconds = np.asarray(round_time(cost, sizes), dtype=np.float64)
    thr = throughput(taus, seconds)
    return {"cost_model": cost_name, "round_time_s": float(seconds.mean()),
            "throughput_tok_s": thr, "speedup_vs_ar": thr * float(cost.verify_cost(1))}


def check_cost_models(names: Sequence[str], family: str) -> None:
    """Every name a latency preset or file :func:`treespec_sim.cost.get_cost_model` reads."""
    for c in names:
        try:
            get_cost_model(c)
        except ValueError as exc:
            raise ValueError(f"{family}.cost_models: {exc}") from None


# ---------------------------------------------------------------------------------- claims
#: The verdicts a claim can have.
VERDICTS = ("holds", "does not hold", "undecided")


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
        One of :data:`VERDICTS`: the interval shows the claim (``holds``), contradicts it
        (``does not hold``), or neither (``undecided``).
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


#: Order of verdicts from the weakest support of a claim to the strongest.
_RANK = {"does not hold": 0, "undecided": 1, "holds": 2}


def headline(text: str, evidence: Sequence[Claim], *, margin: Callable[[Claim], float],
             page: str = "", cells: str = "cells", reason: str = "") -> Claim | None:
    """One claim from its per-cell evidence: the weakest cell's number, the verdict of all.

    The verdict is ``holds`` when every cell holds, ``does not hold`` when any cell does not,
    else ``undecided``. The number shown is the weakest cell's (lowest verdict, then the least
    ``margin``: how far the cell's interval lies on the claim's side), so a headline that holds
    is the least favourable cell, and one that does not hold shows a cell where it fails.

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
               "holds" if counts["holds"] == n else "undecided")
    tally = ", ".join(f"{v} in {counts[v]}" for v in VERDICTS if counts[v]) + f" of {n} {cells}"
    shown = f"shown: {'the weakest, ' if n > 1 else ''}{weakest.scope}" + (
        f" ({weakest.reason})" if weakest.reason else "")
    parts = [reason, tally, shown]
    miss = (1 - LEVEL) * n
    if 0 < counts["does not hold"] <= miss:
        # a few contrary cells among many can be chance: say how many intervals would miss
        parts.append(f"by chance alone about {miss:.1f} of {n} {100 * LEVEL:g}% intervals miss")
    return Claim(text, weakest.estimate, weakest.low, weakest.high, weakest.unit, verdict,
                 reason="; ".join(p for p in parts if p), page=page or weakest.page,
                 scope=weakest.scope, family=weakest.family)


# ---------------------------------------------------------------------------------- protocol
@dataclass(frozen=True)
class FigureSpec:
    """One figure of a family: its title (on the results page) and how to draw it."""

    title: str
    draw: Callable[[list[dict], Path], None]


@runtime_checkable
class Family(Protocol):
    """What the registry holds: one module per family satisfies it.

    Attributes
    ----------
    name : str
        The family's name: its ``[table]`` in a config file, the rows' ``family``.
    grid : type
        Its frozen, validated grid dataclass (``family`` and ``unit`` class attributes,
        ``cells()``; optionally ``cell_axes``: the fields each cell takes one value of, which the
        sweep leaves out of a cell's settings fingerprint).
    figures : mapping str -> FigureSpec
        File name -> figure, drawn from the family's rows.
    preset_note : str
        What its own preset (``--preset <name>``) runs.
    """

    name: str
    grid: type
    figures: Mapping[str, FigureSpec]
    preset_note: str

    def run(self, cell: Cell, settings: RunSettings) -> list[dict]:
        """Run one cell; rows with :data:`COLUMNS` keys (plus extras)."""

    def tables(self, rows: list[dict]) -> list[str]:
        """The family's section of ``summary.md`` (Markdown lines)."""

    def claims(self, rows: list[dict]) -> list[Claim]:
        """Its headline claims, one per claim, measured on ``rows``."""

    def console_rows(self, rows: list[dict]) -> list[dict]:
        """The few of its rows the console table shows (the rest are in ``results.csv``)."""

    def preset(self, name: str):
        """Its grid in the sweep preset ``name`` (``"paper"``, ``"quick"``, its own name);
        None if that preset leaves it out."""
