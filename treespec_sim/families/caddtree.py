r"""The ``caddtree`` family: does CaDDTree match DDTree at the oracle budget? Every budget rule.

For each regime, rounds come from decoding (contexts follow the target's own law). In every
round the drafter's marginals give DDTree's tree at ``max_budget``; because the trees are
nested, that one tree gives, *exactly*, the expected tokens of every budget ``B``:

.. math:: \tau(B) = 1 + \sum_{i \le B} P(v_i)

(``follow`` verification: the target's path reaches pop ``v_i`` with probability
:math:`P(v_i)`), and its surrogate :math:`N(B) = 1 + \sum_{i\le B} q(v_i)`. A cost model gives
:math:`D(B) = C_d + C_v(B + 1)`. Each rule then picks a ``B`` per round from what it may see (the
drafter's marginals and the costs, never the target), and its long-run throughput is the
renewal-reward ratio :math:`\sum \tau / \sum D` (tokens per second). The rules:

``ddtree@B``
    DDTree at every fixed budget of the grid.
``ddtree-oracle``
    the fixed budget with the best throughput on these very rounds (the DDTree papers' protocol:
    chosen after the fact, hence optimistic).
``caddtree``
    CaDDTree's greedy stop on :math:`\theta(B) = N(B)/D(B)`.
``exhaustive``
    the argmax of :math:`\theta` over ``0..max_budget``.
``longrun``
    Dinkelbach's rule :math:`q(v_{B+1}) > \lambda \Delta_{B+1}` with :math:`\lambda` the running
    throughput of the rule's own expected tokens (:class:`~treespec_sim.policies.LongRunPolicy`).

Every rule is evaluated on the same rounds (paired); intervals follow
:mod:`treespec_sim.stats`: percentile-bootstrap intervals of throughput ratios and t-intervals
of :math:`\tau`, both over decoded sequences (the unit of independence). Rounds of several
worlds (:func:`pool`) are pooled for those intervals, and each world's own :math:`\tau` and
throughput ratio to the oracle budget also give the between-world t-interval
(:func:`treespec_sim.stats.world_ci`); the long-run rule starts afresh in every world (a world
is its own deployment), and the oracle budget is the best one on the pooled rounds.

The rounds come from :func:`treespec_sim.engine.run_rounds` (DDTree, ``nested=True``); one cell
per (regime, T) covers every cost model of the grid (``python -m treespec_sim.sweep --preset
caddtree``). Its rows (:class:`CaDDTreeRow`) are presented, with its claim (CaDDTree's
throughput matches the oracle budget's, ``docs/theory/caddtree.md``), by
:mod:`.caddtree_report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cost import DEFAULT_CONTEXT_LENGTH, LatencyModel, round_time
from ..engine import Round, run_rounds
from ..policies import LongRunPolicy, first_non_increase
from ..seeds import cell_rng
from ..stats import mean_ci, paired_bootstrap, percentile_ci, ratio_ci, world_columns
from ..validation import Interval, check_param, check_positive_int, check_temperature
from .base import (
    RECORDED_COST,
    Cell,
    Row,
    RunSettings,
    as_tuple,
    check_cost_models,
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
    world_for,
)

__all__ = ["ADAPTIVE", "BUDGET_GRID", "DEFAULT_CONTEXT_LENGTH", "CaDDTreeGrid", "CaDDTreeRow",
           "RoundCurves", "RuleResult", "check_trace", "chosen_budgets", "collect",
           "collect_trace", "evaluate", "grid", "name", "pool", "preset", "preset_note",
           "result_rows", "row", "run", "trace_preset"]

#: The family's name (its ``[caddtree]`` table in a config, the rows' ``family``).
name = "caddtree"
#: What ``--preset caddtree`` runs.
preset_note = "budget rules under the A800 and H200 presets and the tiled illustration"


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
        for name, cast in (("regimes", str), ("temperatures", check_temperature),
                           ("cost_models", str)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast,
                                                    f"{self.family}.{name}"))
        check_regimes(self.regimes, self.family)
        check_temperatures(self.temperatures, self.family)
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)
        check_cost_models(self.cost_models, self.family)
        check_param(self.max_budget, "caddtree.max_budget", Interval("int", 8, numpy=False))

    def cells(self) -> list[Cell]:
        return [Cell(self, r, t, self.max_budget) for r in self.regimes for t in self.temperatures]


#: The family's grid class (the registry's ``grid``).
grid = CaDDTreeGrid


@dataclass(frozen=True, kw_only=True)
class CaDDTreeRow(Row):
    """One (method, cost model) of a caddtree cell: a budget rule (``caddtree``,
    ``exhaustive``, ``longrun``), DDTree at the oracle budget (``ddtree-oracle``) or at a fixed
    one (``ddtree``, its ``budget``), on the same decoded rounds: mean τ, the mean budget
    (``tree_size_mean``), throughput with its interval (``throughput_ci``), the ratio to the
    oracle budget's throughput (``rel_*``, between worlds ``rel_world_*``) and to the long-run
    rule's (``vs_longrun``: ratio, low, high); ``sequences``: the decoded sequences, the units
    of its intervals (``trace_units`` on a trace)."""

    family: str = "caddtree"
    regime: str
    method: str
    verifier: str
    temperature: float
    budget: int
    cost_model: str
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
    round_time_s: float | None = None
    throughput_tok_s: float | None = None
    speedup_vs_ar: float | None = None
    rel_to_baseline: float | None = None
    rel_ci_low: float | None = None
    rel_ci_high: float | None = None
    rel_world_means: list[float] | None = None
    rel_world_ci_low: float | None = None
    rel_world_ci_high: float | None = None
    baseline: str | None = None
    wall_s: float | None = None
    throughput_ci: list[float] | None = None
    vs_longrun: list[float] | None = None
    sequences: int | None = None
    trace_units: int | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = CaDDTreeRow


#: Fixed budgets compared (and the grid the oracle chooses from).
BUDGET_GRID = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: Adaptive rules, in report order.
ADAPTIVE = ("caddtree", "exhaustive", "longrun")


@dataclass(frozen=True)
class RoundCurves:
    """Per-round, per-budget facts of one regime (cost-independent).

    ``surrogate[r, B]`` and ``tau[r, B]`` for ``B = 0..max_budget`` (rounds with fewer
    prefixes are padded with their last value); ``sequence[r]`` labels the decoded sequence and
    ``world[r]`` the world it was decoded in (``None``: one world).
    """

    regime: str
    temperature: float
    surrogate: np.ndarray
    tau: np.ndarray
    sequence: np.ndarray
    world: np.ndarray | None = None

    @property
    def max_budget(self) -> int:
        return self.tau.shape[1] - 1

    @property
    def worlds(self) -> np.ndarray:
        """The world of every round (zeros when the curves come from one world)."""
        if self.world is None:
            return np.zeros(self.tau.shape[0], dtype=np.int64)
        return self.world


def collect(world, *, regime: str, rounds: int, temperature: float = 0.0,
            max_budget: int = 1024, rounds_per_sequence: int = 8, seed: int = 0
            ) -> RoundCurves:
    """Decode ``rounds`` rounds on ``world`` and record every budget's exact curves.

    One :func:`~treespec_sim.engine.run_round` per round (DDTree at ``max_budget``,
    ``nested=True``); each round commits its sampled ``follow`` outcome so the next context
    follows the target's law. Contexts and outcomes draw from ``default_rng([seed, 7])``.
    ``rounds`` may be 1 (one world's share of a cell; :func:`pool` joins the worlds).
    """
    check_positive_int(rounds, "rounds")
    width = max_budget + 1

    def curves(rnd: Round) -> tuple[np.ndarray, np.ndarray]:
        return rnd.surrogate_curve, rnd.tau_curve

    sequences = run_rounds(world, rng=cell_rng(seed, 7), rounds=rounds,
                           rounds_per_sequence=rounds_per_sequence, method="ddtree",
                           budget=max_budget, rule="follow", temperature=temperature,
                           nested=True, record=curves)
    surrogate = np.empty((rounds, width))
    tau = np.empty((rounds, width))
    sequence = np.empty(rounds, dtype=np.int64)
    r = 0
    for s_id, seq in enumerate(sequences):
        for sur, ta in seq:
            n = sur.size  # rounds with fewer prefixes are padded with their last value
            surrogate[r, :n], surrogate[r, n:] = sur, sur[-1]
            tau[r, :n], tau[r, n:] = ta, ta[-1]
            sequence[r] = s_id
            r += 1
    return RoundCurves(regime, float(temperature), surrogate, tau, sequence)


def pool(parts: Sequence[RoundCurves]) -> RoundCurves:
    """The rounds of several worlds (one :func:`collect` each) as one set of curves.

    Sequence labels are renumbered so that no two worlds share one; ``world[r]`` is the index
    of the part round ``r`` came from.
    """
    if not parts:
        raise ValueError("parts must hold at least one world's curves")
    first = parts[0]
    for p in parts[1:]:
        if (p.regime, p.temperature, p.max_budget) != (first.regime, first.temperature,
                                                        first.max_budget):
            raise ValueError("parts must share regime, temperature and max_budget; got "
                             f"{(p.regime, p.temperature, p.max_budget)} and "
                             f"{(first.regime, first.temperature, first.max_budget)}")
    sequence, offset = [], 0
    for p in parts:
        _, relabelled = np.unique(p.sequence, return_inverse=True)
        sequence.append(relabelled + offset)
        offset += int(relabelled.max()) + 1
    world = np.concatenate([np.full(p.tau.shape[0], i, dtype=np.int64)
                            for i, p in enumerate(parts)])
    return RoundCurves(first.regime, first.temperature,
                       np.concatenate([p.surrogate for p in parts]),
                       np.concatenate([p.tau for p in parts]),
                       np.concatenate(sequence).astype(np.int64), world)


@dataclass(frozen=True)
class RuleResult:
    """Throughput of one rule on one (regime, cost model), with paired comparisons."""

    regime: str
    cost_model: str
    method: str
    budget_mean: float
    tau_mean: float
    tau_ci: tuple[float, float]  # 95% t-interval over decoded sequences
    round_time_s: float
    throughput: float
    ci: tuple[float, float]
    speedup_vs_ar: float
    vs_oracle: tuple[float, float, float]  # ratio to ddtree-oracle, CI low, CI high
    vs_longrun: tuple[float, float, float]
    tau_worlds: tuple[float, ...] = ()  # mean tau in each world
    vs_oracle_worlds: tuple[float, ...] = ()  # each world's throughput ratio to the oracle


def chosen_budgets(curves: RoundCurves, cost: LatencyModel, context_length: float
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Round cost per budget and each adaptive rule's budget per round."""
    B = np.arange(curves.max_budget + 1)
    round_cost = np.asarray(round_time(cost, B, context_length), dtype=np.float64)
    theta = curves.surrogate / round_cost
    picks = {
        "caddtree": np.array([first_non_increase(t) for t in theta]),
        "exhaustive": np.argmax(theta, axis=1),
    }
    longrun = np.empty(len(theta), dtype=np.int64)
    worlds = curves.worlds
    for r in range(len(theta)):
        if r == 0 or worlds[r] != worlds[r - 1]:
            # every world is its own deployment: the running throughput starts afresh
            policy = LongRunPolicy(draft_cost=cost.draft_cost(context_length),
                                   verify_cost=lambda n: cost.verify_cost(n, context_length),
                                   max_budget=curves.max_budget)
        longrun[r] = policy.choose_from(np.diff(curves.surrogate[r]), round_cost)
        policy.observe(curves.tau[r, longrun[r]], round_cost[longrun[r]])
    picks["longrun"] = longrun
    return round_cost, picks


def evaluate(curves: RoundCurves, cost: LatencyModel, *, context_length: float =
             DEFAULT_CONTEXT_LENGTH, grid: tuple[int, ...] = BUDGET_GRID, seed: int = 0
             ) -> list[RuleResult]:
    """Throughput of every fixed budget, the oracle budget and the adaptive rules."""
    grid = tuple(b for b in grid if b <= curves.max_budget)
    round_cost, picks = chosen_budgets(curves, cost, context_length)
    rows = np.arange(curves.tau.shape[0])
    names = [f"ddtree@{b}" for b in grid] + list(ADAPTIVE)
    budgets = np.column_stack([np.full(rows.size, b) for b in grid]
                              + [picks[m] for m in ADAPTIVE])
    tokens = curves.tau[rows[:, None], budgets]
    seconds = round_cost[budgets]
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    oracle_col = int(np.argmax(point[: len(grid)]))
    names.append("ddtree-oracle")
    budgets = np.column_stack([budgets, budgets[:, oracle_col]])
    tokens = np.column_stack([tokens, tokens[:, oracle_col]])
    seconds = np.column_stack([seconds, seconds[:, oracle_col]])
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    boot = paired_bootstrap(tokens, seconds, units=curves.sequence,
                            rng=cell_rng(seed))
    i_oracle, i_longrun = len(names) - 1, names.index("longrun")
    ids = np.unique(curves.sequence)
    tau_ci = [mean_ci([tokens[curves.sequence == i, j] for i in ids])
              for j in range(tokens.shape[1])]
    ar = 1.0 / float(cost.verify_cost(1, context_length))
    worlds = curves.worlds
    in_world = [worlds == w for w in np.unique(worlds)]
    tau_worlds = np.array([tokens[m].mean(axis=0) for m in in_world])  # (worlds, rules)
    point_worlds = np.array([tokens[m].sum(axis=0) / seconds[m].sum(axis=0) for m in in_world])
    out = []
    for j, name in enumerate(names):
        lo, hi = percentile_ci(boot[:, j])
        rel = [ratio_ci(boot, j, base, point) for base in (i_oracle, i_longrun)]
        out.append(RuleResult(
            regime=curves.regime, cost_model=getattr(cost, "name", "custom"), method=name,
            budget_mean=float(budgets[:, j].mean()), tau_mean=float(tokens[:, j].mean()),
            tau_ci=(tau_ci[j].low, tau_ci[j].high),
            round_time_s=float(seconds[:, j].mean()), throughput=float(point[j]),
            ci=(float(lo), float(hi)), speedup_vs_ar=float(point[j] / ar),
            vs_oracle=rel[0], vs_longrun=rel[1],
            tau_worlds=tuple(float(x) for x in tau_worlds[:, j]),
            vs_oracle_worlds=tuple(float(x) for x in point_worlds[:, j]
                                   / point_worlds[:, i_oracle])))
    return out


def result_rows(results: list[RuleResult], *, temperature: float, max_budget: int,
                rounds: int, sequences: int | None = None, trace_units: int | None = None
                ) -> list[CaDDTreeRow]:
    """The sweep's row form of :func:`evaluate`'s results (:class:`CaDDTreeRow`); fixed budgets
    are method ``ddtree``; ``sequences`` and ``trace_units`` the units of their intervals.

    ``tau_world_*`` and ``rel_world_*`` are the between-world columns
    (:func:`treespec_sim.stats.world_columns`) of the mean tau and of the throughput ratio to
    the oracle budget, when the results carry per-world values."""
    rows = []
    for r in results:
        fixed = r.method.startswith("ddtree@")
        worlds = {**world_columns(r.tau_worlds),
                  **world_columns(r.vs_oracle_worlds, prefix="rel")} if r.tau_worlds else {}
        rows.append(CaDDTreeRow(**{
            "regime": r.regime,
            "method": "ddtree" if fixed else r.method, "verifier": "follow",
            "temperature": temperature,
            "budget": int(r.method.split("@")[1]) if fixed else max_budget,
            "cost_model": r.cost_model, "rounds": rounds, "tau_mean": r.tau_mean,
            "tau_ci_low": r.tau_ci[0], "tau_ci_high": r.tau_ci[1],
            "tree_size_mean": r.budget_mean, "round_time_s": r.round_time_s,
            "throughput_tok_s": r.throughput, "speedup_vs_ar": r.speedup_vs_ar,
            "rel_to_baseline": r.vs_oracle[0], "rel_ci_low": r.vs_oracle[1],
            "rel_ci_high": r.vs_oracle[2], "baseline": "ddtree-oracle",
            "throughput_ci": list(r.ci), "vs_longrun": list(r.vs_longrun), **worlds,
        }, sequences=sequences, trace_units=trace_units))
    return rows


def run(cell: Cell, settings: RunSettings) -> list[CaDDTreeRow]:
    """Each world decodes its share of the rounds from ``default_rng([world seed, 7])``
    (:func:`collect`; on a trace, its recorded rounds: :func:`collect_trace`); the rules are
    evaluated on the pooled rounds, the bootstrap drawing from ``default_rng(seed)``."""
    g: CaDDTreeGrid = cell.grid
    if is_trace(cell.regime):
        curves = collect_trace(settings.trace_backend(cell.regime), regime=cell.regime,
                               temperature=cell.temperature, max_budget=g.max_budget)
    else:
        curves = pool([
            collect(world_for(cell.regime, s.seed), regime=cell.regime,
                    rounds=s.rounds, temperature=cell.temperature,
                    max_budget=g.max_budget, seed=s.seed)
            for s in shares(cell, settings)])
    rounds = int(curves.tau.shape[0]) if is_trace(cell.regime) else g.rounds
    sequences = len(np.unique(curves.sequence))  # the units of its intervals
    rows = []
    for cost_name in g.cost_models:
        results = evaluate(curves, settings.cost(cost_name),
                           context_length=g.context_length, seed=settings.seed)
        rows += result_rows(results, temperature=cell.temperature,
                            max_budget=g.max_budget, rounds=rounds, sequences=sequences,
                            trace_units=sequences if is_trace(cell.regime) else None)
    return rows


# ----------------------------------------------------------------------------------- traces
def collect_trace(tr, *, regime: str, temperature: float, max_budget: int) -> RoundCurves:
    """Every budget's exact curves on each recorded round of the trace ``tr``, in order
    (``docs/traces.md``, "The sweep on a trace"): the recorded decode is the decoded sequence
    (one per prompt), so nothing is sampled (``sample=False``)."""

    def curves(rnd: Round) -> tuple[np.ndarray, np.ndarray]:
        return rnd.surrogate_curve, rnd.tau_curve

    seqs = run_rounds(tr, rng=cell_rng(0), contexts=tr.contexts, method="ddtree",
                      budget=max_budget, rule="follow", temperature=temperature, nested=True,
                      sample=False, record=curves)
    width = max_budget + 1
    n = len(seqs)
    surrogate, tau = np.empty((n, width)), np.empty((n, width))
    for r, ((sur, ta),) in enumerate(seqs):
        k = sur.size  # rounds with fewer prefixes are padded with their last value
        surrogate[r, :k], surrogate[r, k:] = sur, sur[-1]
        tau[r, :k], tau[r, k:] = ta, ta[-1]
    sequence = np.array([c.prompt for c in tr.contexts], dtype=np.int64)
    return RoundCurves(regime, float(temperature), surrogate, tau, sequence)


def check_trace(g: CaDDTreeGrid, tr, regime: str) -> None:
    """Refuse, naming the key, an unrecorded temperature or a ``max_budget`` above the trace's
    ``B_max`` (or above the drafter's recorded top ``K``: the budget curve reads it)."""
    check_trace_temperatures(g.temperatures, tr, f"{name}.temperatures", regime)
    check_trace_budget(g.max_budget, tr, f"{name}.max_budget", regime)


def trace_preset(tr, regime: str) -> CaDDTreeGrid:
    """The family's grid for ``--trace FILE``: every recorded temperature, priced with the
    trace's own recorded timings (:data:`~treespec_sim.families.base.RECORDED_COST`: the
    models and machine it was recorded on, not a preset's), ``max_budget`` the trace's
    ``B_max`` (or its drafter top ``K``, if smaller)."""
    return CaDDTreeGrid((regime,), temperatures=tr.temperatures,
                        cost_models=(RECORDED_COST,), rounds=max(2, len(tr)),
                        worlds=1, max_budget=max(8, min(tr.b_max, tr.top_k or tr.b_max)))


def preset(which: str) -> CaDDTreeGrid | None:
    """The family's grid in sweep preset ``which`` (``"paper"``, ``"quick"``,
    ``"caddtree"``)."""
    regimes = paper_regimes()
    if which == "paper":
        # 240 decoded rounds: 30 sequences of 8, the fewest a verdict rests on (MIN_UNITS)
        return CaDDTreeGrid(regimes, temperatures=(0.0, 1.0),
                            cost_models=("a800-qwen3-8b", "h200-qwen3-8b"), rounds=240,
                            worlds=3)
    if which == "quick":
        two = pick_regimes(regimes, ("math500", "alpaca"))[:2]
        return CaDDTreeGrid(two[:1], cost_models=("a800-qwen3-8b", "h200-qwen3-8b"), rounds=12,
                            max_budget=512, worlds=3)
    if which == name:
        return CaDDTreeGrid(regimes, cost_models=("a800-qwen3-8b", "h200-qwen3-8b",
                                                  "tiled-illustrative"), rounds=256)
    return None


