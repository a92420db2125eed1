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

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..engine import run_rounds
from ..methods import get_method, uses_budget
from ..seeds import cell_rng
from ..stats import MeanCI, mean_ci, throughput, world_ci, world_columns
from ..synth import DRAFTER_VARIANTS, drafter_variant
from ..validation import check_budget, check_temperature
from .base import (
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
    "STYLES",
    "CellRuns",
    "PairClaim",
    "PairedDifference",
    "StochasticGrid",
    "claims",
    "console_rows",
    "drafter_spec",
    "figures",
    "grid",
    "name",
    "paired_differences",
    "plot_tau_vs_temperature",
    "preset",
    "preset_note",
    "run",
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
             if "taus" in r and _at_budget(r, budget)}
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
    """The family's section of ``summary.md``: the paired claims table with its verdicts."""
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
    return out


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
    b = default_budget(rows)
    return [r for r in rows if r["method"] in CONSOLE_METHODS and _at_budget(r, b)]
