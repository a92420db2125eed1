r"""The ``stochastic`` family: deterministic trees, sampled chains and Tsubame on the same contexts.

For every cell ``(regime, drafter, T, budget)`` the same fresh contexts (drawn from the target's
own process) are drafted by every method; each drafted tree's :math:`E[\tau]` is exact over the
verifier's coins (only contexts and drafted tokens are sampled). Throughput uses a latency
preset: :math:`\tau / (C_d + C_v(n + 1))` with ``n`` the tree's actual size; the correction head's
own cost (a lookup per node) is not modelled.

Drafters (:data:`treespec_sim.synth.DRAFTER_VARIANTS`, knobs of the synthetic drafter):

``none``
    ``correction_quality = 0``: the correction proposal *is* the marginal (DFlash as is).
``corrected``
    ``correction_quality = 0.8``: a first-order (Markov-head-like) correction from the parent.
``strong``
    ``correction_quality = 0.95`` with mismatch, depth degradation and junk halved.

Methods (names of :data:`treespec_sim.methods.METHODS`; verifier): ``chain`` (argmax chain,
follow), ``ddtree`` (follow), ``dynamic`` (EAGLE-2-like, follow), ``sampled-chain`` (marginal
draws, rrs), ``sampled-chain-corrected`` (draws given the sampled parent, rrs),
``tsubame-rrs`` (i.i.d. fill, rrs), ``tsubame-rrsw`` (without replacement, rrsw),
``tsubame-univer`` (without replacement, univer), ``tsubame-rrsw-tempered-plan`` (pass 1 on
the marginals tempered to T). Tsubame fills with
the drafter's correction (the marginal for ``none``). At ``T = 0`` sampled methods take the
top-``k`` of their proposals and are verified with ``follow`` (the ``T -> 0`` limit).

Every round is one :func:`treespec_sim.engine.run_round` (``python -m treespec_sim.sweep
--preset stochastic``). Its claims (:data:`CLAIMS`) are paired differences of exact
:math:`E[\tau]` on shared contexts, each with the sign a paper or the theory states
(``docs/theory/tsubame.md`` §4).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..engine import run_round, run_rounds
from ..methods import get_method, uses_budget
from ..seeds import cell_rng
from ..stats import MeanCI, mean_ci, throughput, world_ci, world_columns
from ..synth import DRAFTER_VARIANTS, drafter_variant, get_regime, make_world
from ..tree import DraftTree
from ..validation import check_budget, check_temperature
from .base import (
    NO_VERDICT,
    Cell,
    Claim,
    ClaimedRange,
    FigureSpec,
    Judgement,
    RunSettings,
    as_tuple,
    check_budgets,
    check_max_rounds,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_worlds,
    headline,
    judge,
    paper_regimes,
    pick_regimes,
    second_stage,
    seconds_per_unit,
    shares,
    world_for,
)
from .render import (
    TSUBAME_PAGE,
    UNIVER_PAGE,
    figure_legend,
    notes,
    verdict_cell,
    worlds_label,
)

__all__ = [
    "BASELINE",
    "CLAIMS",
    "DEFAULT_METHODS",
    "DRAFTERS",
    "MAP_METHODS",
    "MAP_PRESET_NOTE",
    "STYLES",
    "CellRuns",
    "MapPoint",
    "PairClaim",
    "PairedDifference",
    "StochasticGrid",
    "StochasticMapGrid",
    "claims",
    "console_rows",
    "drafter_spec",
    "figures",
    "grid",
    "map_claims",
    "map_crossings",
    "map_points",
    "map_preset",
    "map_tables",
    "name",
    "paired_differences",
    "plot_regime_map",
    "plot_tau_vs_temperature",
    "preset",
    "preset_note",
    "presets",
    "run",
    "run_map",
    "tables",
]

#: The family's name (its ``[stochastic]`` table in a config, the rows' ``family``).
name = "stochastic"
#: What ``--preset stochastic`` runs.
preset_note = "Tsubame, sampled chains, deterministic trees; 3 drafters x T in {0, 0.6, 1}"

#: The drafter variants a grid may name (:data:`treespec_sim.synth.DRAFTER_VARIANTS`).
DRAFTERS = DRAFTER_VARIANTS
#: A regime with a drafter variant's knobs (:func:`treespec_sim.synth.drafter_variant`).
drafter_spec = drafter_variant

#: The family's default methods (names of :data:`treespec_sim.methods.METHODS`).
DEFAULT_METHODS = ("chain", "ddtree", "sampled-chain", "sampled-chain-corrected", "tsubame-rrs",
                   "tsubame-rrsw", "tsubame-univer")


@dataclass(frozen=True)
class StochasticGrid:
    """Deterministic trees, sampled chains and Tsubame; one cell per (regime, drafter, T),
    every method and budget of it on the same contexts (its paired differences are the
    family's claims, so one cell holds both sides of each)."""

    family: ClassVar[str] = "stochastic"
    #: The lists each cell takes one value of (a resumed run may gain values of these).
    cell_axes: ClassVar[tuple[str, ...]] = ("regimes", "drafters", "temperatures")
    #: What one of ``rounds`` is (the unit behind the intervals: see :mod:`treespec_sim.stats`).
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    drafters: tuple[str, ...] = ("corrected",)
    temperatures: tuple[float, ...] = (0.0, 0.6, 1.0)
    budgets: tuple[int, ...] = (64,)
    methods: tuple[str, ...] = DEFAULT_METHODS
    rounds: int = 32
    #: Worlds per regime (seeds ``seed + i``; :func:`world_shares`).
    worlds: int = 3
    #: Vocabulary cap of the drafter-variant worlds (0: none, the regime's own V).
    vocab: int = 0
    #: Cap on a cell's contexts for deciding its claims (``0``: exactly ``rounds``). With a
    #: cap, ``rounds`` is the pilot and one second stage adds what deciding the cell's
    #: undecided claims takes, where that fits under the cap (:func:`run`).
    max_rounds: int = 0

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("drafters", str),
                           ("temperatures", check_temperature), ("budgets", check_budget),
                           ("methods", str)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast,
                                                    f"{self.family}.{name}"))
        check_regimes(self.regimes, self.family)
        for d in self.drafters:
            if d not in DRAFTERS:
                raise ValueError(f"stochastic.drafters: unknown drafter {d!r}; known: "
                                 f"{', '.join(DRAFTERS)}")
        for m in self.methods:
            try:
                get_method(m)
            except ValueError as exc:
                raise ValueError(f"stochastic.methods: {exc}") from None
        check_temperatures(self.temperatures, self.family)
        check_budgets(self.budgets, self.family)
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)
        check_max_rounds(self.max_rounds, self.rounds, self.family)
        if not isinstance(self.vocab, int) or self.vocab < 0:
            raise ValueError(f"stochastic.vocab must be an integer >= 0 (0: no cap); "
                             f"got {self.vocab!r}")

    def cells(self) -> list[Cell]:
        """One cell per (regime, drafter, T) (its budget: the grid's largest)."""
        return [Cell(self, r, t, max(self.budgets), d) for r in self.regimes
                for d in self.drafters for t in self.temperatures]

    def labels(self) -> list[tuple[str, int]]:
        """``(method, budget)`` of every row of a cell: the methods without a budget (budget
        0), then every budget's methods with one."""
        return ([(m, 0) for m in self.methods if not uses_budget(m)]
                + [(m, b) for b in self.budgets for m in self.methods if uses_budget(m)])


#: The family's grid class (the registry's ``grid``).
grid = StochasticGrid


def run(cell: Cell, settings: RunSettings) -> list[dict]:
    """Every method and budget of the cell on the same contexts of every world
    (:class:`CellRuns`); with the grid's ``max_rounds``, the ``rounds`` are a pilot and one
    second stage adds the contexts that deciding the cell's undecided claims takes, up to
    ``max_rounds`` (:func:`~treespec_sim.verdicts.second_stage`)."""
    if isinstance(cell.grid, StochasticMapGrid):
        return run_map(cell, settings)
    g: StochasticGrid = cell.grid
    parts = shares(cell, settings)
    runs = CellRuns([world_for(cell.regime, s.seed, g.vocab or None, cell.option)
                     for s in parts], seeds=[s.seed for s in parts], regime=cell.regime,
                    drafter=cell.option, temperature=cell.temperature, labels=g.labels(),
                    cost=settings.cost(settings.cost_model))
    runs.extend([s.rounds for s in parts])
    if g.max_rounds:
        b = 64 if 64 in g.budgets else min(g.budgets)
        more = second_stage(runs.judgements(b), runs.contexts, g.max_rounds)
        if more:
            runs.extend([math.ceil(more / len(parts))] * len(parts))
    return runs.rows(settings.cost_model)


class CellRuns:
    """Every ``(method, budget)`` label of one (regime, drafter, T) cell on the same contexts,
    world by world, extendable: :meth:`extend` continues every world's context stream and
    every label's draw stream, so a cell of ``n`` contexts is the first ``n`` of a larger one.

    World ``i`` (``worlds[i]``, seed ``seeds[i]``) draws its contexts from
    ``default_rng([seed, crc32("regime|drafter|T"), 0])`` (the same for every method and
    budget: differences between methods are paired) and a label's draws from
    ``default_rng([seed, crc32("regime|drafter|T|budget|method")])`` (budget 0 for the
    methods without one).
    """

    def __init__(self, worlds: Sequence, *, seeds: Sequence[int], regime: str, drafter: str,
                 temperature: float, labels: Sequence[tuple[str, int]], cost) -> None:
        if not (len(worlds) == len(seeds) >= 1):
            raise ValueError(f"worlds and seeds must have the same length >= 1; got "
                             f"{len(worlds)}, {len(seeds)}")
        self.worlds, self.seeds, self.labels = list(worlds), list(seeds), list(labels)
        self.regime, self.drafter, self.temperature, self.cost = (regime, drafter,
                                                                  temperature, cost)
        key = f"{regime}|{drafter}|{temperature!r}"
        self._ctx_rngs = [cell_rng(s, key, 0) for s in seeds]
        self._rngs = {(m, b): [cell_rng(s, f"{key}|{b}|{m}") for s in seeds]
                      for m, b in self.labels}
        # per label, per world: (exact tau, tree size, modelled seconds, rule) of each context
        self.records = {lab: [[] for _ in worlds] for lab in self.labels}

    @property
    def contexts(self) -> int:
        """Contexts so far, over every world."""
        first = self.records[self.labels[0]]
        return sum(len(w) for w in first)

    def extend(self, more: Sequence[int]) -> None:
        """``more[i]`` new contexts of world ``i``, every label run on them."""
        for i, (world, n) in enumerate(zip(self.worlds, more, strict=True)):
            contexts = [world.sample_context(self._ctx_rngs[i]) for _ in range(n)]
            for m, b in self.labels:
                self.records[(m, b)][i] += [seq[0] for seq in run_rounds(
                    world, contexts=contexts, rng=self._rngs[(m, b)][i], method=m,
                    budget=b or None, temperature=self.temperature, sample=False,
                    cost=self.cost,
                    record=lambda r: (r.expected_tau, r.tree_size, r.cost_s, r.rule))]

    def taus(self, label: tuple[str, int]) -> np.ndarray:
        """A label's exact E[tau] per context, world after world."""
        return np.array([p[0] for part in self.records[label] for p in part])

    def judgements(self, budget: int) -> list[Judgement]:
        """:func:`judge` of every claim of :data:`CLAIMS` stated at this cell's temperature,
        on the paired differences at ``budget`` (chains at their own length)."""
        have = {m: (m, b) for m, b in self.labels if b in (0, budget)}
        out = []
        for claim in CLAIMS:
            if (claim.sign is None or not claim.applies(self.temperature)
                    or claim.label.endswith("T = 0") != (self.temperature == 0.0)
                    or claim.a not in have or claim.b not in have):
                continue
            d = mean_ci(self.taus(have[claim.a]) - self.taus(have[claim.b]))
            out.append(judge(d.mean, d.low, d.high, _claimed(claim.sign), units=self.contexts))
        return out

    def rows(self, cost_name: str) -> list[dict]:
        """One row per label: the pooled mean and t-interval over every context, the
        between-world columns, throughput over every round and ``taus`` (per context, world
        after world, for paired comparisons)."""
        ar_seconds = float(self.cost.verify_cost(1))
        depth = self.worlds[0].depth
        rows = []
        for m, b in self.labels:
            per_world = self.records[(m, b)]
            per = [p for part in per_world for p in part]
            taus = np.array([p[0] for p in per])
            sizes = np.array([p[1] for p in per], dtype=np.float64)
            seconds = np.array([p[2] for p in per])
            ci = mean_ci(taus)
            thr = throughput(taus, seconds)
            rows.append({
                "regime": self.regime, "drafter": self.drafter, "method": m,
                "verifier": per[0][3], "temperature": self.temperature,
                "budget": b or depth, "cost_model": cost_name, "rounds": int(taus.size),
                "seed": self.seeds[0], "tau_mean": ci.mean, "tau_ci_low": ci.low,
                "tau_ci_high": ci.high,
                **world_columns([float(np.mean([p[0] for p in part])) for part in per_world]),
                "tree_size_mean": float(sizes.mean()), "round_time_s": float(seconds.mean()),
                "throughput_tok_s": thr, "speedup_vs_ar": thr * ar_seconds,
                "taus": taus.tolist(),
            })
        return rows


def _at_budget(row: dict, budget: int) -> bool:
    """A row at ``budget`` (chains, whatever their budget, stand beside every budget)."""
    return row["budget"] == budget or not uses_budget(row["method"])


def default_budget(rows: Sequence[dict]) -> int:
    """The budget the family's table, figure and claims read: 64, else the grid's first."""
    budgets = sorted({r["budget"] for r in rows if uses_budget(r["method"])})
    return 64 if 64 in budgets else (budgets[0] if budgets else 0)


@dataclass(frozen=True)
class PairClaim:
    """A comparison of two methods on shared contexts, and what is claimed about ``a - b``.

    ``sign``: the claimed sign of ``a - b`` (``+1``, ``-1``; ``0``: ``a = b``; None: measured,
    no claim); ``min_temperature``/``max_temperature``: the temperatures it is stated at;
    ``statement``: the claim as a sentence (the findings); ``page``: where it is discussed.
    """

    label: str
    a: str
    b: str
    sign: int | None
    statement: str
    page: str = TSUBAME_PAGE
    min_temperature: float = 0.0
    max_temperature: float = float("inf")

    def applies(self, temperature: float) -> bool:
        """Whether the claim is stated at ``temperature``."""
        return self.min_temperature <= temperature <= self.max_temperature


#: The comparisons of the family's table; ``a - b`` is reported.
CLAIMS = (
    PairClaim("Tsubame ≈ DDTree at T = 0", "tsubame-rrsw", "ddtree", 0,
              "At T = 0 Tsubame-RRSw builds DDTree's tree", max_temperature=0.0),
    PairClaim("deterministic tree vs corrected sampled chain", "ddtree",
              "sampled-chain-corrected", -1,
              "At T = 1 a deterministic tree falls behind the corrected sampled chain "
              "(DFlash PR #169)", min_temperature=1.0),
    PairClaim("Tsubame-RRSw vs deterministic tree", "tsubame-rrsw", "ddtree", +1,
              "At T > 0 Tsubame-RRSw beats the deterministic tree", min_temperature=1e-12),
    PairClaim("Tsubame-RRSw vs corrected sampled chain", "tsubame-rrsw",
              "sampled-chain-corrected", +1,
              "At T > 0 Tsubame-RRSw beats the corrected sampled chain",
              min_temperature=1e-12),
    PairClaim("Tsubame-RRSw vs Tsubame-RRS", "tsubame-rrsw", "tsubame-rrs", +1,
              "At T > 0 drawing without replacement (RRSw) beats i.i.d. draws (RRS)",
              min_temperature=1e-12),
    PairClaim("Tsubame-UniVer vs Tsubame-RRSw", "tsubame-univer", "tsubame-rrsw", +1,
              "At T > 0 UniVer beats RRSw on Tsubame's trees", page=UNIVER_PAGE,
              min_temperature=1e-12),
    PairClaim("tempered plan vs DDTree plan (Tsubame-RRSw)", "tsubame-rrsw-tempered-plan",
              "tsubame-rrsw", None, "", min_temperature=1e-12),
)


@dataclass(frozen=True)
class PairedDifference:
    """``a - b`` of one :class:`PairClaim` in one (regime, drafter, T) cell.

    ``pooled``: the mean and 95% t-interval over the paired contexts of every world;
    ``relative``: the mean difference over ``b``'s mean; ``worlds``: each world's difference
    of means, and ``between``: their t-interval (``k - 1`` degrees of freedom; None with fewer
    than two worlds or without per-world means).
    """

    claim: PairClaim
    regime: str
    drafter: str
    temperature: float
    pooled: MeanCI
    relative: float
    contexts: int
    worlds: tuple[float, ...] = ()
    between: MeanCI | None = None
    #: What one context of the cell cost in its run (:func:`seconds_per_unit`; 0: not known).
    seconds_per_unit: float = 0.0

    @property
    def scope(self) -> str:
        """The cell, as the findings name it (``"math500, drafter corrected, T = 0"``)."""
        return f"{self.regime}, drafter {self.drafter}, T = {self.temperature:g}"

    @property
    def claimed(self) -> ClaimedRange | None:
        """The claimed range of ``a - b`` (None: no claim)."""
        return _claimed(self.claim.sign)

    def judgement(self) -> Judgement:
        """The claim's verdict on the pooled interval by the one rule (:func:`judge`), its
        reason saying what the interval alone does not: a difference of exactly 0, a contrary
        result by design, or one that holds pooled but not between worlds."""
        d, sign = self.pooled, self.claim.sign
        j = judge(d.mean, d.low, d.high, self.claimed, units=self.contexts)
        extra = ""
        if j.verdict == "holds" and sign == 0:
            extra = "exactly 0: the same tree on every context"
        elif j.verdict == "holds" and self.between is not None and not self.claimed.inside(
                self.between.low, self.between.high):
            extra = "pooled; not shown between worlds"
        elif (j.verdict == "does not hold" and sign == 0
              and DRAFTER_VARIANTS.get(self.drafter, {}).get("correction_quality", 0.0) > 0):
            extra = (f"by design: with the `{self.drafter}` drafter Tsubame's T = 0 tree is the "
                     "top-k of the corrected proposals, a better deterministic tree than "
                     "DDTree's on the marginals; with marginal proposals (drafter `none`) the "
                     "difference is exactly 0")
        return replace(j, reason="; ".join(x for x in (extra, j.reason) if x))

    def verdict(self) -> tuple[str, str]:
        """``(verdict, reason)`` of :meth:`judgement`."""
        j = self.judgement()
        return j.verdict, j.reason


def _claimed(sign: int | None) -> ClaimedRange | None:
    """A :class:`PairClaim` sign as the claimed range of ``a - b``: ``= 0``, ``> 0``, ``< 0``."""
    if sign is None:
        return None
    if sign == 0:
        return ClaimedRange(0.0, 0.0)
    return ClaimedRange(0.0, strict=True) if sign > 0 else ClaimedRange(high=0.0, strict=True)


def paired_differences(rows: Sequence[dict], budget: int) -> list[PairedDifference]:
    """Every :data:`CLAIMS` comparison at ``budget`` (chains at their own length) in every
    (regime, drafter, T) cell whose rows carry per-context values (``taus``), claim by claim,
    cells in sorted order."""
    index = {(r["regime"], r["drafter"], r["temperature"], r["method"]): r for r in rows
             if "taus" in r and not r.get("map") and _at_budget(r, budget)}
    cells = sorted({k[:3] for k in index})
    out = []
    for claim in CLAIMS:
        for regime, drafter, t in cells:
            if claim.label.endswith("T = 0") != (t == 0.0):
                continue
            ra, rb = index.get((regime, drafter, t, claim.a)), index.get((regime, drafter, t,
                                                                          claim.b))
            if ra is None or rb is None or len(ra["taus"]) != len(rb["taus"]):
                continue
            d = mean_ci(np.asarray(ra["taus"]) - np.asarray(rb["taus"]))
            wa, wb = ra.get("tau_world_means"), rb.get("tau_world_means")
            worlds = (tuple(float(x) for x in np.subtract(wa, wb))
                      if wa and wb and len(wa) == len(wb) else ())
            between = world_ci(worlds) if len(worlds) >= 2 else None
            n = len(ra["taus"])
            cost = (seconds_per_unit(rows, ra, n)
                    + (seconds_per_unit(rows, rb, n) if ra.get("cell") != rb.get("cell") else 0))
            out.append(PairedDifference(claim, regime, drafter, float(t), d,
                                        d.mean / rb["tau_mean"], n, worlds, between, cost))
    return out


def _between_text(p: PairedDifference) -> str:
    """``a - b`` between worlds: the t-interval over per-world differences, then each world's."""
    if not p.worlds:
        return "—"
    each = " / ".join(f"{x:+.2f}" for x in p.worlds)
    if p.between is None:
        return f"one world ({each})"
    ci = p.between
    return f"{ci.mean:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}] ({each})"


def _verdict_cell(p: PairedDifference) -> str:
    """The table's last two columns: what is claimed, and whether it holds."""
    sign = p.claim.sign
    if sign is None or not p.claim.applies(p.temperature):
        return "— | —"
    claimed = "a = b" if sign == 0 else "a > b" if sign > 0 else "a < b"
    j = p.judgement()
    if j.verdict != "holds":
        return f"{claimed} | {verdict_cell(j, p.claim.page)}"
    text = ("holds pooled; not shown between worlds" if j.reason.startswith("pooled")
            else "holds, also between worlds" if p.between is not None and sign != 0
            else f"holds ({j.reason})" if j.reason else "holds")
    return f"{claimed} | {text}"


def tables(rows: list[dict]) -> list[str]:
    """The family's section of ``summary.md``: the paired claims table with its verdicts (and
    the regime map's, :func:`map_tables`, when the rows hold a map)."""
    mapped = map_tables(rows)
    rows = [r for r in rows if not r.get("map")]
    if not rows:
        return mapped
    return _pair_tables(rows) + mapped


def _pair_tables(rows: list[dict]) -> list[str]:
    b = default_budget(rows)
    k = worlds_label(rows)
    out = ["## Sampled trees at T > 0: does Tsubame reverse the sampled-chain advantage?", "",
           f"Paired differences of exact E[τ] on shared contexts, B = {b} (chains: L nodes). "
           f"First the 95% t-interval over the contexts of {k} worlds pooled (the verdict in the "
           f"last column reads this one, and says when a claim that holds on it also holds on "
           f"the next); then the 95% t-interval over the {k} per-world differences (k − 1 "
           "degrees of freedom) and each world's difference:", "",
           "| claim | regime | drafter | T | Δτ = a − b [95% CI, contexts pooled] | relative | "
           "Δτ between worlds [95% t, k − 1 dof] | claimed | holds? |",
           "|---|---|---|---|---|---|---|---|---|"]
    lines = [f"| {p.claim.label} | {p.regime} | {p.drafter} | {p.temperature:g} | "
             f"{p.pooled.mean:+.2f} [{p.pooled.low:+.2f}, {p.pooled.high:+.2f}] | "
             f"{100 * p.relative:+.1f}% | {_between_text(p)} | {_verdict_cell(p)} |"
             for p in paired_differences(rows, b)]
    return out + lines + notes(lines) + [""]


def _margin(sign: int):
    """How far a claim's interval lies on its side (larger: more in its favour)."""
    if sign == 0:
        return lambda c: -max(abs(c.low), abs(c.high))
    return (lambda c: c.low) if sign > 0 else (lambda c: -c.high)


def claims(rows: list[dict]) -> list[Claim]:
    """One headline per claim of :data:`CLAIMS` that states a sign, over the cells at the
    temperatures it is stated at (Δτ in tokens per round, pooled intervals)."""
    extra = map_claims(rows)
    rows = [r for r in rows if not r.get("map")]
    if not rows:
        return extra
    diffs = paired_differences(rows, default_budget(rows))
    out = []
    for claim in CLAIMS:
        if claim.sign is None:
            continue
        evidence = []
        for p in diffs:
            if p.claim is not claim or not claim.applies(p.temperature):
                continue
            j = p.judgement()
            evidence.append(Claim(claim.statement, p.pooled.mean, p.pooled.low, p.pooled.high,
                                  "tokens per round", j.verdict, reason=j.reason,
                                  page=claim.page, scope=p.scope, family=name,
                                  units=p.contexts, needed=j.needed,
                                  seconds_per_unit=p.seconds_per_unit))
        one = headline(claim.statement, evidence, margin=_margin(claim.sign),
                       cells="(regime, drafter, T) cells")
        if one is not None:
            out.append(one)
    return out + extra


def preset(which: str) -> StochasticGrid | None:
    """The family's grid in sweep preset ``which`` (``"paper"``, ``"quick"``,
    ``"stochastic"``)."""
    regimes = paper_regimes()
    three = pick_regimes(regimes, ("math500", "mt-bench", "alpaca"))
    if which == "paper":
        # a pilot of 33 contexts a cell, then one second stage where deciding a claim takes
        # more, up to 300 (the cap sized so that `make sweep` stays near 5 minutes on 2
        # workers; the summary says what the claims left undecided would cost)
        return StochasticGrid(three, drafters=("corrected",), temperatures=(0.0, 0.6, 1.0),
                              budgets=(64,), rounds=33, worlds=3, vocab=0, max_rounds=300)
    if which == "quick":
        return StochasticGrid(("small",), drafters=("corrected",), budgets=(16,), rounds=9,
                              worlds=3)
    if which == name:
        return StochasticGrid(three, drafters=("none", "corrected", "strong"),
                              budgets=(16, 64, 256), rounds=48)
    return None


#: Colour and line style of each method in the family's figure.
STYLES = {"chain": ("k", ":"), "dynamic": ("tab:cyan", "--"), "sampled-chain": ("tab:gray", ":"),
          "sampled-chain-corrected": ("tab:brown", "-."), "tsubame-rrs": ("tab:orange", "--"),
          "tsubame-rrsw": ("tab:red", "-"), "tsubame-univer": ("tab:purple", "-"),
          "tsubame-rrsw-tempered-plan": ("tab:pink", "--")}
#: The method every other is drawn against.
BASELINE = "ddtree"


def plot_tau_vs_temperature(rows: list[dict], path: Path, budget: int | None = None) -> None:
    """Each method's paired difference in E[tau] to DDTree vs T, one panel per (regime,
    drafter), at ``budget`` (default: 64, or the grid's first budget without 64).

    The methods are drawn on the same contexts, so the comparison is the paired difference
    ``tau(method) - tau(ddtree)`` per context; its mean and 95% t-interval over the contexts
    pooled over the worlds (:func:`treespec_sim.stats.mean_ci`) are plotted, DDTree being the
    line at 0 (its own τ is in the panel's title). The methods are spread a little along T so
    that their bars do not hide each other. Rows without per-context values (``taus``) are
    left out. One legend for the figure, below the panels and inside the canvas.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if any(r.get("map") for r in rows):  # a map run: its figure beside this one
        plot_regime_map(rows, Path(path).with_name("regime_map.png"))
        rows = [r for r in rows if not r.get("map")]
        if not rows:  # a map alone: say where its figure is rather than draw empty panels
            fig, ax = plt.subplots(figsize=(6.0, 1.4), layout="constrained")
            ax.axis("off")
            ax.text(0.5, 0.5, "This run has no temperature sweep (only the regime map at "
                    "T = 1):\nits figure is regime_map.png, in this folder.", ha="center",
                    va="center", fontsize=10)
            fig.savefig(path, dpi=120)
            plt.close(fig)
            return
    if budget is None:
        budget = default_budget(rows)
    at = [r for r in rows if "taus" in r and _at_budget(r, budget)]
    panels = list(dict.fromkeys((r["regime"], r["drafter"]) for r in at)) or [("—", "—")]
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    # at least 9 inches wide: the legend (up to nine methods and a long title) below one or
    # two panels would otherwise be as large as the panels themselves
    fig, axes = plt.subplots(nrows, cols, figsize=(max(4.6 * cols, 9.0), 3.6 * nrows + 1.0),
                             squeeze=False, layout="constrained")
    temps = sorted({r["temperature"] for r in at})
    step = 0.012 * max(1.0, (temps[-1] - temps[0]) / 0.5) if temps else 0.0
    handles: dict[str, object] = {}
    for ax, (regime, drafter) in zip(axes.flat, panels, strict=False):
        cell = {(r["method"], r["temperature"]): r for r in at
                if (r["regime"], r["drafter"]) == (regime, drafter)}
        base = {t: cell[(BASELINE, t)] for t in temps if (BASELINE, t) in cell}
        shown = [m for m in STYLES if any((m, t) in cell for t in base)]
        for k, method in enumerate(shown):
            color, ls = STYLES[method]
            pts = []
            for t in sorted(base):
                r = cell.get((method, t))
                if r is None or len(r["taus"]) != len(base[t]["taus"]):
                    continue
                pts.append((t, mean_ci(np.subtract(r["taus"], base[t]["taus"])),
                            r["verifier"]))
            if not pts:
                continue
            x = [t + (k - (len(shown) - 1) / 2) * step for t, _, _ in pts]
            art = ax.errorbar(x, [d.mean for _, d, _ in pts],
                              yerr=[[d.mean - d.low for _, d, _ in pts],
                                    [d.high - d.mean for _, d, _ in pts]],
                              color=color, ls=ls, marker="o", ms=3, capsize=2)
            verifiers = "/".join(dict.fromkeys(v for *_, v in pts))
            handles.setdefault(f"{method} ({verifiers})", art)
        ax.axhline(0.0, color="tab:blue", lw=1.2)
        levels = ", ".join(f"{base[t]['tau_mean']:.2f}" for t in sorted(base))
        ax.set_title(f"{regime} · drafter {drafter} · B = {budget}\nDDTree τ = {levels} "
                     f"at T = {', '.join(f'{t:g}' for t in sorted(base))}", fontsize=9)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("Δ E[τ] vs DDTree (tokens per round)")
        ax.set_xticks(temps)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    n = "/".join(sorted({str(len(r["taus"])) for r in at})) or "the"
    worlds = "/".join(sorted({str(r["worlds"]) for r in at if r.get("worlds")}))
    pooled = f" pooled over {worlds} worlds" if worlds else ""
    handles["DDTree (follow), the baseline: 0"] = plt.Line2D([], [], color="tab:blue")
    figure_legend(fig, list(handles.values()), list(handles), max_cols=4,
                  title=f"method (verifier at T = 0 / T > 0) minus DDTree on the same contexts; "
                  f"bars: paired 95% t-interval over {n} contexts{pooled}; chains have L nodes")
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: File name -> figure.
figures = {
    "tau_vs_temperature.png": FigureSpec("τ vs temperature: each method minus DDTree, paired",
                                         plot_tau_vs_temperature),
}


#: The methods the console table shows (the claims' main arms).
CONSOLE_METHODS = ("ddtree", "sampled-chain-corrected", "tsubame-rrsw", "tsubame-univer")


def console_rows(rows: list[dict]) -> list[dict]:
    """DDTree, the corrected sampled chain and Tsubame at the default budget, every cell."""
    mapped = [r for r in rows if r.get("map") and r["method"] in CONSOLE_METHODS
              and r.get("proposal_temperature") in (None, 1.0)]
    rows = [r for r in rows if not r.get("map")]
    b = default_budget(rows) if rows else 0
    return [r for r in rows if r["method"] in CONSOLE_METHODS and _at_budget(r, b)] + mapped


# ============================================================================= the regime map
# Where sampled trees beat deterministic ones at T = 1 (docs/theory/tsubame.md §5): the
# drafter's sampling law (a proposal temperature T_q applied to its laws for the draws, its
# ranking unchanged) and its correction's coherence (correction_quality) against the target's
# entropy at T = 1 (its logit_scale, a multiple of the calibrated one).

#: What ``--preset stochastic-map`` runs.
MAP_PRESET_NOTE = ("the regime map at T = 1: drafter sampling law (proposal temperature, "
                   "correction quality) x target entropy (a few minutes on 2 workers)")
#: The map's methods: (registered method, rule, proposal: "none" (deterministic), "marginal"
#: or "corrected"); the sampled ones draw at the proposal temperature ``T_q``
#: (``options={"proposal_temperature": T_q}``); ``tsubame-rrsw-marginal`` is Tsubame's plan
#: filled from the marginals.
MAP_METHODS = (("chain", "follow", "none"), ("ddtree", "follow", "none"),
               ("sampled-chain", "rrs", "marginal"),
               ("sampled-chain-corrected", "rrs", "corrected"),
               ("tsubame-rrsw-marginal", "rrsw", "marginal"),
               ("tsubame-rrsw", "rrsw", "corrected"))
#: The public points the map places (``docs/theory/tsubame.md`` §5).
PR169_RATIO = 1.16 / 2.96    # z-lab/dflash#169: independent marginal sampling / argmax chain
LUCEBOX_RATIO = 6.74 / 5.57  # Luce-Org/lucebox#413: sampled tree / chain, T = 1


@dataclass(frozen=True)
class StochasticMapGrid:
    """The regime map: one cell per (regime, target logit-scale factor) at ``temperature``.

    Every cell's contexts are shared by every method, proposal temperature and correction
    quality (paired differences); DDTree and the argmax chain do not depend on the drafter's
    sampling law, the marginal sampled methods not on the correction.
    """

    family: ClassVar[str] = "stochastic"
    cell_axes: ClassVar[tuple[str, ...]] = ("regimes", "logit_scales")
    unit: ClassVar[str] = "contexts"
    regimes: tuple[str, ...]
    #: Multiples of the regime's calibrated ``logit_scale`` (< 1: a flatter target at T = 1).
    logit_scales: tuple[float, ...] = (0.25, 0.5, 1.0, 1.6)
    #: Temperatures the drafter's laws are tempered to for the draws (1: its own law at T = 1).
    proposal_temperatures: tuple[float, ...] = (0.5, 0.8, 1.0, 1.25, 1.6)
    #: ``correction_quality`` values of the corrected methods (0 is the marginal methods).
    correction_qualities: tuple[float, ...] = (0.8, 0.95)
    temperature: float = 1.0
    budget: int = 64
    rounds: int = 30
    worlds: int = 2

    def __post_init__(self) -> None:
        for name, cast in (("regimes", str), ("logit_scales", check_temperature),
                           ("proposal_temperatures", check_temperature),
                           ("correction_qualities", check_temperature)):
            object.__setattr__(self, name, as_tuple(getattr(self, name), cast,
                                                    f"{self.family}.{name}"))
        check_regimes(self.regimes, self.family)
        check_temperatures(self.logit_scales, f"{self.family}.logit_scales", positive=True)
        check_temperatures(self.proposal_temperatures, self.family, positive=True)
        check_temperatures((self.temperature,), self.family, positive=True)
        for k in self.correction_qualities:
            if not 0.0 < k <= 1.0:
                raise ValueError(f"stochastic.correction_qualities must be in (0, 1]; got {k!r}")
        object.__setattr__(self, "budget", check_budget(self.budget, f"{self.family}.budget"))
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)

    def cells(self) -> list[Cell]:
        return [Cell(self, r, self.temperature, self.budget, f"alpha_x{a!r}")
                for r in self.regimes for a in self.logit_scales]


def map_preset() -> StochasticMapGrid:
    """The ``stochastic-map`` preset: math500 and mt-bench (calibrated at T = 0 and T = 1)."""
    return StochasticMapGrid(pick_regimes(paper_regimes(), ("math500", "mt-bench")))


#: The family's further sweep presets (``python -m treespec_sim.sweep --preset NAME``):
#: name -> (what it runs, grid factory).
presets = {"stochastic-map": (MAP_PRESET_NOTE, map_preset)}


@functools.lru_cache(maxsize=4)  # each V = 32768 world holds its per-topic kernels
def _map_world(regime: str, seed: int, alpha: float, kappa: float):
    """The regime with the target's ``logit_scale = alpha`` and the drafter's
    ``correction_quality = kappa`` (neither moves the drafter's marginals)."""
    spec = get_regime(regime)
    return make_world(replace(spec, name=f"{regime}+map", logit_scale=alpha,
                              correction_quality=kappa), seed=seed)


def _entropy(row) -> float:
    p = np.asarray(row, dtype=np.float64)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def run_map(cell: Cell, settings: RunSettings) -> list[dict]:
    """One map cell: every method at every proposal temperature and correction quality on
    the same contexts of every world; one row each (``map`` rows, see :func:`map_points`)."""
    g: StochasticMapGrid = cell.grid
    factor = float(cell.option.removeprefix("alpha_x"))
    alpha = get_regime(cell.regime).logit_scale * factor
    parts = shares(cell, settings)
    cost = settings.cost(settings.cost_model)
    t, b = cell.temperature, cell.budget
    key = f"map|{cell.regime}|{factor!r}|{t!r}|{b}"
    kappas = g.correction_qualities
    contexts, entropy = [], []
    for s in parts:
        w = _map_world(cell.regime, s.seed, alpha, kappas[0])
        rng_ctx = cell_rng(s.seed, key, 0)
        cs = [w.sample_context(rng_ctx) for _ in range(s.rounds)]
        contexts.append(cs)
        root = [DraftTree.from_parents([-1], [c.last_token]) for c in cs]
        entropy += [_entropy(np.asarray(w.target_oracle(c, r, t).row(0)))
                    for c, r in zip(cs, root, strict=True)]
    ent = np.asarray(entropy)
    ar_seconds = float(cost.verify_cost(1))
    depth = get_regime(cell.regime).depth
    rows = []
    for label, rule, kind in MAP_METHODS:
        t_qs = (None,) if kind == "none" else g.proposal_temperatures
        ks = kappas if kind == "corrected" else (kappas[0] if kind == "none" else 0.0,)
        for t_q in t_qs:
            for kappa in ks:
                per_world = []
                for s, cs in zip(parts, contexts, strict=True):
                    w = _map_world(cell.regime, s.seed, alpha, kappas[0] if kappa == 0.0
                                   else kappa)
                    rng = cell_rng(s.seed, f"{key}|{label}|{t_q!r}|{kappa!r}")
                    recs = []
                    options = None if t_q is None else {"proposal_temperature": t_q}
                    for c in cs:
                        rnd = run_round(w, c, method=label, budget=b, rule=rule,
                                        temperature=t, rng=rng, sample=False, cost=cost,
                                        options=options)
                        tree = rnd.tree
                        inner = tree.depth[np.unique(tree.parent[1:])] if tree.size else []
                        levels = int(np.count_nonzero(np.unique(inner) >= 1)) \
                            if kind == "corrected" else 0
                        recs.append((rnd.expected_tau, rnd.tree_size, rnd.cost_s, levels))
                    per_world.append(recs)
                per = [p for part in per_world for p in part]
                taus = np.array([p[0] for p in per])
                sizes = np.array([p[1] for p in per], dtype=np.float64)
                seconds = np.array([p[2] for p in per])
                charged = seconds + np.array([p[3] for p in per]) * float(cost.draft_cost())
                ci = mean_ci(taus)
                thr = throughput(taus, seconds)
                drafter = ("—" if kind == "none" else
                           f"T_q = {t_q:g}, kappa = {kappa:g}")
                rows.append({
                    "regime": cell.regime, "drafter": drafter, "method": label,
                    "verifier": rule, "temperature": t,
                    "budget": b if label not in ("chain",) and not label.startswith(
                        "sampled-chain") else depth,
                    "cost_model": settings.cost_model, "rounds": int(taus.size),
                    "seed": parts[0].seed, "tau_mean": ci.mean, "tau_ci_low": ci.low,
                    "tau_ci_high": ci.high,
                    **world_columns([float(np.mean([p[0] for p in part]))
                                     for part in per_world]),
                    "tree_size_mean": float(sizes.mean()), "round_time_s": float(seconds.mean()),
                    "throughput_tok_s": thr, "speedup_vs_ar": thr * ar_seconds,
                    "taus": taus.tolist(), "map": True, "logit_scale_factor": factor,
                    "logit_scale": alpha, "proposal_temperature": t_q,
                    "correction_quality": kappa if kind != "none" else None,
                    "target_entropy": float(ent.mean()),
                    "target_entropy_low_frac": float(np.mean(ent < 0.05)),
                    "throughput_charged_tok_s": throughput(taus, charged),
                    "correction_levels_mean": float(np.mean([p[3] for p in per])),
                })
    return rows


@dataclass(frozen=True)
class MapPoint:
    """One point of the regime map: a (regime, logit-scale factor, correction quality, proposal
    temperature) and what its paired differences say.

    ``kappa = 0`` is the marginal drafter (the marginal sampled chain and Tsubame filled from
    the marginals); ``chain_gap`` is DDTree minus the sampled chain, ``vs_ddtree`` and
    ``vs_chain`` Tsubame-RRSw minus DDTree and minus the sampled chain (paired over the
    cell's contexts); the ratios are of mean E[tau].
    """

    regime: str
    factor: float
    kappa: float
    t_q: float
    entropy: float
    chain_gap: MeanCI
    vs_ddtree: MeanCI
    vs_chain: MeanCI
    marginal_over_argmax: float
    tree_over_argmax: float
    ddtree_tau: float
    chain_tau: float
    tsubame_tau: float
    #: The shared contexts the paired intervals rest on.
    contexts: int = 0

    @property
    def ddtree_behind(self) -> bool:
        """DDTree falls behind the sampled chain (the paired interval below 0)."""
        return self.chain_gap.high < 0

    @property
    def tsubame_best(self) -> bool:
        """Tsubame-RRSw beats both DDTree and the sampled chain (both intervals above 0)."""
        return self.vs_ddtree.low > 0 and self.vs_chain.low > 0

    @property
    def scope(self) -> str:
        return (f"{self.regime} α×{self.factor:g} (H = {self.entropy:.2f} nats), "
                f"κ = {self.kappa:g}, T_q = {self.t_q:g}")


def map_points(rows: Sequence[dict]) -> list[MapPoint]:
    """Every point of the regime map in ``rows`` (the ``map`` rows of a map cell)."""
    cells: dict[tuple, dict] = {}
    for r in rows:
        if r.get("map"):
            cells.setdefault((r["regime"], r["logit_scale_factor"]), {})[
                (r["method"], r["proposal_temperature"], r["correction_quality"])] = r
    out = []
    for (regime, factor), c in sorted(cells.items()):
        dd = next((r for (m, _, _), r in c.items() if m == "ddtree"), None)
        am = next((r for (m, _, _), r in c.items() if m == "chain"), None)
        if dd is None or am is None:
            continue
        for (m, t_q, kappa), sc in sorted(c.items(), key=lambda kv: str(kv[0])):
            if m not in ("sampled-chain", "sampled-chain-corrected"):
                continue
            tree = c.get(("tsubame-rrsw" if m.endswith("corrected") else
                          "tsubame-rrsw-marginal", t_q, kappa))
            marg = c.get(("sampled-chain", t_q, 0.0))
            if tree is None or marg is None:
                continue
            d, s, ts = (np.asarray(x["taus"]) for x in (dd, sc, tree))
            out.append(MapPoint(regime, float(factor), float(kappa), float(t_q),
                                float(dd["target_entropy"]), mean_ci(d - s), mean_ci(ts - d),
                                mean_ci(ts - s), marg["tau_mean"] / am["tau_mean"],
                                tree["tau_mean"] / am["tau_mean"], dd["tau_mean"],
                                sc["tau_mean"], tree["tau_mean"], int(d.size)))
    return sorted(out, key=lambda p: (p.regime, p.kappa, -p.entropy, p.t_q))


def _crossing(xs: Sequence[float], ys: Sequence[float], level: float) -> float | None:
    """The ``x`` (log-interpolated) where ``ys`` first crosses ``level``, or None."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), list(zip(xs, ys, strict=True))[1:],
                                  strict=False):
        if (y0 - level) * (y1 - level) <= 0 and y0 != y1:
            f = (level - y0) / (y1 - y0)
            return float(np.exp(np.log(x0) + f * (np.log(x1) - np.log(x0))))
    return None


def map_crossings(points: Sequence[MapPoint]) -> list[dict]:
    """Where the public ratios fall on each (regime, α, κ) row of the map: the proposal
    temperature at which the marginal sampled chain keeps PR #169's 0.39 of the argmax chain,
    and at which Tsubame reaches Lucebox #413's 1.21 of it (None: not crossed in range)."""
    rows: dict[tuple, list[MapPoint]] = {}
    for p in points:
        rows.setdefault((p.regime, p.factor, p.kappa), []).append(p)
    out = []
    for (regime, factor, kappa), ps in sorted(rows.items()):
        ps = sorted(ps, key=lambda p: p.t_q)
        xs = [p.t_q for p in ps]
        out.append({"regime": regime, "factor": factor, "kappa": kappa,
                    "entropy": ps[0].entropy,
                    "pr169_t_q": _crossing(xs, [p.marginal_over_argmax for p in ps],
                                           PR169_RATIO),
                    "lucebox_t_q": _crossing(xs, [p.tree_over_argmax for p in ps],
                                             LUCEBOX_RATIO)})
    return out


def _map_region_text(points: Sequence[MapPoint], test) -> str:
    """Where ``test(point)`` holds, grouped per (regime, κ): the α factors and T_q values."""
    groups: dict[tuple, list[str]] = {}
    for p in points:
        if test(p):
            groups.setdefault((p.regime, p.kappa), []).append(f"α×{p.factor:g}/T_q {p.t_q:g}")
    if not groups:
        return "nowhere on the map"
    return "; ".join(f"{r}, κ = {k:g}: {', '.join(v)}" for (r, k), v in groups.items())


def map_tables(rows: Sequence[dict]) -> list[str]:
    """The map's section of ``summary.md``: one line per point, then the public ratios."""
    pts = map_points(rows)
    if not pts:
        return []
    n = "/".join(sorted({str(len(r["taus"])) for r in rows if r.get("map")}))
    out = ["## The regime map at T = 1: where sampled trees beat deterministic ones", "",
           f"Paired differences of exact E[τ] over {n} shared contexts per point (95% "
           "t-intervals), B = 64 (chains: L nodes). α×: the target's logit scale as a multiple "
           "of the calibrated one (its mean next-token entropy H at T = 1 in nats); κ: the "
           "drafter's correction quality (0: the marginal sampled chain and Tsubame filled "
           "from the marginals); T_q: the temperature the drafter's laws are tempered to for "
           "the draws (1: its own law; its ranking, hence DDTree, the argmax chain and "
           "Tsubame's plan, never changes). The figure is `regime_map.png`.", "",
           "| regime | α× | H (nats) | κ | T_q | DDTree τ | sampled chain τ | Tsubame τ | "
           "DDTree − chain [95% CI] | Tsubame − DDTree | Tsubame − chain | marginal chain / "
           "argmax | Tsubame / argmax | region |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|"]
    for p in pts:
        region = ("Tsubame beats both" if p.tsubame_best else "") + (
            "; " if p.tsubame_best and p.ddtree_behind else "") + (
            "DDTree behind the chain" if p.ddtree_behind else "")
        out.append(
            f"| {p.regime} | {p.factor:g} | {p.entropy:.2f} | {p.kappa:g} | {p.t_q:g} | "
            f"{p.ddtree_tau:.2f} | {p.chain_tau:.2f} | {p.tsubame_tau:.2f} | "
            f"{p.chain_gap.mean:+.2f} [{p.chain_gap.low:+.2f}, {p.chain_gap.high:+.2f}] | "
            f"{p.vs_ddtree.mean:+.2f} [{p.vs_ddtree.low:+.2f}, {p.vs_ddtree.high:+.2f}] | "
            f"{p.vs_chain.mean:+.2f} [{p.vs_chain.low:+.2f}, {p.vs_chain.high:+.2f}] | "
            f"{p.marginal_over_argmax:.2f} | {p.tree_over_argmax:.2f} | {region or '—'} |")
    out += ["", f"Public points placed on the map (ratios of mean E[τ] to the argmax chain): "
            f"z-lab/dflash#169, independent marginal sampling / argmax = {PR169_RATIO:.2f}; "
            f"Luce-Org/lucebox#413, sampled tree / chain = {LUCEBOX_RATIO:.2f} (read as "
            "Tsubame-RRSw / argmax chain). The proposal temperature T_q at which each (regime, "
            "α, κ) row crosses them (log-interpolated; — : not crossed in the grid):", "",
            "| regime | α× | H (nats) | κ | T_q at PR #169's 0.39 (marginal chain / argmax) | "
            "T_q at Lucebox's 1.21 (Tsubame / argmax) |", "|---|---:|---:|---:|---:|---:|"]
    def f(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    for c in map_crossings(pts):
        out.append(f"| {c['regime']} | {c['factor']:g} | {c['entropy']:.2f} | {c['kappa']:g} | "
                   f"{f(c['pr169_t_q'])} | {f(c['lucebox_t_q'])} |")
    return [*out, ""]


def _beats(ci: MeanCI, contexts: int) -> Judgement:
    """:func:`judge` of a paired difference against ``> 0``."""
    return judge(ci.mean, ci.low, ci.high, ClaimedRange(0.0, strict=True), units=contexts)


def _both(a: Judgement, b: Judgement) -> Judgement:
    """Two claims at once: holds when both hold, does not hold when either does not, no verdict
    when either has none, else undecided (the larger count of units deciding it)."""
    vs = (a.verdict, b.verdict)
    if "does not hold" in vs:
        return next(j for j in (a, b) if j.verdict == "does not hold")
    if NO_VERDICT in vs:
        return next(j for j in (a, b) if j.verdict == NO_VERDICT)
    if vs == ("holds", "holds"):
        return a
    return max((j for j in (a, b) if j.verdict == "undecided"), key=lambda j: j.needed)


#: The map's claims: (statement, its verdict at a point by :func:`judge`, the number shown,
#: what the number is).
MAP_CLAIMS = (
    ("At T = 1 a deterministic tree (DDTree) falls behind the sampled chain in some settings "
     "(Tsubame's abstract; DFlash PR #169)",
     lambda p: _beats(MeanCI(-p.chain_gap.mean, -p.chain_gap.high, -p.chain_gap.low),
                      p.contexts),
     lambda p: (-p.chain_gap.mean, -p.chain_gap.high, -p.chain_gap.low),
     "sampled chain − DDTree"),
    ("At T = 1 Tsubame-RRSw beats both DDTree and the sampled chain (it keeps the tree's "
     "structure and gains sampling's acceptance)",
     lambda p: _both(_beats(p.vs_ddtree, p.contexts), _beats(p.vs_chain, p.contexts)),
     lambda p: (p.vs_ddtree.mean, p.vs_ddtree.low, p.vs_ddtree.high), "Tsubame − DDTree"),
)


def map_claims(rows: Sequence[dict]) -> list[Claim]:
    """One claim per :data:`MAP_CLAIMS`: the existential claims of the abstract ("in some
    settings"), each point judged by the one rule (:func:`judge`), the points where it holds
    listed in the reason (the number: the point with the largest margin). ``holds`` when it
    holds at more points than one-sided 2.5% tails of 95% intervals would by chance alone
    (``0.025 n`` of ``n``), ``does not hold`` when it does not hold at any point, ``no
    verdict`` at fewer than :data:`~treespec_sim.verdicts.MIN_UNITS` contexts a point,
    else ``undecided``."""
    pts = map_points(rows)
    if not pts:
        return []
    out = []
    chance = 0.025 * len(pts)
    for text, rule, number, what in MAP_CLAIMS:
        judged = [(p, rule(p)) for p in pts]
        where = [p for p, j in judged if j.verdict == "holds"]
        best = max(where or pts, key=lambda p: number(p)[1])
        est, lo, hi = number(best)
        if any(j.verdict == NO_VERDICT for _, j in judged):
            verdict, note = NO_VERDICT, f"; {next(j.reason for _, j in judged if j.reason)}"
        elif len(where) > chance:
            verdict, note = "holds", ""
        elif all(j.verdict == "does not hold" for _, j in judged):
            verdict, note = "does not hold", "; it does not hold at any point"
        else:
            verdict = "undecided"
            note = f"; by chance alone about {chance:.1f} of {len(pts)} points would show it"
        reason = (f"in {len(where)} of {len(pts)} map points{note}: "
                  f"{_map_region_text(pts, lambda p, rule=rule: rule(p).verdict == 'holds')}; "
                  f"shown ({what}): {best.scope}")
        out.append(Claim(text, est, lo, hi, "tokens per round", verdict, reason=reason,
                         page=MAP_PAGE, scope=f"regime map, {best.scope}", family=name,
                         units=best.contexts))
    return out


#: The regime map's section of the Tsubame page.
MAP_PAGE = "[tsubame.md §5](docs/theory/tsubame.md#5-the-regime-map-at-t--1)"

#: Region colours of the map figure.
_REGION_STYLE = {"both": ("tab:purple", "Tsubame beats both, and DDTree is behind the chain"),
                 "tsubame": ("tab:red", "Tsubame beats both DDTree and the sampled chain"),
                 "chain": ("tab:blue", "DDTree behind the sampled chain"),
                 "none": ("0.75", "neither")}


def plot_regime_map(rows: Sequence[dict], path: Path) -> None:
    """The regime map: one panel per (regime, κ); x the proposal temperature, y the target's
    entropy at T = 1; each point coloured by its region, labelled Tsubame / DDTree; the
    proposal temperatures where PR #169's and Lucebox #413's ratios are crossed, and the
    calibrated regime (α×1, T_q = 1), marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = map_points(rows)
    panels = list(dict.fromkeys((p.regime, p.kappa) for p in pts)) or [("—", 0.0)]
    regimes = list(dict.fromkeys(r for r, _ in panels))
    kappas = sorted({k for _, k in panels})
    fig, axes = plt.subplots(len(regimes), len(kappas), figsize=(4.4 * len(kappas),
                             3.7 * len(regimes) + 1.2), squeeze=False, layout="constrained")
    cross = map_crossings(pts)
    for i, regime in enumerate(regimes):
        for j, kappa in enumerate(kappas):
            ax = axes[i][j]
            ps = [p for p in pts if (p.regime, p.kappa) == (regime, kappa)]
            for p in ps:
                kind = ("both" if p.tsubame_best and p.ddtree_behind else
                        "tsubame" if p.tsubame_best else "chain" if p.ddtree_behind else
                        "none")
                ax.scatter(p.t_q, p.entropy, s=150, color=_REGION_STYLE[kind][0],
                           edgecolor="k", lw=0.5, zorder=3)
                ax.annotate(f"{p.tsubame_tau / p.ddtree_tau:.2f}", (p.t_q, p.entropy),
                            textcoords="offset points", xytext=(0, 9), ha="center",
                            fontsize=7)
                if p.factor == 1.0 and p.t_q == 1.0:
                    ax.scatter(p.t_q, p.entropy, s=420, facecolor="none", edgecolor="k",
                               lw=1.5, marker="*", zorder=4)
            for c in (c for c in cross if (c["regime"], c["kappa"]) == (regime, kappa)):
                if c["pr169_t_q"] is not None and kappa == 0:  # a marginal-sampling ratio
                    ax.scatter(c["pr169_t_q"], c["entropy"], marker="x", color="tab:green",
                               s=60, zorder=5)
                if c["lucebox_t_q"] is not None:
                    ax.scatter(c["lucebox_t_q"], c["entropy"], marker="+", color="tab:orange",
                               s=90, zorder=5)
            ax.set_xscale("log")
            tq = sorted({p.t_q for p in ps}) or [1.0]
            ax.set_xticks(tq, [f"{x:g}" for x in tq])
            ax.minorticks_off()
            ax.set_title(f"{regime} · κ = {kappa:g}" + (" (marginal drafter)" if kappa == 0
                                                         else " (corrected)"), fontsize=9)
            ax.set_xlabel("proposal temperature T_q (drafter's sampling law)")
            ax.set_ylabel("target entropy at T = 1 (nats)")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], ls="", marker="o", ms=9, color=c, mec="k", label=lab)
               for c, lab in _REGION_STYLE.values()]
    handles += [plt.Line2D([], [], ls="", marker="*", ms=13, mfc="none", mec="k",
                           label="calibrated regime (α×1, T_q = 1)"),
                plt.Line2D([], [], ls="", marker="x", color="tab:green",
                           label=f"PR #169: marginal chain / argmax = {PR169_RATIO:.2f}"),
                plt.Line2D([], [], ls="", marker="+", ms=10, color="tab:orange",
                           label=f"Lucebox #413: sampled tree / chain = {LUCEBOX_RATIO:.2f}")]
    figure_legend(fig, handles, [h.get_label() for h in handles], max_cols=3,
                  title="T = 1, B = 64; numbers: Tsubame-RRSw τ / DDTree τ; regions by "
                        "paired 95% intervals")
    fig.savefig(path, dpi=120)
    plt.close(fig)
