r"""The ``stochastic-map`` family: the regime map at ``T = 1``, where sampled trees beat
deterministic ones (``docs/theory/tsubame.md`` §5).

The drafter's sampling law (a proposal temperature ``T_q`` applied to its laws for the draws,
its ranking unchanged) and its correction's coherence (``correction_quality``) against the
target's entropy at ``T = 1`` (its ``logit_scale``, a multiple of the calibrated one). One cell
per (regime, logit-scale factor); every method, proposal temperature and correction quality of
a cell on the same contexts (paired differences). Every round is one
:func:`treespec_sim.engine.run_round` of a registered method (the sampled ones with
``options={"proposal_temperature": T_q}``; ``python -m treespec_sim.sweep --preset
stochastic-map``). Its rows (:class:`StochasticMapRow`) are presented by
:mod:`.stochastic_map_report`: the map's points and table, its figure and its claims (the
existential claims of Tsubame's abstract, each point judged by the one rule).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from ..engine import run_round
from ..seeds import cell_rng
from ..stats import mean_ci, throughput, world_columns
from ..synth import get_regime, make_world
from ..tree import DraftTree
from ..validation import check_budget, check_temperature
from .base import (
    Cell,
    Row,
    RunSettings,
    as_tuple,
    check_regimes,
    check_rounds,
    check_temperatures,
    check_worlds,
    paper_regimes,
    pick_regimes,
    shares,
)

__all__ = ["MAP_METHODS", "StochasticMapGrid", "StochasticMapRow", "grid", "name", "preset",
           "preset_note", "row", "run"]

#: The family's name (its ``[stochastic-map]`` table in a config, the rows' ``family``).
name = "stochastic-map"
#: What ``--preset stochastic-map`` runs.
preset_note = ("the regime map at T = 1: drafter sampling law (proposal temperature, "
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


@dataclass(frozen=True)
class StochasticMapGrid:
    """The regime map: one cell per (regime, target logit-scale factor) at ``temperature``.

    Every cell's contexts are shared by every method, proposal temperature and correction
    quality (paired differences); DDTree and the argmax chain do not depend on the drafter's
    sampling law, the marginal sampled methods not on the correction.
    """

    family: ClassVar[str] = "stochastic-map"
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
                raise ValueError(f"{self.family}.correction_qualities must be in (0, 1]; "
                                 f"got {k!r}")
        object.__setattr__(self, "budget", check_budget(self.budget, f"{self.family}.budget"))
        check_rounds(self.rounds, self.family)
        check_worlds(self.worlds, self.rounds, self.family)

    def cells(self) -> list[Cell]:
        return [Cell(self, r, self.temperature, self.budget, f"alpha_x{a!r}")
                for r in self.regimes for a in self.logit_scales]


#: The family's grid class (the registry's ``grid``).
grid = StochasticMapGrid


@dataclass(frozen=True, kw_only=True)
class StochasticMapRow(Row):
    """One (method, proposal temperature, correction quality) of a map cell, on the cell's
    shared contexts: exact E[τ] (pooled, between worlds, and ``taus`` per context, world after
    world), modelled throughput (``throughput_charged_tok_s``: with each corrected level's
    drafter pass charged), the point's coordinates (``logit_scale_factor``, its
    ``logit_scale``, ``proposal_temperature`` ``T_q`` and ``correction_quality`` ``kappa``;
    None for the deterministic methods, 0 for the marginal ones), the target's mean entropy at
    the root (``target_entropy``; ``target_entropy_low_frac``: the share of contexts below
    0.05 nats) and ``correction_levels_mean``, the corrected levels per round."""

    family: str = "stochastic-map"
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
    logit_scale_factor: float
    logit_scale: float
    proposal_temperature: float | None = None
    correction_quality: float | None = None
    target_entropy: float | None = None
    target_entropy_low_frac: float | None = None
    throughput_charged_tok_s: float | None = None
    correction_levels_mean: float | None = None
    cell: str | None = None
    extrapolated: list[dict] | None = None


#: The family's row schema (the registry's ``row``).
row = StochasticMapRow


def preset(which: str) -> StochasticMapGrid | None:
    """The family's grid in sweep preset ``which``: its own (``"stochastic-map"``: math500 and
    mt-bench, calibrated at T = 0 and T = 1); the ``paper`` and ``quick`` presets leave it
    out."""
    if which == name:
        return StochasticMapGrid(pick_regimes(paper_regimes(), ("math500", "mt-bench")))
    return None


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


def run(cell: Cell, settings: RunSettings) -> list[StochasticMapRow]:
    """One map cell: every method at every proposal temperature and correction quality on
    the same contexts of every world; one row each."""
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
                rows.append(StochasticMapRow(**{
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
                    "taus": taus.tolist(), "logit_scale_factor": factor,
                    "logit_scale": alpha, "proposal_temperature": t_q,
                    "correction_quality": kappa if kind != "none" else None,
                    "target_entropy": float(ent.mean()),
                    "target_entropy_low_frac": float(np.mean(ent < 0.05)),
                    "throughput_charged_tok_s": throughput(taus, charged),
                    "correction_levels_mean": float(np.mean([p[3] for p in per])),
                }))
    return rows


