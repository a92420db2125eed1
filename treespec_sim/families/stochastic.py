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
(``docs/theory/tsubame.md`` §4): stated here (a cell's second stage decides them), read off
its rows (:class:`StochasticRow`) by :mod:`.stochastic_report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import run_rounds
from ..methods import get_method, uses_budget
from ..seeds import cell_rng
from ..stats import mean_ci, throughput, world_columns
from ..synth import DRAFTER_VARIANTS, drafter_variant
from ..validation import Interval, check_budget, check_param, check_temperature
from .base import (
    TSUBAME_PAGE,
    UNIVER_PAGE,
    Cell,
    ClaimedRange,
    Judgement,
    Row,
    RunSettings,
    as_tuple,
    check_budgets,
    check_max_rounds,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_worlds,
    judge,
    paper_regimes,
    pick_regimes,
    second_stage,
    shares,
    world_for,
)

__all__ = ["CLAIMS", "DEFAULT_METHODS", "DRAFTERS", "CellRuns", "PairClaim", "StochasticGrid",
           "StochasticRow", "claimed_range", "drafter_spec", "grid", "name", "preset",
           "preset_note", "row", "run"]

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
        check_param(self.vocab, "stochastic.vocab", Interval("int", 0, numpy=False))  # 0: no cap

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


@dataclass(frozen=True, kw_only=True)
class StochasticRow(Row):
    """One (method, budget) of a stochastic cell: exact E[τ] pooled over the contexts of its
    worlds and between worlds, the mean tree size, modelled throughput over every round, and
    ``taus``, the per-context values (world after world; every method of a cell on the same
    contexts, so differences pair). A chain's ``budget`` is its ``L`` nodes."""

    family: str = "stochastic"
    regime: str
    method: str
    verifier: str
    drafter: str
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
    round_time_s: float | None = None
    throughput_tok_s: float | None = None
    speedup_vs_ar: float | None = None
    wall_s: float | None = None
    taus: list[float] | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = StochasticRow


def run(cell: Cell, settings: RunSettings) -> list[StochasticRow]:
    """Every method and budget of the cell on the same contexts of every world
    (:class:`CellRuns`); with the grid's ``max_rounds``, the ``rounds`` are a pilot and one
    second stage adds the contexts that deciding the cell's undecided claims takes, up to
    ``max_rounds`` (:func:`~treespec_sim.verdicts.second_stage`)."""
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
            out.append(judge(d.mean, d.low, d.high, claimed_range(claim.sign), units=self.contexts))
        return out

    def rows(self, cost_name: str) -> list[StochasticRow]:
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
            rows.append(StochasticRow(**{
                "regime": self.regime, "drafter": self.drafter, "method": m,
                "verifier": per[0][3], "temperature": self.temperature,
                "budget": b or depth, "cost_model": cost_name, "rounds": int(taus.size),
                "seed": self.seeds[0], "tau_mean": ci.mean, "tau_ci_low": ci.low,
                "tau_ci_high": ci.high,
                **world_columns([float(np.mean([p[0] for p in part])) for part in per_world]),
                "tree_size_mean": float(sizes.mean()), "round_time_s": float(seconds.mean()),
                "throughput_tok_s": thr, "speedup_vs_ar": thr * ar_seconds,
                "taus": taus.tolist(),
            }))
        return rows


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


def claimed_range(sign: int | None) -> ClaimedRange | None:
    """A :class:`PairClaim` sign as the claimed range of ``a - b``: ``= 0``, ``> 0``, ``< 0``."""
    if sign is None:
        return None
    if sign == 0:
        return ClaimedRange(0.0, 0.0)
    return ClaimedRange(0.0, strict=True) if sign > 0 else ClaimedRange(high=0.0, strict=True)


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


