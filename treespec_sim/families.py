r"""The sweep's method families: grids, their cells, and the function that runs one cell.

A *grid* is a frozen description of one family's comparisons (which regimes, temperatures,
budgets, ...); it expands into *cells*, the unit of work, of resumption and of distribution. A
cell runs in any process (a local worker or a dask worker): :func:`run_cell` builds (and caches)
its world, and its randomness depends only on the seed and the cell's key, so the numbers are
the same whichever process runs it.

Families
--------
``ddtree``
    DDTree (and the DFlash chain, the dynamic tree) across budgets and temperatures: exact
    :math:`E[\tau]`, coverage, the exit-law decomposition of lost target mass by depth and cause
    (:class:`DDTreeGrid`).
``caddtree``
    budget rules under latency presets: DDTree at fixed budgets and at the oracle budget,
    CaDDTree, the exhaustive argmax and the long-run rule, on the same rounds
    (:class:`CaDDTreeGrid`, :mod:`treespec_sim.experiments.budget_choice`).
``stochastic``
    deterministic trees, sampled chains and Tsubame across temperatures and drafters
    (:class:`StochasticGrid`, :mod:`treespec_sim.experiments.stochastic`).
``verifiers``
    RRSw, Traversal and UniVer on the same sampled trees at ``T > 0``
    (:class:`VerifierGrid`, :mod:`treespec_sim.experiments.verifier_gain`).

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
import math
import time
import zlib
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .cost import get_cost_model, round_time
from .engine import Round, run_round
from .exits import EXIT_CAUSES
from .experiments import budget_choice, stochastic, verifier_gain
from .methods import get_method, uses_budget
from .stats import mean_ci, throughput, world_columns
from .synth import REGIMES, make_world
from .validation import check_temperature
from .verify import RULES

__all__ = ["COLUMNS", "FAMILIES", "CaDDTreeGrid", "Cell", "DDTreeGrid", "RunSettings",
           "StochasticGrid", "VerifierGrid", "WorldShare", "cell_rng", "run_cell",
           "throughput_columns", "world_for", "world_shares"]

#: Columns of ``results.csv``, in order (cells that do not define a column leave it empty).
COLUMNS = (
    "family", "regime", "method", "verifier", "drafter", "temperature", "budget", "cost_model",
    "rounds", "seed", "tau_mean", "tau_ci_low", "tau_ci_high",
    "worlds", "tau_world_means", "tau_world_ci_low", "tau_world_ci_high", "tree_size_mean",
    "coverage_mean", "round_time_s", "throughput_tok_s", "speedup_vs_ar",
    "lost_uncovered", "lost_budget", "lost_depth_cap",
    "rel_to_baseline", "rel_ci_low", "rel_ci_high", "rel_world_means", "rel_world_ci_low",
    "rel_world_ci_high", "baseline", "rel_traversal", "rel_traversal_ci_low",
    "rel_traversal_ci_high", "wall_s",
)


def _tuple(x, cast, key: str) -> tuple:
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


# --------------------------------------------------------------------------------- grids
def _check_regimes(regimes: tuple[str, ...], family: str) -> None:
    if not regimes:
        raise ValueError(f"{family}.regimes must name at least one regime")
    for name in regimes:
        if name not in REGIMES:
            raise ValueError(f"{family}.regimes: unknown regime {name!r}; known regimes: "
                             f"{', '.join(sorted(REGIMES))}")


def _check_temperatures(ts: tuple[float, ...], family: str, *, positive: bool = False) -> None:
    for t in ts:
        check_temperature(t, f"{family}.temperatures", positive=positive)


def _check_rounds(rounds: int, family: str) -> None:
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"{family}.rounds must be an integer >= 2; got {rounds!r}")


def _check_worlds(worlds: int, rounds: int, family: str) -> None:
    if isinstance(worlds, bool) or not isinstance(worlds, int) or worlds < 1:
        raise ValueError(f"{family}.worlds must be an integer >= 1; got {worlds!r}")
    if rounds < worlds:
        raise ValueError(f"{family}.worlds must be at most {family}.rounds (every world needs "
                         f"a context); got worlds={worlds}, rounds={rounds}")


def _check_budgets(budgets: tuple[int, ...], family: str) -> None:
    if not budgets or any(not isinstance(b, int) or b < 1 for b in budgets):
        raise ValueError(f"{family}.budgets must be positive integers; got {budgets!r}")


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
        if (isinstance(self.precision, bool) or not isinstance(self.precision, int | float)
                or not 0.0 <= self.precision < 1.0):
            raise ValueError(f"ddtree.precision must be a number in [0, 1) (0 = fixed rounds); "
                             f"got {self.precision!r}")
        if (isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int)
                or self.max_rounds < 0 or (self.max_rounds and self.max_rounds < self.rounds)):
            raise ValueError(f"ddtree.max_rounds must be 0 or an integer >= rounds "
                             f"({self.rounds}); got {self.max_rounds!r}")
        for name, cast in (("regimes", str), ("methods", str), ("budgets", int),
                           ("temperatures", float)):
            object.__setattr__(self, name, _tuple(getattr(self, name), cast,
                                                  f"{self.family}.{name}"))
        _check_regimes(self.regimes, self.family)
        for m in self.methods:
            if m not in ("chain", "ddtree", "dynamic"):
                raise ValueError(f"ddtree.methods: unknown method {m!r}; known: chain, ddtree, "
                                 "dynamic")
        if self.rule not in ("follow", "tev"):
            raise ValueError(f"ddtree.rule must be 'follow' or 'tev' (deterministic trees); "
                             f"got {self.rule!r}; known rules: {', '.join(sorted(RULES))}")
        _check_budgets(self.budgets, self.family)
        _check_temperatures(self.temperatures, self.family)
        _check_rounds(self.rounds, self.family)
        _check_worlds(self.worlds, self.rounds, self.family)

    def cells(self) -> list[Cell]:
        """One cell per (regime, T): every budget and method on the same contexts."""
        return [Cell(self, r, t, max(self.budgets)) for r in self.regimes
                for t in self.temperatures]


@dataclass(frozen=True)
class CaDDTreeGrid:
    """Budget rules under latency presets; one cell per (regime, T) covers every cost model."""

    family: ClassVar[str] = "caddtree"
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "decoded rounds"
    regimes: tuple[str, ...]
    temperatures: tuple[float, ...] = (0.0,)
    cost_models: tuple[str, ...] = ("a800-qwen3-8b", "h200-qwen3-8b")
    rounds: int = 128
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3
    max_budget: int = 1024
    context_length: float = 1024.0

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("temperatures", float), ("cost_models", str)):
            object.__setattr__(self, name, _tuple(getattr(self, name), cast,
                                                  f"{self.family}.{name}"))
        _check_regimes(self.regimes, self.family)
        _check_temperatures(self.temperatures, self.family)
        _check_rounds(self.rounds, self.family)
        _check_worlds(self.worlds, self.rounds, self.family)
        for c in self.cost_models:
            try:
                get_cost_model(c)
            except ValueError as exc:
                raise ValueError(f"caddtree.cost_models: {exc}") from None
        if not isinstance(self.max_budget, int) or self.max_budget < 8:
            raise ValueError(f"caddtree.max_budget must be an integer >= 8; "
                             f"got {self.max_budget!r}")

    def cells(self) -> list[Cell]:
        return [Cell(self, r, t, self.max_budget) for r in self.regimes for t in self.temperatures]


@dataclass(frozen=True)
class StochasticGrid:
    """Deterministic trees, sampled chains and Tsubame; one cell per (regime, drafter, T, B)."""

    family: ClassVar[str] = "stochastic"
    #: The lists each cell takes one value of (a resumed run may gain values of these).
    cell_axes: ClassVar[tuple[str, ...]] = ("regimes", "drafters", "temperatures", "budgets")
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    drafters: tuple[str, ...] = ("corrected",)
    temperatures: tuple[float, ...] = (0.0, 0.6, 1.0)
    budgets: tuple[int, ...] = (64,)
    methods: tuple[str, ...] = stochastic.DEFAULT_METHODS
    rounds: int = 32
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3
    #: Vocabulary cap of the drafter-variant worlds (0: none, the regime's own V).
    vocab: int = 0

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("drafters", str), ("temperatures", float),
                           ("budgets", int), ("methods", str)):
            object.__setattr__(self, name, _tuple(getattr(self, name), cast,
                                                  f"{self.family}.{name}"))
        _check_regimes(self.regimes, self.family)
        for d in self.drafters:
            if d not in stochastic.DRAFTERS:
                raise ValueError(f"stochastic.drafters: unknown drafter {d!r}; known: "
                                 f"{', '.join(stochastic.DRAFTERS)}")
        for m in self.methods:
            try:
                get_method(m)
            except ValueError as exc:
                raise ValueError(f"stochastic.methods: {exc}") from None
        _check_temperatures(self.temperatures, self.family)
        _check_budgets(self.budgets, self.family)
        _check_rounds(self.rounds, self.family)
        _check_worlds(self.worlds, self.rounds, self.family)
        if not isinstance(self.vocab, int) or self.vocab < 0:
            raise ValueError(f"stochastic.vocab must be an integer >= 0 (0: no cap); "
                             f"got {self.vocab!r}")

    def cells(self) -> list[Cell]:
        fixed = any(not uses_budget(m) for m in self.methods)
        out = []
        for r in self.regimes:
            for d in self.drafters:
                for t in self.temperatures:
                    if fixed:
                        out.append(Cell(self, r, t, 0, d))
                    out.extend(Cell(self, r, t, b, d) for b in self.budgets)
        return out


@dataclass(frozen=True)
class VerifierGrid:
    """RRSw vs Traversal vs UniVer on the same sampled trees at ``T > 0``.

    ``shapes``: ``"WxD"`` (full ``W``-ary trees of depth ``D``, e.g. ``"2x5"``: binary depth 5,
    as in the UniVer paper) or ``"tsubameB"`` (Tsubame's ``B``-node DDTree-shaped trees); see
    :func:`treespec_sim.experiments.verifier_gain.parse_tree`.
    """

    family: ClassVar[str] = "verifiers"
    #: The lists each cell takes one value of (a resumed run may gain values of these).
    cell_axes: ClassVar[tuple[str, ...]] = ("regimes", "temperatures", "shapes")
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    shapes: tuple[str, ...] = ("2x4", "3x3")
    temperatures: tuple[float, ...] = (1.0,)
    rounds: int = 48
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("shapes", str), ("temperatures", float)):
            object.__setattr__(self, name, _tuple(getattr(self, name), cast,
                                                  f"{self.family}.{name}"))
        _check_regimes(self.regimes, self.family)
        _check_temperatures(self.temperatures, self.family, positive=True)
        _check_rounds(self.rounds, self.family)
        _check_worlds(self.worlds, self.rounds, self.family)
        for s in self.shapes:
            try:
                verifier_gain.parse_tree(s)
            except ValueError as exc:
                raise ValueError(f"verifiers.shapes: {exc}") from None

    def cells(self) -> list[Cell]:
        out = []
        for r in self.regimes:
            for t in self.temperatures:
                for s in self.shapes:
                    out.append(Cell(self, r, t, verifier_gain.parse_tree(s).nodes, s))
        return out


FAMILIES = {g.family: g for g in (DDTreeGrid, CaDDTreeGrid, StochasticGrid, VerifierGrid)}


# ------------------------------------------------------------------------------ running
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


def _shares(cell: Cell, settings: RunSettings) -> tuple[WorldShare, ...]:
    return world_shares(cell.grid.rounds, cell.grid.worlds, settings.seed)


@functools.lru_cache(maxsize=6)  # worlds at V = 32768 hold ~0.5 GB of per-topic kernels each
def world_for(regime: str, seed: int, vocab: int | None = None, drafter: str | None = None):
    """The (cached) world of a cell: ``make_world(regime, seed)``, or the regime with a
    stochastic-family drafter variant and an optional vocabulary cap."""
    if drafter is not None:
        spec = stochastic.drafter_spec(regime, drafter)
        cap = vocab if vocab and vocab < spec.vocab_size else None
        return make_world(spec, seed=seed, vocab_size=cap)
    return make_world(regime, seed=seed)


def cell_rng(seed: int, cell: Cell) -> np.random.Generator:
    """The ``ddtree`` family's generator of one world: ``default_rng([seed, crc32(cell.key)])``
    with that world's seed."""
    return np.random.default_rng([seed, zlib.crc32(cell.key.encode())])


@dataclass(frozen=True)
class RunSettings:
    """What every cell shares: the seed and the latency model for throughput columns."""

    seed: int = 0
    cost_model: str = "h200-qwen3-8b"
    extra: dict = field(default_factory=dict, compare=False, hash=False)


def run_cell(cell: Cell, settings: RunSettings) -> list[dict]:
    """Run one cell; return its rows (dicts with :data:`COLUMNS` keys, plus per-family extras).

    Pure given ``(cell, settings)``: the same inputs give the same rows in any process.
    """
    start = time.perf_counter()
    runner = {"ddtree": _run_ddtree, "caddtree": _run_caddtree, "stochastic": _run_stochastic,
              "verifiers": _run_verifiers}[cell.family]
    rows = runner(cell, settings)
    wall = time.perf_counter() - start
    for r in rows:
        r.setdefault("family", cell.family)
        r.setdefault("seed", settings.seed)
        r.setdefault("worlds", cell.grid.worlds)
        r["wall_s"] = wall / max(1, len(rows))
        r["cell"] = cell.key
    return rows


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


def _run_ddtree(cell: Cell, settings: RunSettings) -> list[dict]:
    """Every budget from one tree per context: DDTree's trees are nested, so the round at the
    largest budget gives each smaller budget's exact E[tau], coverage and exit law
    (:meth:`treespec_sim.engine.Round.at_budget`). World after world (:func:`world_shares`),
    each with its own :func:`cell_rng`."""
    g: DDTreeGrid = cell.grid
    budgets = sorted(g.budgets)
    labels = ([("chain", 0)] if "chain" in g.methods else []) \
        + [(m, b) for m in ("ddtree", "dynamic") if m in g.methods for b in budgets]
    tally = {k: _Tally() for k in labels}
    shares = _shares(cell, settings)
    streams = [cell_rng(share.seed, cell) for share in shares]  # continued by later stages
    drawn: list[list] = [[] for _ in shares]  # each world's contexts, in stream order
    groups = [m for m in ("chain", "ddtree") if m in g.methods] or ["dynamic"]
    todo = {m: [share.rounds for share in shares] for m in groups}
    depth = 0
    while True:
        depth = _ddtree_contexts(cell, shares, streams, drawn, todo, tally, budgets) or depth
        todo = _contexts_needed(g, tally, groups)
        if not any(any(t) for t in todo.values()):
            break
    cost = get_cost_model(settings.cost_model)
    rows = []
    for (m, b), t in tally.items():
        tau, size = np.array(t.tau), np.array(t.size, dtype=np.float64)
        ci = mean_ci(tau)
        causes = dict(zip(EXIT_CAUSES, np.mean(t.lost, axis=0).tolist(), strict=True))
        rows.append({
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
        })
    return rows


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


def _ddtree_contexts(cell: Cell, shares, streams, drawn: list[list], todo: dict[str, list[int]],
                     tally: dict, budgets: list[int]) -> int:
    """``todo[group][i]`` more contexts of world ``i`` for each method group, into ``tally``;
    returns the drafter depth.

    A group's next contexts are the ones after those it has: already drawn for another group
    (``drawn``), or new draws from the world's stream. Rounds here draw nothing from the
    stream (``sample=False``, deterministic trees), so every group sees the same contexts.
    """
    g: DDTreeGrid = cell.grid
    depth = 0
    for share, rng, seen in zip(shares, streams, drawn, strict=True):
        world = world_for(cell.regime, share.seed)
        depth = world.depth
        common = {"rule": g.rule, "temperature": cell.temperature, "rng": rng, "sample": False}
        w = share.index
        for group, counts in todo.items():
            label = next(k for k in tally if k[0] == group)
            start = sum(1 for x in tally[label].world if x == w)
            for i in range(start, start + counts[w]):
                while len(seen) <= i:
                    seen.append(world.sample_context(rng))
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


def throughput_columns(taus: np.ndarray, sizes: np.ndarray, cost, cost_name: str) -> dict:
    """The throughput columns of a row: modelled round time, tokens/s, speedup over AR."""
    seconds = np.asarray(round_time(cost, sizes), dtype=np.float64)
    thr = throughput(taus, seconds)
    return {"cost_model": cost_name, "round_time_s": float(seconds.mean()),
            "throughput_tok_s": thr, "speedup_vs_ar": thr * float(cost.verify_cost(1))}


def _run_caddtree(cell: Cell, settings: RunSettings) -> list[dict]:
    """Each world decodes its share of the rounds from ``default_rng([world seed, 7])``
    (:func:`~treespec_sim.experiments.budget_choice.collect`); the rules are evaluated on the
    pooled rounds, the bootstrap drawing from ``default_rng(seed)``."""
    g: CaDDTreeGrid = cell.grid
    curves = budget_choice.pool([
        budget_choice.collect(world_for(cell.regime, s.seed), regime=cell.regime,
                              rounds=s.rounds, temperature=cell.temperature,
                              max_budget=g.max_budget, seed=s.seed)
        for s in _shares(cell, settings)])
    rows = []
    for name in g.cost_models:
        results = budget_choice.evaluate(curves, get_cost_model(name),
                                         context_length=g.context_length, seed=settings.seed)
        rows += budget_choice.result_rows(results, temperature=cell.temperature,
                                          max_budget=g.max_budget, rounds=g.rounds)
    return rows


def _run_stochastic(cell: Cell, settings: RunSettings) -> list[dict]:
    g: StochasticGrid = cell.grid
    methods = tuple(m for m in g.methods
                    if uses_budget(m) == (cell.budget > 0))
    shares = _shares(cell, settings)
    rows = stochastic.run_cell(
        [world_for(cell.regime, s.seed, g.vocab or None, cell.option) for s in shares],
        seeds=[s.seed for s in shares], rounds=[s.rounds for s in shares], regime=cell.regime,
        drafter=cell.option, temperature=cell.temperature, budget=cell.budget, methods=methods,
        cost_name=settings.cost_model)
    for r in rows:
        r.pop("wall_s", None)
    return rows


def _run_verifiers(cell: Cell, settings: RunSettings) -> list[dict]:
    tree = verifier_gain.parse_tree(cell.option)
    shares = _shares(cell, settings)
    res = verifier_gain.measure([world_for(cell.regime, s.seed) for s in shares],
                                regime=cell.regime, tree=tree,
                                temperature=cell.temperature, rounds=[s.rounds for s in shares],
                                seeds=[s.seed for s in shares])
    rows = []
    name = (f"sampled-tree[{cell.option}]" if tree.kind == "k-ary"
            else f"tsubame-rrsw[B={tree.budget}]")
    for label, method, rule in verifier_gain.ARMS:
        if label not in res.mean:           # no such arm on this tree (Greedy drafts)
            continue
        gain = res.gain.get(label, (0.0, 0.0, 0.0))
        trav = res.gain_vs_traversal.get(label)
        rows.append({
            "regime": cell.regime, "method": name + ("+greedy" if method == "greedy-tree"
                                                      else ""), "verifier": rule,
            "temperature": cell.temperature, "budget": res.budget, "rounds": res.rounds,
            "tau_mean": res.mean[label], "tau_ci_low": res.tau_ci[label][0],
            "tau_ci_high": res.tau_ci[label][1], **world_columns(res.world_means[label]),
            "tree_size_mean": float(res.budget),
            "rel_to_baseline": 1.0 + gain[0], "rel_ci_low": 1.0 + gain[1],
            "rel_ci_high": 1.0 + gain[2],
            **world_columns(res.world_ratios(label), prefix="rel"), "baseline": "rrsw",
            **({"rel_traversal": 1.0 + trav[0], "rel_traversal_ci_low": 1.0 + trav[1],
                "rel_traversal_ci_high": 1.0 + trav[2]} if trav else {}),
        })
    return rows
