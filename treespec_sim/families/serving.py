r"""The ``serving`` family: how big should the trees be at batch size ``b``?

A serving engine verifies a batch of ``b`` requests in one target pass. Each request brings
its own tree; the pass's time depends on the batch's total query tokens
:math:`n = \sum_i (B_i + 1)` (:class:`~treespec_sim.cost.BatchRooflineCost`: weights read once,
each request's cache, compute by ``n``), so the best tree shrinks as the batch grows.

For each regime, fresh contexts (the calibration's convention: one round per context) give
each request's exact curves, as in the ``caddtree`` family: DDTree at ``max_budget`` (nested),
:math:`\tau_i(B) = 1 + \sum_{j \le B} P(v_{i,j})` under rule ``follow`` and its surrogate
:math:`N_i(B) = 1 + \sum_{j \le B} q(v_{i,j})`; and the DFlash chain's prefix curves (a chain's
nodes are in depth order, so its first ``k`` nodes are the chain of length ``k``). The
requests of a regime are shuffled and cut into batches of ``b`` (a *mixed* batch alternates the
regimes' requests); every rule picks each request's budget from what it may see (the drafter's
curves and the costs, never the target), and a batch's round takes
:math:`D = C_d(b) + C_v(\sum_i (B_i + 1))` seconds (:func:`treespec_sim.cost.batch_costs`).
The rules:

``ddtree@B``
    every request DDTree at the same fixed ``B`` (the grid :data:`BUDGET_GRID`).
``ddtree-oracle``
    the fixed ``B`` with the best throughput on these very batches (chosen after the fact:
    what CAST's cost tables and vLLM's per-batch-size schedule aim at).
``chain``
    every request the DFlash chain (one path of ``L`` nodes).
``caddtree-each``
    each request's own CaDDTree stop on :math:`N_i(B) / (C_d + C_v(b (B + 1)))`: the batch's
    cost as one request sees it if every request took its ``B``.
``batch-caddtree``
    one budget shared across the batch (:func:`treespec_sim.policies.batch_caddtree`):
    best-first over the union of the requests' DDTree pops, stopped by CaDDTree's rule on the
    batch's :math:`\sum_i N_i / D`.
``batch-chains``
    the same shared stop over the requests' chain positions (TETRIS's greedy allocation of
    draft tokens across a batch by acceptance, on DFlash chains).

Throughput is the renewal-reward ratio :math:`\sum \tau / \sum D` over the batches
(aggregate tokens per second); a request's tokens per second is that divided by ``b``; in a
mixed batch each regime's requests have their own (a shared budget moves nodes from the
harder requests to the easier ones: what it does to the slower ones). Intervals resample
batches (disjoint sets of independent fresh contexts: :func:`treespec_sim.stats.paired_bootstrap`),
paired across rules; the best fixed ``B``'s interval is the range of the best ``B`` over the
bootstrap replicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..cost import DEFAULT_CONTEXT_LENGTH, LatencyModel, batch_costs
from ..engine import Round, run_rounds
from ..policies import best_fixed_budget, first_non_increase, merge_pops
from ..seeds import cell_rng
from ..stats import mean_ci, paired_bootstrap, percentile_ci, ratio_ci
from ..validation import check_positive_int, check_temperature
from .base import (
    Cell,
    Row,
    RunSettings,
    as_tuple,
    check_cost_models,
    check_regimes,
    check_temperatures,
    check_worlds,
    paper_regimes,
    pick_regimes,
    shares,
    world_for,
)

__all__ = ["BUDGET_GRID", "RULES", "BatchOutcome", "RequestCurves", "ServingGrid", "ServingRow",
           "allocate", "collect", "evaluate", "grid", "name", "preset", "preset_note", "row",
           "run"]

#: The family's name (its ``[serving]`` table in a config, the rows' ``family``).
name = "serving"
#: What ``--preset serving`` runs.
preset_note = ("budgets at batch sizes 1-64 under the batched H200 estimate, shared and fixed "
               "(under a minute with --workers 2 on an idle machine)")

#: Fixed budgets compared (and the grid the oracle chooses from).
BUDGET_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: The rules besides the fixed budgets, in report order.
RULES = ("ddtree-oracle", "batch-caddtree", "caddtree-each", "batch-chains", "chain")
#: The label of a mixed batch's composition.
MIXED = "mixed"


@dataclass(frozen=True)
class ServingGrid:
    """Budget rules at several batch sizes; one cell per temperature covers every regime,
    batch size and cost model (their batches are cut from the same requests)."""

    family: ClassVar[str] = "serving"
    #: What one of ``rounds`` is (the unit behind the intervals is a batch of them).
    unit: ClassVar[str] = "requests per regime"
    regimes: tuple[str, ...]
    temperatures: tuple[float, ...] = (0.0, 1.0)
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64)
    cost_models: tuple[str, ...] = ("h200-qwen3-8b-batch",)
    #: Fresh contexts (requests) per regime, over its worlds: 1920 give 30 batches of 64.
    rounds: int = 1920
    worlds: int = 3
    #: The largest tree of one request (every budget of :data:`BUDGET_GRID` up to it is
    #: compared); at batch 1 the best fixed budget under the H200 estimate is 128.
    max_budget: int = 256
    context_length: float = DEFAULT_CONTEXT_LENGTH
    #: Also batches that alternate the regimes' requests (at least two regimes).
    mixed: bool = True

    def __post_init__(self) -> None:
        for key, cast in (("regimes", str), ("temperatures", check_temperature),
                          ("cost_models", str), ("batch_sizes", check_positive_int)):
            object.__setattr__(self, key, as_tuple(getattr(self, key), cast,
                                                   f"{self.family}.{key}"))
        check_regimes(self.regimes, self.family)
        check_temperatures(self.temperatures, self.family)
        check_cost_models(self.cost_models, self.family)
        check_worlds(self.worlds, self.rounds, self.family)
        check_positive_int(self.max_budget, f"{self.family}.max_budget")
        if max(self.batch_sizes) > self.rounds:
            raise ValueError(f"{self.family}.rounds ({self.rounds}) must be at least the "
                             f"largest batch size ({max(self.batch_sizes)})")
        if self.mixed and len(self.regimes) < 2:
            raise ValueError(f"{self.family}.mixed needs at least two regimes; got "
                             f"{list(self.regimes)}")

    @property
    def compositions(self) -> tuple[str, ...]:
        """Each regime's homogeneous batches, then the mixed ones."""
        return self.regimes + ((MIXED,) if self.mixed else ())

    def cells(self) -> list[Cell]:
        return [Cell(self, "+".join(self.regimes), t, self.max_budget)
                for t in self.temperatures]


#: The family's grid class (the registry's ``grid``).
grid = ServingGrid


@dataclass(frozen=True, kw_only=True)
class ServingRow(Row):
    """One rule at one (composition, batch size, cost model) of a serving cell.

    ``regime`` is the batches' composition (a regime, or ``"mixed"``); ``tau_mean`` a
    request's mean τ per round with its t-interval over batches; ``tree_size_mean`` a
    request's mean budget; ``round_time_s`` a batch round's mean seconds;
    ``throughput_tok_s`` the batch's tokens per second with its paired bootstrap interval
    (``throughput_ci``), and ``rel_*`` its ratio to the oracle fixed budget. Not columns:
    ``request_tok_s`` (a request's tokens per second, interval), ``regime_tok_s`` (in a mixed
    batch, each regime's requests'), ``best_budget_range`` (the oracle's budget over the
    bootstrap replicates, 2.5-97.5%)."""

    family: str = "serving"
    regime: str
    method: str
    verifier: str = "follow"
    temperature: float
    budget: int
    batch_size: int
    cost_model: str
    rounds: int
    seed: int | None = None
    tau_mean: float
    tau_ci_low: float
    tau_ci_high: float
    worlds: int | None = None
    tree_size_mean: float
    round_time_s: float
    throughput_tok_s: float
    speedup_vs_ar: float
    rel_to_baseline: float
    rel_ci_low: float
    rel_ci_high: float
    baseline: str = "ddtree-oracle"
    wall_s: float | None = None
    batches: int
    throughput_ci: list[float]
    request_tok_s: list[float]
    regime_tok_s: dict[str, list[float]] | None = None
    best_budget_range: list[int] | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = ServingRow


@dataclass(frozen=True)
class RequestCurves:
    """Every request's exact curves in one regime (cost-independent).

    ``tau[i, B]`` (``B = 0..max_budget``): DDTree's exact τ, padded with the last value where
    a tree has fewer nodes; ``pops[i, j]`` (``j < max_budget``): the surrogate probability of
    its ``j + 1``-th pop (``Round.path_probabilities``), padded with 0; ``chain_tau[i, k]``
    (``k = 0..L``) and ``chain_pops[i, k]`` (``k < L``): the same for the chain's prefixes."""

    regime: str
    tau: np.ndarray
    pops: np.ndarray
    chain_tau: np.ndarray
    chain_pops: np.ndarray

    def __len__(self) -> int:
        return self.tau.shape[0]


#: The fields of :class:`RequestCurves` holding arrays, and what pads a shorter row: a τ curve
#: keeps its last value, a pop list has no more pops.
_FIELDS = {"tau": None, "pops": 0.0, "chain_tau": None, "chain_pops": 0.0}


def _padded(rows: Sequence[np.ndarray], width: int, fill: float | None) -> np.ndarray:
    out = np.empty((len(rows), width))
    for r, c in enumerate(rows):
        n = min(c.size, width)
        out[r, :n] = c[:n]
        out[r, n:] = c[n - 1] if fill is None else fill
    return out


def collect(world, *, regime: str, contexts: int, temperature: float, max_budget: int,
            rng: np.random.Generator) -> RequestCurves:
    """``contexts`` fresh contexts of ``world``, each with DDTree's (nested, at ``max_budget``)
    and the chain's exact curves (rule ``follow``, nothing sampled)."""

    def curves(rnd: Round) -> tuple[np.ndarray, np.ndarray]:
        return rnd.path_probabilities, rnd.tau_curve

    ctxs = [world.sample_context(rng) for _ in range(check_positive_int(contexts, "contexts"))]
    common = dict(rng=rng, contexts=ctxs, rule="follow", temperature=temperature,
                  sample=False, record=curves)
    tree = [s for (s,) in run_rounds(world, method="ddtree", budget=max_budget, nested=True,
                                     **common)]
    chain = [s for (s,) in run_rounds(world, method="chain", **common)]
    width = max(c.size for _, c in chain)
    return RequestCurves(regime, _padded([t for _, t in tree], max_budget + 1, None),
                         _padded([p for p, _ in tree], max_budget, 0.0),
                         _padded([t for _, t in chain], width, None),
                         _padded([p for p, _ in chain], width - 1, 0.0))


def pool(parts: Sequence[RequestCurves]) -> RequestCurves:
    """The requests of several worlds as one set."""
    return RequestCurves(parts[0].regime, *(np.concatenate([getattr(p, k) for p in parts])
                                            for k in _FIELDS))


# ---------------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class BatchOutcome:
    """One rule on every batch: each request's budget and tokens, each batch's seconds.

    ``budgets`` and ``tokens``: (n_batches, b); ``seconds``: (n_batches,)."""

    budgets: np.ndarray
    tokens: np.ndarray
    seconds: np.ndarray


def allocate(rule: str, pops: np.ndarray, draft_cost: float, verify_cost, *,
             budget: int | None = None) -> np.ndarray:
    """Each request's budget in one batch under ``rule``, int64 (b,).

    ``pops``: the batch's surrogate probabilities in pop order, (b, K) (DDTree's or the
    chain's: :attr:`RequestCurves.pops`)."""
    b, k = pops.shape
    if rule == "fixed":
        return np.full(b, min(budget, k), dtype=np.int64)
    if rule == "caddtree-each":
        # N_i(B) = 1 + sum of the first B pops (Round.surrogate_curve), over the batch's cost
        surrogate = 1.0 + np.concatenate([np.zeros((b, 1)), np.cumsum(pops, axis=1)], axis=1)
        per = draft_cost + np.asarray(verify_cost(b * (np.arange(k + 1) + 1)),
                                      dtype=np.float64)
        return np.array([first_non_increase(s / per) for s in surrogate], dtype=np.int64)
    if rule in ("batch-caddtree", "batch-chains"):
        curve = merge_pops(list(pops), draft_cost=draft_cost, verify_cost=verify_cost)
        return curve.budgets(first_non_increase(curve.theta))
    raise ValueError(f"unknown rule {rule!r}")


def outcome(rule: str, curves: RequestCurves, batches: np.ndarray, draft_cost: float,
            verify_cost, *, budget: int | None = None) -> BatchOutcome:
    """``rule`` on every batch (``batches``: (n_batches, b) request indices)."""
    chains = rule in ("chain", "batch-chains")
    tau = curves.chain_tau if chains else curves.tau
    pops = curves.chain_pops if chains else curves.pops
    if rule == "chain":
        rule, budget = "fixed", tau.shape[1] - 1
    budgets = np.stack([allocate(rule, pops[idx], draft_cost, verify_cost, budget=budget)
                        for idx in batches])
    tokens = np.take_along_axis(tau[batches], budgets[..., None], axis=2)[..., 0]
    b = batches.shape[1]
    seconds = draft_cost + np.asarray(verify_cost(budgets.sum(axis=1) + b), dtype=np.float64)
    return BatchOutcome(budgets, tokens, seconds)


def batches_of(n_by_regime: Sequence[int], b: int, rng: np.random.Generator, *,
               mixed: bool) -> np.ndarray:
    """Request indices (into the regimes' concatenated requests) cut into batches of ``b``:
    each regime's requests shuffled; a mixed batch alternates the regimes (request ``j`` of
    every batch from regime ``j mod k``)."""
    offsets = np.concatenate([[0], np.cumsum(n_by_regime)])
    shuffled = [offsets[g] + rng.permutation(n) for g, n in enumerate(n_by_regime)]
    if not mixed:
        (order,) = shuffled
    else:
        k, m = len(shuffled), min(n_by_regime)
        order = np.stack([s[:m] for s in shuffled], axis=1).reshape(-1)  # r0, r1, r0, r1, ...
        order = order[: (order.size // k) * k]
    n_batches = order.size // b
    return order[: n_batches * b].reshape(n_batches, b)


def evaluate(curves: RequestCurves, batches: np.ndarray, cost: LatencyModel, *,
             context_length: float, labels: np.ndarray | None = None, seed: int = 0,
             grid: Sequence[int] = BUDGET_GRID) -> list[dict]:
    """Every rule's throughput on the same batches, with paired bootstrap intervals over
    batches; ``labels`` (one regime name per request) gives each regime's requests' tokens per
    second in mixed batches. Returns plain records (the runner makes rows of them)."""
    b = batches.shape[1]
    draft_cost, verify_cost = batch_costs(cost, [context_length] * b)
    grid = tuple(B for B in grid if B <= curves.tau.shape[1] - 1)
    names = [f"ddtree@{B}" for B in grid] + [r for r in RULES if r != "ddtree-oracle"]
    outs = [outcome("fixed", curves, batches, draft_cost, verify_cost, budget=B) for B in grid]
    outs += [outcome(r, curves, batches, draft_cost, verify_cost) for r in names[len(grid):]]
    tokens = np.column_stack([o.tokens.sum(axis=1) for o in outs])      # (n_batches, rules)
    seconds = np.column_stack([o.seconds for o in outs])
    # the policies' hindsight choice: the fixed budget whose stream of batches is fastest
    best = grid.index(best_fixed_budget([curves.tau[idx] for idx in batches],
                                        draft_cost=draft_cost, verify_cost=verify_cost,
                                        budgets=grid).budget)
    names.insert(len(grid), "ddtree-oracle")
    outs.insert(len(grid), outs[best])
    tokens = np.insert(tokens, len(grid), tokens[:, best], axis=1)
    seconds = np.insert(seconds, len(grid), seconds[:, best], axis=1)
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    boot = paired_bootstrap(tokens, seconds, rng=cell_rng(seed, "serving", b))
    best_boot = np.asarray(grid)[np.argmax(boot[:, : len(grid)], axis=1)]
    i_oracle = len(grid)
    ar = b / float(verify_cost(b))  # autoregressive: one token per request per pass
    per_regime = {}
    if labels is not None:
        for g in dict.fromkeys(labels[batches].reshape(-1)):
            mask = labels[batches] == g                                  # (n_batches, b)
            num = np.column_stack([(o.tokens * mask).sum(axis=1) for o in outs])
            den = seconds * mask.sum(axis=1, keepdims=True)
            rb = paired_bootstrap(num, den, rng=cell_rng(seed, "serving", b))
            per_regime[g] = (num.sum(axis=0) / den.sum(axis=0), rb)
    out = []
    for j, rule in enumerate(names):
        o = outs[j]
        lo, hi = percentile_ci(boot[:, j])
        ci = mean_ci(o.tokens.mean(axis=1))
        rec = {"method": "ddtree" if rule.startswith("ddtree@") else rule,
               "budget": int(rule.split("@")[1]) if rule.startswith("ddtree@")
               else grid[best] if rule == "ddtree-oracle"
               else (curves.chain_tau if "chain" in rule else curves.tau).shape[1] - 1,
               "batch_size": b, "batches": int(batches.shape[0]),
               "tau_mean": float(o.tokens.mean()), "tau_ci_low": ci.low, "tau_ci_high": ci.high,
               "tree_size_mean": float(o.budgets.mean()),
               "round_time_s": float(o.seconds.mean()), "throughput_tok_s": float(point[j]),
               "throughput_ci": [float(lo), float(hi)],
               "request_tok_s": [float(point[j] / b), float(lo / b), float(hi / b)],
               "speedup_vs_ar": float(point[j] / ar)}
        rel = ratio_ci(boot, j, i_oracle, point)
        rec.update(rel_to_baseline=rel[0], rel_ci_low=rel[1], rel_ci_high=rel[2])
        if rule == "ddtree-oracle":
            rec["best_budget_range"] = [int(np.percentile(best_boot, 2.5)),
                                        int(np.percentile(best_boot, 97.5))]
        if per_regime:
            rec["regime_tok_s"] = {g: [float(p[j]), *map(float, percentile_ci(rb[:, j]))]
                                   for g, (p, rb) in per_regime.items()}
        out.append(rec)
    return out


def run(cell: Cell, settings: RunSettings) -> list[ServingRow]:
    """Each regime's requests from its worlds (fresh contexts from ``cell_rng(world seed,
    "serving")``), batched per composition and batch size (``cell_rng(seed, "batches",
    composition, b)``), every rule under every cost model."""
    g: ServingGrid = cell.grid
    by_regime = {}
    for regime in g.regimes:
        by_regime[regime] = pool([
            collect(world_for(regime, s.seed), regime=regime, contexts=s.rounds,
                    temperature=cell.temperature, max_budget=g.max_budget,
                    rng=cell_rng(s.seed, "serving"))
            for s in shares(cell, settings)])
    every = RequestCurves("+".join(g.regimes), *(
        _padded_cat([getattr(by_regime[r], k) for r in g.regimes], fill)
        for k, fill in _FIELDS.items()))
    labels = np.concatenate([np.full(len(by_regime[r]), r) for r in g.regimes])
    sizes = [len(by_regime[r]) for r in g.regimes]
    rows = []
    for comp in g.compositions:
        for b in g.batch_sizes:
            rng = cell_rng(settings.seed, "batches", comp, b)
            if comp == MIXED:
                batches = batches_of(sizes, b, rng, mixed=True)
            else:
                k = g.regimes.index(comp)
                batches = sum(sizes[:k]) + batches_of([sizes[k]], b, rng, mixed=False)
            for cm in g.cost_models:
                for rec in evaluate(every, batches, settings.cost(cm),
                                    context_length=g.context_length,
                                    labels=labels if comp == MIXED else None,
                                    seed=settings.seed):
                    rows.append(ServingRow(regime=comp, temperature=cell.temperature,
                                           cost_model=cm, rounds=int(batches.size), **rec))
    return rows


def _padded_cat(parts: Sequence[np.ndarray], fill: float | None) -> np.ndarray:
    # chains of different regimes may differ in length: pad as :data:`_FIELDS` says
    width = max(p.shape[1] for p in parts)
    return np.concatenate([_padded(list(p), width, fill) for p in parts])


def preset(which: str) -> ServingGrid | None:
    """The family's grid in sweep preset ``which``: its own (``--preset serving``); the
    ``paper`` and ``quick`` presets leave it out, as they leave out ``stochastic-map``."""
    if which == name:
        return ServingGrid(pick_regimes(paper_regimes(), ("math500", "mt-bench"))[:2])
    return None
