r"""The ``ddtree`` family: DDTree, the DFlash chain and the dynamic tree across budgets and T.

Exact :math:`E[\tau]`, coverage and the exit-law decomposition of lost target mass by depth
and cause (``docs/theory/exit_law.md``) for DDTree at every budget of the grid, the argmax
chain and optionally the dynamic (EAGLE-2-like) tree, on the same contexts, verified with
``follow`` (or ``tev``). DDTree's trees are nested, so one round at the largest budget gives
every smaller budget exactly (:meth:`treespec_sim.engine.Round.at_budget`). With a
``precision`` target the cell adds contexts until every chain and DDTree interval is within it
(``docs/usage.md``, "Precision").

Its rows (:class:`DDTreeRow`) are presented, with its claim (DDTree's tree accepts more tokens
per round than the chain of the same drafter, ``docs/theory/ddtree_surrogate.md``), by
:mod:`.ddtree_report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..engine import Round, run_round
from ..exits import EXIT_CAUSES
from ..seeds import cell_rng
from ..stats import mean_ci, world_columns
from ..validation import check_budget, check_temperature, is_int, is_number
from ..verify import MATCHING_RULES, RULES
from .base import (
    Cell,
    Row,
    RunSettings,
    as_tuple,
    check_budgets,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_trace_budget,
    check_trace_temperatures,
    check_worlds,
    is_trace,
    paper_regimes,
    pick_regimes,
    shares,
    throughput_columns,
    unit_ci,
    world_for,
)

__all__ = ["DDTreeGrid", "DDTreeRow", "cell_rng", "check_trace", "grid", "name", "preset",
           "preset_note", "row", "run", "trace_preset"]

#: The family's name (its ``[ddtree]`` table in a config, the rows' ``family``).
name = "ddtree"
#: What ``--preset ddtree`` runs.
preset_note = "DDTree and the chain, 8 budgets x T in {0, 1}, 64 rounds"


@dataclass(frozen=True)
class DDTreeGrid:
    """DDTree / chain / dynamic tree across budgets and temperatures (deterministic tokens)."""

    family: ClassVar[str] = "ddtree"
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    methods: tuple[str, ...] = ("chain", "ddtree")
    budgets: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    rounds: int = 64
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3
    rule: str = "follow"
    #: Target relative half-width of every chain/DDTree τ interval (``0``: exactly ``rounds``
    #: contexts). With a target, ``rounds`` is the pilot: the cell adds contexts (the same
    #: streams continued, split evenly over the worlds) until every such interval is within
    #: ``precision`` of its mean or ``max_rounds`` is reached (:func:`_contexts_needed`).
    precision: float = 0.0
    #: Cap on a cell's contexts when ``precision`` is set (``0``: ``64 x rounds``).
    max_rounds: int = 0

    def __post_init__(self) -> None:
        if not is_number(self.precision, numpy=False) or not 0.0 <= self.precision < 1.0:
            raise ValueError(f"ddtree.precision must be a number in [0, 1) (0 = fixed rounds); "
                             f"got {self.precision!r}")
        if (not is_int(self.max_rounds, numpy=False) or self.max_rounds < 0
                or (self.max_rounds and self.max_rounds < self.rounds)):
            raise ValueError(f"ddtree.max_rounds must be 0 or an integer >= rounds "
                             f"({self.rounds}); got {self.max_rounds!r}")
        for name, cast in (("regimes", str), ("methods", str), ("budgets", check_budget),
                           ("temperatures", check_temperature)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast,
                                                    f"{self.family}.{name}"))
        check_regimes(self.regimes, self.family)
        for m in self.methods:
            if m not in ("chain", "ddtree", "dynamic"):
                raise ValueError(f"ddtree.methods: unknown method {m!r}; known: chain, ddtree, "
                                 "dynamic")
        if self.rule not in MATCHING_RULES["deterministic"]:
            raise ValueError(f"ddtree.rule must be a rule for deterministic trees "
                             f"({', '.join(MATCHING_RULES['deterministic'])}); got "
                             f"{self.rule!r}; known rules: {', '.join(sorted(RULES))}")
        check_budgets(self.budgets, self.family)
        check_temperatures(self.temperatures, self.family)
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)

    def cells(self) -> list[Cell]:
        """One cell per (regime, T): every budget and method on the same contexts."""
        return [Cell(self, r, t, max(self.budgets)) for r in self.regimes
                for t in self.temperatures]


#: The family's grid class (the registry's ``grid``).
grid = DDTreeGrid


@dataclass(frozen=True, kw_only=True)
class DDTreeRow(Row):
    """One (method, budget) of a ddtree cell: exact E[τ] pooled over its worlds' contexts and
    between worlds, coverage, the exit law (lost mass by cause; by depth and cause in
    ``exit_by_depth_cause``, ``(L + 1, 3)``), modelled throughput, and for the trees the paired
    difference to the chain on the same contexts (``diff_*``, ``baseline = "chain"``);
    ``trace_units``: a trace's recorded prompts, the units of its intervals. A chain's
    ``budget`` is its ``L`` nodes."""

    family: str = "ddtree"
    regime: str
    method: str
    verifier: str
    temperature: float
    budget: int
    cost_model: str | None = None
    rounds: int
    seed: int | None = None
    tau_mean: float
    tau_ci_low: float
    tau_ci_high: float
    worlds: int | None = None
    tau_world_means: list[float] | None = None
    tau_world_ci_low: float | None = None
    tau_world_ci_high: float | None = None
    tree_size_mean: float | None = None
    coverage_mean: float | None = None
    round_time_s: float | None = None
    throughput_tok_s: float | None = None
    speedup_vs_ar: float | None = None
    lost_uncovered: float | None = None
    lost_budget: float | None = None
    lost_depth_cap: float | None = None
    baseline: str | None = None
    diff_to_baseline: float | None = None
    diff_ci_low: float | None = None
    diff_ci_high: float | None = None
    diff_contexts: int | None = None
    wall_s: float | None = None
    exit_by_depth: list[float] | None = None
    exit_by_depth_cause: list[list[float]] | None = None
    trace_units: int | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = DDTreeRow


@dataclass
class _Tally:
    """Per-round facts of one (method, budget) label of the ddtree family."""

    tau: list = field(default_factory=list)
    world: list = field(default_factory=list)
    size: list = field(default_factory=list)
    cov: list = field(default_factory=list)
    lost: list = field(default_factory=list)
    by_depth: list = field(default_factory=list)
    by_depth_cause: list = field(default_factory=list)

    def add(self, rnd: Round, world: int) -> None:
        decomp = rnd.exits
        self.tau.append(rnd.expected_tau)
        self.world.append(world)
        self.size.append(rnd.tree_size)
        self.cov.append(decomp.coverage)
        self.lost.append(decomp.by_depth_cause.sum(axis=0))
        self.by_depth.append(decomp.by_depth)
        self.by_depth_cause.append(decomp.by_depth_cause)

    def world_means(self) -> list[float]:
        tau, world = np.array(self.tau), np.array(self.world)
        return [float(tau[world == w].mean()) for w in np.unique(world)]


def run(cell: Cell, settings: RunSettings) -> list[DDTreeRow]:
    """Every budget from one tree per context: DDTree's trees are nested, so the round at the
    largest budget gives each smaller budget's exact E[tau], coverage and exit law
    (:meth:`treespec_sim.engine.Round.at_budget`). World after world (:func:`world_shares`),
    each with its own :func:`cell_rng`; on a trace, its recorded rounds (:func:`_run_trace`)."""
    g: DDTreeGrid = cell.grid
    budgets = sorted(g.budgets)
    if is_trace(cell.regime):
        return _run_trace(cell, settings, budgets)
    tally = {k: _Tally() for k in _labels(g, budgets)}
    parts = shares(cell, settings)
    streams = [cell_rng(share.seed, cell.key) for share in parts]  # continued by later stages
    drawn: list[list] = [[] for _ in parts]  # each world's contexts, in stream order
    groups = [m for m in ("chain", "ddtree") if m in g.methods] or ["dynamic"]
    todo = {m: [share.rounds for share in parts] for m in groups}
    depth = 0
    while True:
        depth = _ddtree_contexts(cell, parts, streams, drawn, todo, tally, budgets) or depth
        todo = _contexts_needed(g, tally, groups)
        if not any(any(t) for t in todo.values()):
            break
    return _rows(cell, tally, depth, settings)


def _rows(cell: Cell, tally: dict, depth: int, settings: RunSettings,
          units: np.ndarray | None = None, trace_units: int | None = None
          ) -> list[DDTreeRow]:
    """The rows of one cell from its tallies; ``units`` (one label per context, a trace's
    prompts) groups the contexts into the units of the intervals (None: every context is
    one), ``trace_units`` their number."""
    g: DDTreeGrid = cell.grid
    cost = settings.cost(settings.cost_model)
    rows = []
    chain = tally.get(("chain", 0))
    for (m, b), t in tally.items():
        tau, size = np.array(t.tau), np.array(t.size, dtype=np.float64)
        ci = mean_ci(tau) if units is None else unit_ci(tau, units)
        causes = dict(zip(EXIT_CAUSES, np.mean(t.lost, axis=0).tolist(), strict=True))
        rows.append(DDTreeRow(**{
            "regime": cell.regime, "method": m, "verifier": g.rule,
            "temperature": cell.temperature, "budget": depth if m == "chain" else b,
            "rounds": tau.size, "tau_mean": ci.mean, "tau_ci_low": ci.low,
            "tau_ci_high": ci.high, **world_columns(t.world_means()),
            "tree_size_mean": float(size.mean()),
            "coverage_mean": float(np.mean(t.cov)),
            "lost_uncovered": causes["uncovered"], "lost_budget": causes["budget"],
            "lost_depth_cap": causes["depth_cap"],
            "exit_by_depth": np.mean(t.by_depth, axis=0).tolist(),
            "exit_by_depth_cause": np.mean(t.by_depth_cause, axis=0).tolist(),
            **throughput_columns(tau, size, cost, settings.cost_model),
            **(_paired_columns(t, chain, units) if chain is not None and m != "chain"
               else {}),
        }, trace_units=trace_units))
    return rows


def _paired_columns(t: _Tally, base: _Tally, units: np.ndarray | None = None) -> dict:
    """``tau - tau(chain)`` on the contexts both hold: the mean and 95% t-interval of the
    per-context differences (:func:`treespec_sim.stats.mean_ci`), ``baseline = "chain"``.

    A method group holds the first ``n`` contexts of every world's stream, in stream order
    (:func:`_ddtree_contexts`), so the ``i``-th value of world ``w`` is the same context for
    every label; with a precision target the chain holds more contexts than the trees, and
    the pairs are the first ``min(n_a, n_b)`` of each world.
    """
    tau, world = np.asarray(t.tau), np.asarray(t.world)
    btau, bworld = np.asarray(base.tau), np.asarray(base.world)
    diffs = []
    for w in np.unique(world):
        a, c = tau[world == w], btau[bworld == w]
        n = min(a.size, c.size)
        diffs.append(a[:n] - c[:n])
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    if d.size < 2:
        return {}
    ci = mean_ci(d) if units is None else unit_ci(d, units[:d.size])
    return {"diff_to_baseline": ci.mean, "diff_ci_low": ci.low, "diff_ci_high": ci.high,
            "diff_contexts": int(d.size), "baseline": "chain"}


def _contexts_needed(g: DDTreeGrid, tally: dict, groups: list[str]) -> dict[str, list[int]]:
    """More contexts per world for a precision target, per method group (``chain``;
    ``ddtree`` with ``dynamic`` riding along); all zeros when every target is met or capped.

    Each group is judged on its own widest interval and takes the stream's next contexts for
    itself: with half-width ``h`` (relative) on ``n`` contexts, about ``n (h / precision)^2``
    reach the target (intervals shrink as ``1 / sqrt(n)``), plus 10%. So the chain -- the
    noisiest method, and a cheap one -- can take more contexts than the trees, and each
    group's contexts are the first ``n`` of every world's stream. The interval is computed on
    all of a group's contexts; choosing ``n`` from an interim variance is a (repeated)
    two-stage design, whose coverage is close to nominal when the pilot is not tiny
    (``docs/usage.md``, "Precision").
    """
    out = {m: [0] * g.worlds for m in groups}
    if not g.precision:
        return out
    cap = g.max_rounds or 64 * g.rounds
    for group in groups:
        worst, n = 0.0, 0
        for (m, _), t in tally.items():
            if m == group:
                n = len(t.tau)
                ci = mean_ci(np.array(t.tau))
                worst = max(worst, (ci.high - ci.low) / 2 / abs(ci.mean) if ci.mean else math.inf)
        if n and worst > g.precision and n < cap:
            want = min(cap, math.ceil(1.1 * n * (worst / g.precision) ** 2))
            # the same number for every world: the cell then holds the split world_shares gives
            out[group] = [math.ceil(max(1, want - n) / g.worlds)] * g.worlds
    return out


def _ddtree_contexts(cell: Cell, parts, streams, drawn: list[list],
                     todo: dict[str, list[int]], tally: dict, budgets: list[int]) -> int:
    """``todo[group][i]`` more contexts of world ``i`` for each method group, into ``tally``;
    returns the drafter depth.

    A group's next contexts are the ones after those it has: already drawn for another group
    (``drawn``), or new draws from the world's stream. Rounds here draw nothing from the
    stream (``sample=False``, deterministic trees), so every group sees the same contexts.
    The groups take a context one after the other, so that the drafter's marginals of a
    context are computed once (the drafter keeps the last few).
    """
    g: DDTreeGrid = cell.grid
    depth = 0
    for share, rng, seen in zip(parts, streams, drawn, strict=True):
        world = world_for(cell.regime, share.seed)
        depth = world.depth
        common = {"rule": g.rule, "temperature": cell.temperature, "rng": rng, "sample": False}
        w = share.index
        spans = {}
        for group, more in todo.items():
            label = next(k for k in tally if k[0] == group)
            start = sum(1 for x in tally[label].world if x == w)
            spans[group] = range(start, start + more[w])
        wanted = [r for r in spans.values() if r]
        first = min((r.start for r in wanted), default=0)
        last = max((r.stop for r in wanted), default=0)
        for i in range(first, last):
            while len(seen) <= i:
                seen.append(world.sample_context(rng))
            for group, span in spans.items():
                if i in span:
                    _ddtree_round(world, seen[i], group, g, budgets, tally, w, common)
    return depth


def _ddtree_round(world, ctx, group: str, g: DDTreeGrid, budgets: list[int], tally: dict,
                  w: int, common: dict) -> None:
    """One context's rounds for one method group (``ddtree`` also runs ``dynamic``)."""
    if group == "ddtree":
        if g.rule == "follow":
            big = run_round(world, ctx, method="ddtree", budget=budgets[-1], nested=True,
                            **common)
            for b in budgets:
                tally[("ddtree", b)].add(big.at_budget(b), w)
        else:  # nested rounds know 'follow' only: rebuild at every budget
            for b in budgets:
                tally[("ddtree", b)].add(run_round(world, ctx, method="ddtree", budget=b,
                                                   **common), w)
    if group == "chain":
        tally[("chain", 0)].add(run_round(world, ctx, method="chain", **common), w)
    if "dynamic" in g.methods and group in ("ddtree", "dynamic"):
        for b in budgets:
            tally[("dynamic", b)].add(run_round(world, ctx, method="dynamic", budget=b,
                                                **common), w)


# ----------------------------------------------------------------------------------- traces
def _labels(g: DDTreeGrid, budgets: list[int]) -> list[tuple[str, int]]:
    return ([("chain", 0)] if "chain" in g.methods else []) \
        + [(m, b) for m in ("ddtree", "dynamic") if m in g.methods for b in budgets]


def _run_trace(cell: Cell, settings: RunSettings, budgets: list[int]) -> list[DDTreeRow]:
    """A cell on a trace: every recorded round once, in order (``docs/traces.md``, "The sweep
    on a trace"); the rounds need no randomness (exact E[tau], ``sample=False``), and the
    intervals are over the recorded prompts (the decoded sequences: a prompt's rounds are one
    unit, as decoded rounds are in the ``caddtree`` family)."""
    g: DDTreeGrid = cell.grid
    tr = settings.trace_backend(cell.regime)
    tally = {k: _Tally() for k in _labels(g, budgets)}
    groups = [m for m in ("chain", "ddtree") if m in g.methods] or ["dynamic"]
    rng = cell_rng(settings.seed, cell.key)  # run_round's argument; no round here draws from it
    common = {"rule": g.rule, "temperature": cell.temperature, "rng": rng, "sample": False}
    for ctx in tr.contexts:
        for group in groups:
            _ddtree_round(tr, ctx, group, g, budgets, tally, 0, common)
    units = np.array([c.prompt for c in tr.contexts])
    return _rows(cell, tally, int(tr.depth), settings, units, len(set(units.tolist())))


def check_trace(g: DDTreeGrid, tr, regime: str) -> None:
    """Refuse, naming the key, what the grid asks of the trace ``tr`` that it does not hold:
    an unrecorded temperature, a budget above its ``B_max`` (or above the drafter's recorded
    top ``K``)."""
    check_trace_temperatures(g.temperatures, tr, f"{name}.temperatures", regime)
    check_trace_budget(max(g.budgets), tr, f"{name}.budgets", regime)


def trace_preset(tr, regime: str) -> DDTreeGrid:
    """The family's grid for ``python -m treespec_sim.sweep --trace FILE``: the chain, DDTree
    and the dynamic tree at every power-of-two budget from 8 up to the trace's ``B_max`` (and
    ``B_max`` itself), at every recorded temperature."""
    cap = min(tr.b_max, tr.top_k or tr.b_max)
    budgets = sorted({b for b in (8, 16, 32, 64, 128, 256, 512, 1024) if b <= cap} | {cap})
    return DDTreeGrid((regime,), methods=("chain", "ddtree", "dynamic"), budgets=budgets,
                      temperatures=tr.temperatures, rounds=max(2, len(tr)), worlds=1)


def preset(which: str) -> DDTreeGrid | None:
    """The family's grid in sweep preset ``which`` (``"paper"``, ``"quick"``, ``"ddtree"``)."""
    regimes = paper_regimes()
    if which == "paper":
        # every chain/DDTree tau to +-2% (95% over contexts): 63 contexts are the pilot, then
        # as many as each cell's variance needs (docs/usage.md "Precision")
        return DDTreeGrid(regimes, budgets=(16, 32, 64, 128, 256, 512), temperatures=(0.0, 1.0),
                          rounds=63, worlds=3, precision=0.02, max_rounds=10080)
    if which == "quick":
        two = pick_regimes(regimes, ("math500", "alpaca"))[:2]
        return DDTreeGrid(two, budgets=(16, 64, 256), temperatures=(0.0, 1.0), rounds=9,
                          worlds=3)
    if which == name:
        return DDTreeGrid(regimes, methods=("chain", "ddtree", "dynamic"),
                          budgets=(8, 16, 32, 64, 128, 256, 512, 1024), rounds=64)
    return None


