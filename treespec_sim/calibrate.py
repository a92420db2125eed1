r"""Calibrated regimes: synthetic worlds fitted to published acceptance lengths.

``python -m treespec_sim.calibrate`` fits eight named regimes, one per benchmark of the DDTree and
CaDDTree papers (``math500, gsm8k, aime25, humaneval, mbpp, livecodebench, mt-bench, alpaca``), so
that six measured quantities (:data:`CELLS`) match the published Qwen3-8B values at once:

* the argmax chain's :math:`\tau` (DFlash's own draft, ``L = 15``) at ``T = 0`` and ``T = 1``,
* DDTree's :math:`\tau` at ``B = 64`` and at ``B = 512`` (:data:`BEST_BUDGET`, where DDTree
  Table 1's best-budget entry is compared), at ``T = 0`` and ``T = 1``: the exact
  :math:`E[\tau]` of the fixed tree under predraw-and-follow (rule ``"follow"``), both read off
  one nested round at ``B = 512``.

All are means over contexts drawn as :func:`treespec_sim.engine.run_rounds` draws them with
``rounds_per_sequence=1`` (:meth:`~treespec_sim.synth.World.sample_context`), with the bonus
token counted, through :func:`treespec_sim.engine.run_round` (:func:`cell_values`).

Targets
-------
:data:`TABLE1` holds DDTree Table 1 (chain and best-budget DDTree, T = 0 and T = 1, all eight
datasets) and :data:`PUBLISHED` TEV's DDTree@64 (T = 0 and T = 1, four datasets) with the
speedups; :func:`table1_targets` gives each regime's six targets, published where published. The
four DDTree@64 cells TEV does not publish are derived (:func:`derive_targets`) and weigh
:data:`DERIVED_WEIGHT` in the fit (``docs/results/calibration.md``, "Targets").

Model and fitted knobs
----------------------
Each regime is a :class:`~treespec_sim.synth.RegimeSpec` (``V = 32768``, ``L = 15``, 8192 word
classes of 4 surface variants) on one of two *regime groups* of fixed knobs
(:data:`REGIME_GROUPS`: a low-entropy target for math and code, a higher-entropy one for
chat), plus four fitted knobs (:data:`FITTED_KNOBS`):

``variant_noise`` (both groups)
    the drafter's error on the within-class variant weights: near misses whose right token is a
    sibling, which a tree recovers. It sets the chain and DDTree's gain over it.
``hard_miss`` (both groups)
    the share of the drafter's successor slots that name a wrong class: misses no tree recovers.
    With ``variant_noise`` it splits the chain's misses into near and hard ones, and so sets
    how much a large tree gains over a small one (DDTree@512 against DDTree@64;
    :mod:`treespec_sim.synth.world`, "Hard misses").
``depth_sharpening`` (math-code)
    the per-depth output calibration ``beta_d = 1 + depth_sharpening (d - 1) / (L - 1)``. It
    never moves an argmax; it decides how deep DDTree's best-first budget reaches.
``calibration`` (chat)
    the temperature of the drafter's logits: a flatter drafter spreads its budget over
    siblings that rarely pay.
``logit_scale`` (both groups)
    the target's logit scale ``alpha``: how peaked the target is at ``T = 1`` (it moves no
    argmax, so it changes the ``T = 0`` cells only through the contexts).

The fit (:func:`fit_regime_table1`) is a weighted least squares in the six relative errors on
the mean over a fixed set of worlds and contexts (the same for every trial: common random
numbers), by Levenberg-Marquardt steps on a finite-difference Jacobian updated by Broyden's rule:
a first stage on :data:`FIT_WORLD_SEEDS` (:data:`FIT_CONTEXTS_PER_WORLD` contexts each; only the
Jacobian when the regime starts from a stored fit), then at most :data:`REFINE_STEPS` steps on
:data:`REFINE_WORLD_SEEDS` (:data:`REFINE_CONTEXTS_PER_WORLD` contexts each, drawn at each
trial's own ``logit_scale``). A regime is a distribution over worlds: the fit targets the mean
over 64 worlds, and the held-out evaluation reports the spread of the world means beside the
pooled interval.

The published convention (DDTree Table 1: the mean over responses of each response's mean, up
to 2048 new tokens) is measured against the fitted per-round means over fresh contexts by
:func:`response_means` and :func:`convention` (``docs/results/calibration.md``, "Convention").

Reproducibility and honesty
---------------------------
Every seed is fixed (:data:`FIT_WORLD_SEEDS`, :data:`FIT_CONTEXT_SEED`, :data:`EVAL_WORLD_SEEDS`,
:data:`EVAL_CONTEXT_SEED`, :data:`CHECK_WORLD_SEEDS`, :data:`CHECK_CONTEXT_SEED`; the three world
sets are disjoint). The *achieved* values written to the data file are measured after the fit on
the evaluation worlds and a fresh context stream by :func:`evaluate_cells` (the one round loop),
with the per-world means and the between-world spread, and the target's token-entropy quantiles
at ``T = 1`` (:func:`~treespec_sim.synth.diagnostics.token_entropies`). ``--check`` re-measures
the stored fit on the check worlds and context seed, which neither the fit nor the evaluation
used.

Command line::

    python -m treespec_sim.calibrate --contexts 2000       # fit all 8, write the data file
    python -m treespec_sim.calibrate --workers 2           # regimes in parallel processes
    python -m treespec_sim.calibrate --regimes gsm8k alpaca --contexts 2000
    python -m treespec_sim.calibrate --check               # re-evaluate the stored fit
    python -m treespec_sim.calibrate --table               # print the stored fit
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .acceptance import add_from_log_arguments, from_log_main
from .calibration_data import (
    BEST_BUDGET,
    BUDGET,
    CALIBRATED_REGIMES,
    CELL_LABELS,
    CELL_SPECS,
    CELLS,
    DATASET_NAMES,
    DERIVED_WEIGHT,
    PUBLISHED,
    QUANTITIES,
    QUANTITY_LABELS,
    T1_NEAREST,
    TABLE1,
    TOLERANCE,
    Target,
    calibration_rows,
    derive_targets,
    load_calibration_file,
    published_band,
    published_verdict,
    table1_targets,
    within_tolerance,
)
from .cli import OneLineParser, add_debug, add_seed, positive_int, run
from .engine import decode, run_round
from .files import atomic_write_text
from .provenance import git_commit
from .seeds import cell_rng
from .stats import mean_ci, t_quantile, world_ci
from .synth import World, make_world
from .synth.diagnostics import token_entropies
from .synth.regimes import CALIBRATION_FILE, RegimeSpec, load_calibrated
from .validation import check_positive_int, check_rng, is_int

__all__ = [
    "BEST_BUDGET",
    "BUDGET",
    "CALIBRATED_REGIMES",
    "CALIBRATION_FILE",
    "CELLS",
    "CELL_LABELS",
    "CELL_SPECS",
    "DATASET_NAMES",
    "DERIVED_WEIGHT",
    "FITTED_KNOBS",
    "PUBLISHED",
    "QUANTITIES",
    "QUANTITY_LABELS",
    "REGIME_GROUPS",
    "T1_NEAREST",
    "TABLE1",
    "TOLERANCE",
    "CellEvaluation",
    "Estimate",
    "Evaluation",
    "Target",
    "base_spec",
    "budget_curve",
    "calibration_rows",
    "calibration_table",
    "cell_values",
    "check",
    "convention",
    "convention_table",
    "derive_targets",
    "evaluate",
    "evaluate_cells",
    "fidelity_table",
    "fit",
    "fit_regime",
    "fit_regime_table1",
    "load_calibration_file",
    "main",
    "published_band",
    "published_verdict",
    "response_means",
    "table1_targets",
    "within_tolerance",
]

#: The fitted knobs of each regime group: ``variant_noise`` sets the chain, the group's *tree knob*
#: sets DDTree@64 (all drafter-only: the target and the contexts never change in a fit).
FITTED_KNOBS = {"math-code": ("variant_noise", "depth_sharpening", "hard_miss", "logit_scale"),
                "chat": ("variant_noise", "calibration", "hard_miss", "logit_scale")}
#: Search intervals of the fitted knobs.
#: ``depth_sharpening`` is a shape parameter of the drafter's per-depth confidence with no
#: natural bound (it moves no argmax); an upper bound of 2 was hit by two regimes, so it is 4
#: (``docs/results/calibration.md``, "The fit").
KNOB_BOUNDS = {"variant_noise": (0.0, 3.0), "depth_sharpening": (-0.95, 4.0),
               "calibration": (0.1, 1.0), "logit_scale": (1.0, 40.0)}
#: World seeds of the fit, of its held-out evaluation, and of ``--check`` (disjoint), and the
#: context seeds of each.
FIT_WORLD_SEEDS = tuple(range(6))
FIT_CONTEXT_SEED = 20261129
EVAL_WORLD_SEEDS = tuple(range(100, 116))
EVAL_CONTEXT_SEED = 31415926
CHECK_WORLD_SEEDS = tuple(range(200, 216))
CHECK_CONTEXT_SEED = 27182818
#: Contexts of ``--check`` per regime (split over :data:`CHECK_WORLD_SEEDS`): a chain's tau
#: varies by about 0.7 of its mean from context to context, so 3200 contexts put the 95%
#: interval at about +-2.5% (``docs/results/calibration.md``, "Independent re-check").
CHECK_CONTEXTS = 3200
DEFAULT_CONTEXTS = 3000

# ---------------------------------------------------------------------- regime groups (fixed knobs)
_COMMON: dict[str, object] = dict(
    vocab_size=32768, depth=15, n_topics=32, successors=8, sharpness_spread=1.0,
    zipf_exponent=0.9, topic_strength=1.0, topic_density=1.0, context_burn_in=1, mismatch=0.0,
    boost_noise=0.1, topic_awareness=1.0, degradation=0.0, junk=0.02, correction_quality=0.5,
    variants=4)

#: Fixed knobs per regime group (the fitted ones are set by :func:`base_spec`). ``math-code``:
#: a sharp target (first-successor log-odds 4 against the whole background, successors 2 nats apart,
#: dominant surface variants), a confident drafter (logits / 0.15) with no misnamed successors,
#: and the DDTree gain set by ``depth_sharpening``. ``chat``: a flatter target (log-odds 2.5,
#: gaps 1.5 nats, near-equal variants), no depth sharpening (chat trees are shallow, so it has
#: little leverage there), and the DDTree gain set by the drafter's ``calibration`` (its logit
#: temperature: a flatter drafter spreads its budget over siblings that rarely pay). Both
#: groups draw contexts the way a benchmark's
#: many prompts are diverse: the first token from the unscaled background, then
#: ``context_burn_in = 1`` step of the target (a long T = 1 burn-in of the sharp, fitted target
#: ends on the few cycles of its greedy map: with 4 steps at ``logit_scale = 5`` the per-world
#: DDTree@64 means spread by about 3.5% between worlds, with 1 step by no more than the noise
#: of 300 contexts per world), and a dense topic term (``topic_density = 1``), so that each of
#: the 32 topics has its own successor order (with the sparse topics of the older regimes,
#: greedy paths of different contexts merged onto a few hundred word classes and one world's
#: chain tau was 4-5% away from another's).
REGIME_GROUPS: dict[str, dict[str, object]] = {
    "math-code": dict(_COMMON, sharpness=4.0, successor_decay=2.0, calibration=0.15,
                      variant_spread=2.0),
    "chat": dict(_COMMON, sharpness=2.5, successor_decay=1.5, variant_spread=1.0),
}
_FAMILY_OF = {"math500": "math-code", "gsm8k": "math-code", "aime25": "math-code",
              "humaneval": "math-code", "mbpp": "math-code", "livecodebench": "math-code",
              "mt-bench": "chat", "alpaca": "chat"}
#: Starting values of the fitted knobs per regime group.
_START = {"math-code": {"variant_noise": 0.45, "depth_sharpening": 0.0, "logit_scale": 5.0},
          "chat": {"variant_noise": 0.55, "calibration": 0.35, "logit_scale": 4.5}}


def _check_regime_name(name: object) -> str:
    if name not in CALIBRATED_REGIMES:
        raise ValueError(f"unknown calibrated regime {name!r}; known: "
                         f"{', '.join(CALIBRATED_REGIMES)}")
    return str(name)


def base_spec(name: str, **knobs: float) -> RegimeSpec:
    """The regime ``name`` on its regime group's fixed knobs, with ``knobs`` (fitted ones) set.

    Raises
    ------
    ValueError
        Unknown ``name``.
    """
    name = _check_regime_name(name)
    fam = _FAMILY_OF[name]
    values = dict(_START[fam])
    values.update(knobs)
    target = derive_targets()[name]
    desc = (f"{DATASET_NAMES[name]} (Qwen3-8B): fitted to chain tau {target.chain:g} and DDTree@64 "
            f"tau {target.ddtree64:g} at T = 0, DDTree@64 tau {target.ddtree64_t1:g} at T = 1")
    params = dict(REGIME_GROUPS[fam])
    params.update(values)
    return RegimeSpec(name=name, description=desc, **params)


# ---------------------------------------------------------------------- evaluation
@dataclass(frozen=True)
class Estimate:
    """A mean over contexts with its standard error."""

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> Estimate:
        v = np.asarray(values, dtype=np.float64)
        se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
        return cls(float(v.mean()), se, int(v.size))

    def to_dict(self) -> dict[str, float]:
        return {"mean": round(self.mean, 4), "se": round(self.se, 4), "n": self.n}


@dataclass(frozen=True)
class Evaluation:
    """The three calibrated taus of one spec on given world seeds and a context stream.

    Attributes
    ----------
    chain, ddtree64, ddtree64_t1 : Estimate
        Pooled over every context of every world (mean ± s.e. over contexts).
    world_seeds : tuple of int
    per_world : dict of str to tuple of float
        Per quantity, the mean of each world (in ``world_seeds`` order): the world-to-world
        spread the pooled s.e. does not show.
    entropy_t1 : dict of str to float
        Quantiles of the target's token entropy at ``T = 1`` along sampled continuations
        (:func:`~treespec_sim.synth.diagnostics.token_entropies`): ``median``, ``p80``,
        ``share_below_0.05`` and ``share_above_1`` (nats); empty when not measured.
    """

    chain: Estimate
    ddtree64: Estimate
    ddtree64_t1: Estimate
    world_seeds: tuple[int, ...]
    per_world: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    entropy_t1: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {q: getattr(self, q).to_dict() for q in QUANTITIES}
        out["world_seeds"] = list(self.world_seeds)
        out["per_world"] = {q: [round(x, 4) for x in v] for q, v in self.per_world.items()}
        out["entropy_t1"] = {k: round(v, 4) for k, v in self.entropy_t1.items()}
        return out


def _split(n: int, k: int) -> list[int]:
    """``n`` contexts over ``k`` worlds, as evenly as possible."""
    return [n // k + (i < n % k) for i in range(k)]


#: Tokens per context of the entropy diagnostic (its rows are dense: O(V) each).
_ENTROPY_STEPS = 4


def evaluate(spec: RegimeSpec, *, contexts: int, world_seeds: Sequence[int],
             rng: np.random.Generator, budget: int = BUDGET,
             entropy_contexts: int = 300) -> Evaluation:
    r"""Measure the argmax-chain and DDTree :math:`\tau` of ``spec`` (``T = 0``, and ``T = 1``).

    The ordinary code path: for each world seed, ``make_world(spec, seed)``; contexts from
    ``world.sample_context(rng)`` (as ``run_rounds`` with ``rounds_per_sequence=1``); the
    ``chain`` policy (``L`` nodes) and ``ddtree`` (``budget`` nodes) on ``world.draft(ctx)``;
    exact :math:`E[\tau]` with rule ``"follow"`` on ``world.target_oracle(ctx, tree, T)``, at
    ``T = 0`` for both and at ``T = 1`` for DDTree (on the same contexts).

    Parameters
    ----------
    spec : RegimeSpec
    contexts : int
        Total number of contexts, split evenly over ``world_seeds``.
    world_seeds : sequence of int
        Non-empty.
    rng : numpy.random.Generator
        Draws the contexts (and the entropy diagnostic's continuations, after them).
    budget : int, default 64
    entropy_contexts : int, default 300
        Contexts (the first ones of each world, spread over the worlds) whose ``T = 1``
        continuations measure the token-entropy quantiles; 0 skips the diagnostic.

    Returns
    -------
    Evaluation
    """
    if not isinstance(spec, RegimeSpec):
        raise ValueError(f"spec must be a RegimeSpec; got {type(spec).__name__}")
    contexts = check_positive_int(contexts, "contexts")
    seeds = tuple(int(s) for s in world_seeds)
    if not seeds:
        raise ValueError("world_seeds must be non-empty")
    check_rng(rng)
    budget = check_positive_int(budget, "budget")
    if not is_int(entropy_contexts, numpy=False) or entropy_contexts < 0:
        raise ValueError(f"entropy_contexts must be a non-negative integer; got "
                         f"{entropy_contexts!r}")
    values: dict[str, list[np.ndarray]] = {q: [] for q in QUANTITIES}
    entropy_sets = []
    worlds_ctx = []
    for seed, n in zip(seeds, _split(contexts, len(seeds)), strict=True):
        world = make_world(spec, seed=seed)
        cs = [world.sample_context(rng) for _ in range(n)]
        worlds_ctx.append((world, cs))
        values["chain"].append(np.array([_tau(world, c, "chain", None) for c in cs]))
        values["ddtree64"].append(np.array([_tau(world, c, "ddtree", budget) for c in cs]))
        values["ddtree64_t1"].append(np.array([_tau(world, c, "ddtree", budget, 1.0)
                                               for c in cs]))
    for (world, cs), k in zip(worlds_ctx, _split(entropy_contexts, len(seeds)), strict=True):
        if k:
            entropy_sets.append(token_entropies(world, cs[:k], _ENTROPY_STEPS, rng))
    entropy: dict[str, float] = {}
    if entropy_sets:
        h = np.concatenate(entropy_sets)
        entropy = {"median": float(np.median(h)), "p80": float(np.quantile(h, 0.8)),
                   "share_below_0.05": float(np.mean(h < 0.05)),
                   "share_above_1": float(np.mean(h > 1.0))}
    return Evaluation(*(Estimate.of(np.concatenate(values[q])) for q in QUANTITIES), seeds,
                      {q: tuple(float(v.mean()) for v in values[q]) for q in QUANTITIES},
                      entropy)


def _tau(world: World, ctx, method: str, budget: int | None, temperature: float = 0.0
         ) -> float:
    """Exact ``follow`` E[tau] of one round (:func:`treespec_sim.engine.run_round`).

    Deterministic trees verified exactly draw nothing from their rng (``sample=False``).
    """
    return run_round(world, ctx, method=method, budget=budget, rule="follow",
                     temperature=temperature, rng=_NO_DRAWS, sample=False).expected_tau

#: Deterministic methods verified exactly (no sampled outcome) draw nothing from their rng.
_NO_DRAWS = cell_rng(0)


# ---------------------------------------------------------------------- the fit
def fit_regime(name: str, *, contexts: int = DEFAULT_CONTEXTS,
               log: Callable[[str], None] = print, start: dict[str, float] | None = None
               ) -> dict[str, object]:
    """Fit one regime to its six cells and measure it on fresh worlds; its data-file entry.

    :func:`fit_regime_table1` on :data:`FIT_WORLD_SEEDS`, then :func:`evaluate_cells` on
    :data:`EVAL_WORLD_SEEDS` (``contexts`` split over them) with context seed
    :data:`EVAL_CONTEXT_SEED`, and the target's token entropies at ``T = 1``
    (:func:`~treespec_sim.synth.diagnostics.token_entropies`, 300 contexts). The entry keeps the
    three-quantity fields (``target``, ``achieved``: chain, DDTree@64 at T = 0 and T = 1) beside
    the six cells (``table1``); ``within_tolerance`` is true when every *published* cell is
    within :data:`TOLERANCE`.

    Parameters
    ----------
    name : str
        One of :data:`CALIBRATED_REGIMES`.
    contexts : int
        Contexts of the fresh evaluation (split evenly over its worlds).
    log : callable
        Progress sink (one line per call).
    start : dict, optional
        Starting values of the fitted knobs (the stored fit); missing ones from the group's
        defaults (``hard_miss`` 0.03).
    """
    name = _check_regime_name(name)
    contexts = check_positive_int(contexts, "contexts")
    t0 = time.perf_counter()
    fam = _FAMILY_OF[name]
    fitted = fit_regime_table1(name, start=start, log=log)
    knobs = fitted["fitted"]
    spec = base_spec(name, **knobs)
    fit_s = time.perf_counter() - t0
    log(f"  [{name}] evaluating on fresh worlds")
    per_world = max(1, contexts // len(EVAL_WORLD_SEEDS))
    ev = evaluate_cells(spec, per_world=per_world, world_seeds=EVAL_WORLD_SEEDS,
                        rng=cell_rng(EVAL_CONTEXT_SEED))
    entropy = _entropy_t1(spec, EVAL_WORLD_SEEDS,
                          cell_rng(EVAL_CONTEXT_SEED + 1))
    summary = ev.summary()
    targets = table1_targets()[name]
    ok = all(within_tolerance(summary[q]["mean"], targets[q]["value"]) for q in CELLS
             if targets[q]["published"])
    total_s = time.perf_counter() - t0
    log(f"  [{name}] held out: " + ", ".join(
        f"{q} {summary[q]['mean']:.2f} (target {targets[q]['value']:g})" for q in CELLS)
        + f" ({'within' if ok else 'OUTSIDE'} ±{TOLERANCE:.0%} where published); "
        f"{total_s:.0f} s")
    cells = fitted["fit"]["cells"]
    cols = {q: CELLS.index(q) for q in QUANTITIES}
    return {
        "description": spec.description,
        "family": fam,
        "knobs": spec.knobs(),
        "fitted": knobs,
        "target": derive_targets()[name].to_dict(),
        "fit": {**{q: cells[q] for q in QUANTITIES}, **fitted["fit"],
                "contexts_chain": fitted["fit"]["contexts_per_world"]
                * len(REFINE_WORLD_SEEDS),
                "contexts_ddtree64": fitted["fit"]["contexts_per_world"]
                * len(REFINE_WORLD_SEEDS),
                "trials": fitted["fit"]["evaluations"], "seconds": round(fit_s, 1)},
        "achieved": {**{q: Estimate.of(ev.values[:, :, j].ravel()).to_dict()
                        for q, j in cols.items()},
                     "world_seeds": list(ev.world_seeds),
                     "per_world": {q: [round(float(x), 4) for x in ev.per_world[:, j]]
                                   for q, j in cols.items()},
                     "entropy_t1": {k: round(v, 4) for k, v in entropy.items()},
                     "context_seed": EVAL_CONTEXT_SEED, "contexts": int(ev.values[:, :, 0].size)},
        "table1": {"targets": targets, "achieved": summary,
                   "world_seeds": list(ev.world_seeds), "context_seed": EVAL_CONTEXT_SEED,
                   "contexts_per_world": per_world},
        "within_tolerance": ok,
        "seconds": round(total_s, 1),
    }


def _entropy_t1(spec: RegimeSpec, world_seeds: Sequence[int], rng: np.random.Generator,
                contexts: int = 300) -> dict[str, float]:
    """Token-entropy quantiles of the target at ``T = 1`` (``contexts`` contexts over the
    worlds, :data:`_ENTROPY_STEPS` sampled tokens each)."""
    sets = []
    for seed, k in zip(world_seeds, _split(contexts, len(world_seeds)), strict=True):
        if k:
            world = make_world(spec, seed=seed)
            cs = [world.sample_context(rng) for _ in range(k)]
            sets.append(token_entropies(world, cs, _ENTROPY_STEPS, rng))
    h = np.concatenate(sets)
    return {"median": float(np.median(h)), "p80": float(np.quantile(h, 0.8)),
            "share_below_0.05": float(np.mean(h < 0.05)),
            "share_above_1": float(np.mean(h > 1.0))}


# ---------------------------------------------------------------------- Table-1 fit
#: Fitted knobs of the Table-1 fit per regime group (:data:`FITTED_KNOBS`).
TABLE1_KNOBS = FITTED_KNOBS
#: Contexts per fit world of each evaluation in the fit's first stage, and the most evaluations
#: of that stage per regime.
FIT_CONTEXTS_PER_WORLD = 50
FIT_MAX_EVALS = 10
#: The fit's second stage: worlds, contexts per world and Gauss-Newton steps (after one
#: evaluation at the first stage's best point).
REFINE_WORLD_SEEDS = tuple(range(64))
REFINE_CONTEXTS_PER_WORLD = 60
REFINE_STEPS = 2
#: Stage 2 stops when every published cell is within this of its target on its set: the set's
#: 3840 contexts leave a chain's mean uncertain by about 1.2% (one standard error), so a
#: tighter stop would chase the set's own noise.
REFINE_STOP = 0.02
#: Finite-difference steps of the fit's first Jacobian (``logit_scale``: a relative step).
_FD_STEP = {"variant_noise": 0.04, "depth_sharpening": 0.25, "calibration": 0.04,
            "hard_miss": 0.008, "logit_scale": 0.08}
_TABLE1_BOUNDS = {**KNOB_BOUNDS, "hard_miss": (0.0, 0.5)}
#: The largest move of a knob in one stage-2 step, in units of its :data:`_FD_STEP`.
_STEP_CAP = 3.0


def cell_values(world: World, ctx) -> np.ndarray:
    r"""The six cells of one context, float64 (6,) in :data:`CELLS` order.

    Exact ``follow`` :math:`E[\tau]` through :func:`treespec_sim.engine.run_round`: the chain at
    ``T = 0`` and ``T = 1``, and one nested DDTree round at :data:`BEST_BUDGET` per temperature,
    read at ``B = 64`` and ``B = 512`` (:attr:`~treespec_sim.engine.Round.tau_curve`).
    """
    out = np.empty(len(CELLS))
    for k, t in enumerate((0.0, 1.0)):
        out[3 * k] = _tau(world, ctx, "chain", None, t)
        curve = run_round(world, ctx, method="ddtree", budget=BEST_BUDGET, nested=True,
                          rule="follow", temperature=t, rng=_NO_DRAWS, sample=False).tau_curve
        out[3 * k + 1] = curve[min(BUDGET, curve.size - 1)]
        out[3 * k + 2] = curve[min(BEST_BUDGET, curve.size - 1)]
    return out


def budget_curve(spec: RegimeSpec, *, budgets: Sequence[int] = (16, 64, 128, 256, 512),
                 per_world: int, world_seeds: Sequence[int], rng: np.random.Generator
                 ) -> dict[str, list[float]]:
    r"""Mean :math:`\tau` of the chain and of DDTree at each of ``budgets``, at T = 0 and T = 1.

    The diagnosis of how much a large tree gains over a small one (``docs/results/
    calibration.md``, "Budget curve"): one nested DDTree round at ``max(budgets)`` per context
    and temperature, read at every budget; the chain by its own round.

    Returns
    -------
    dict
        ``"budgets"``; ``"chain"`` and ``"ddtree"`` (one mean per budget) for T = 0, and the
        same with the suffix ``"_t1"`` for T = 1.
    """
    per_world = check_positive_int(per_world, "per_world")
    check_rng(rng)
    bs = sorted(check_positive_int(b, "budget") for b in budgets)
    chain = {0.0: [], 1.0: []}
    dd = {0.0: [], 1.0: []}
    for seed in world_seeds:
        world = make_world(spec, seed=int(seed))
        for _ in range(per_world):
            ctx = world.sample_context(rng)
            for t in (0.0, 1.0):
                chain[t].append(_tau(world, ctx, "chain", None, t))
                curve = run_round(world, ctx, method="ddtree", budget=bs[-1], nested=True,
                                  rule="follow", temperature=t, rng=_NO_DRAWS,
                                  sample=False).tau_curve
                dd[t].append([curve[min(b, curve.size - 1)] for b in bs])
    return {"budgets": bs, "chain": [float(np.mean(chain[0.0]))],
            "ddtree": [float(x) for x in np.mean(dd[0.0], axis=0)],
            "chain_t1": [float(np.mean(chain[1.0]))],
            "ddtree_t1": [float(x) for x in np.mean(dd[1.0], axis=0)]}


@dataclass(frozen=True)
class CellEvaluation:
    """The six cells of a spec on given worlds: per-context values grouped by world.

    Attributes
    ----------
    values : ndarray of float64, shape (n_worlds, n_per_world, 6)
    world_seeds : tuple of int
    """

    values: np.ndarray
    world_seeds: tuple[int, ...]

    @property
    def per_world(self) -> np.ndarray:
        """World means, float64 (n_worlds, 6)."""
        return self.values.mean(axis=1)

    @property
    def mean(self) -> np.ndarray:
        """Pooled means (equal contexts per world), float64 (6,)."""
        return self.values.mean(axis=(0, 1))

    def summary(self) -> dict[str, dict[str, object]]:
        """Per cell: mean, 95% interval over contexts (pooled), the between-world interval and
        the between-world spread (s.d. of the world means, and the part of it that the
        contexts' noise does not explain), relative to the mean."""
        w, n, _ = self.values.shape
        out: dict[str, dict[str, object]] = {}
        for j, q in enumerate(CELLS):
            v = self.values[:, :, j]
            pooled = mean_ci(v.ravel())
            between = world_ci(v.mean(axis=1)) if w > 1 else None
            sd_w = float(v.mean(axis=1).std(ddof=1)) if w > 1 else math.nan
            noise = float(np.mean(v.var(axis=1, ddof=1)) / n) if n > 1 else math.nan
            excess = math.sqrt(max(sd_w ** 2 - noise, 0.0)) if w > 1 else math.nan
            out[q] = {"mean": round(pooled.mean, 4), "ci": [round(pooled.low, 4),
                                                            round(pooled.high, 4)],
                      "world_ci": None if between is None else [round(between.low, 4),
                                                                round(between.high, 4)],
                      "per_world": [round(float(x), 4) for x in v.mean(axis=1)],
                      "world_sd_rel": round(sd_w / pooled.mean, 4),
                      "world_sd_excess_rel": round(excess / pooled.mean, 4), "n": int(v.size)}
        return out


def evaluate_cells(spec: RegimeSpec, *, per_world: int, world_seeds: Sequence[int],
                   rng: np.random.Generator) -> CellEvaluation:
    """:func:`cell_values` on ``per_world`` fresh contexts (``world.sample_context(rng)``) of each
    world ``make_world(spec, seed)``."""
    if not isinstance(spec, RegimeSpec):
        raise ValueError(f"spec must be a RegimeSpec; got {type(spec).__name__}")
    per_world = check_positive_int(per_world, "per_world")
    check_rng(rng)
    seeds = tuple(int(s) for s in world_seeds)
    if not seeds:
        raise ValueError("world_seeds must be non-empty")
    vals = np.empty((len(seeds), per_world, len(CELLS)))
    for i, seed in enumerate(seeds):
        world = make_world(spec, seed=seed)
        for k in range(per_world):
            vals[i, k] = cell_values(world, world.sample_context(rng))
    return CellEvaluation(vals, seeds)


class _CellFitSet:
    """Fixed worlds and contexts (common random numbers) for the Table-1 fit of one regime.

    Contexts are drawn once per world from the spec's target (its ``logit_scale``); a trial
    rebuilds the worlds with the trial knobs and shares the reference worlds' target kernels
    (``hard_miss`` and the drafter knobs leave the target as it is). The fit's first stage (six
    worlds) uses it.
    """

    def __init__(self, spec: RegimeSpec, *, per_world: int, world_seeds: Sequence[int],
                 context_seed: int) -> None:
        rng = cell_rng(context_seed)
        self.spec = spec
        self.world_seeds = tuple(world_seeds)
        self.ref = [make_world(spec, seed=s) for s in self.world_seeds]
        self.contexts = [[w.sample_context(rng) for _ in range(per_world)] for w in self.ref]
        self.trials = 0

    def means(self, knobs: dict[str, float]) -> np.ndarray:
        """Pooled cell means at ``knobs``, float64 (6,)."""
        spec = dataclasses.replace(self.spec, **knobs)
        vals = []
        for seed, ref, cs in zip(self.world_seeds, self.ref, self.contexts, strict=True):
            w = make_world(spec, seed=seed)
            w.share_target_kernels(ref)
            vals.extend(cell_values(w, c) for c in cs)
        self.trials += 1
        return np.mean(vals, axis=0)


class _ExactAlphaFitSet:
    """The fit's second stage: many worlds, one at a time, on contexts of each trial's target.

    A trial builds each world of ``world_seeds`` at its knobs, evaluates it and lets it go (a
    world with its target kernels holds about 0.1 GB, so 64 of them do not stay in memory).
    Contexts are drawn from context seed ``context_seed`` at the trial's own ``logit_scale``
    and kept while it does not change (the same uniforms, so a trial at another
    ``logit_scale`` sees nearly the same contexts): every value is measured on contexts of the
    spec it is reported for, as :func:`evaluate_cells` and the held-out evaluation measure it.
    The first stage's set keeps its contexts at their own ``logit_scale``; a stored fit whose
    last step had moved ``logit_scale`` 45% off its contexts' had its fit-set cells 0.3-0.8% off
    its own spec's (``docs/results/calibration.md``, "Why the check disagreed").
    """

    def __init__(self, spec: RegimeSpec, *, per_world: int, world_seeds: Sequence[int],
                 context_seed: int) -> None:
        self.spec = spec
        self.world_seeds = tuple(world_seeds)
        self.per_world = per_world
        self.context_seed = context_seed
        self.trials = 0
        self._alpha: float | None = None
        self._contexts: list[list] = []

    def means(self, knobs: dict[str, float]) -> np.ndarray:
        """Pooled cell means at ``knobs``, float64 (6,)."""
        spec = dataclasses.replace(self.spec, **knobs)
        redraw = spec.logit_scale != self._alpha
        rng = cell_rng(self.context_seed)
        if redraw:
            self._contexts = []
        vals = []
        for i, seed in enumerate(self.world_seeds):
            w = make_world(spec, seed=seed)
            if redraw:
                self._contexts.append([w.sample_context(rng) for _ in range(self.per_world)])
            vals.extend(cell_values(w, c) for c in self._contexts[i])
        self._alpha = spec.logit_scale
        self.trials += 1
        return np.mean(vals, axis=0)


def _to_z(knobs: dict[str, float]) -> np.ndarray:
    return np.array([math.log(v) if k == "logit_scale" else v for k, v in knobs.items()])


def _from_z(names: Sequence[str], z: np.ndarray) -> dict[str, float]:
    out = {}
    for k, v in zip(names, z, strict=True):
        lo, hi = _TABLE1_BOUNDS[k]
        x = math.exp(v) if k == "logit_scale" else float(v)
        out[k] = float(min(max(x, lo), hi))
    return out


class _FitTrace:
    """One Table-1 fit's evaluations: the residuals it asks for, their history, the progress
    lines and the context passes."""

    def __init__(self, name: str, tgt: np.ndarray, wts: np.ndarray,
                 log: Callable[[str], None]) -> None:
        self.name, self.tgt, self.wts, self.log = name, tgt, wts, log
        self.history: list[dict[str, object]] = []
        self.passes: list[dict[str, object]] = []
        self.evals = 0

    def resid(self, fs: _CellFitSet | _ExactAlphaFitSet, knobs: dict[str, float]
              ) -> tuple[np.ndarray, np.ndarray]:
        """The weighted relative errors and the six cells' means of ``knobs`` on ``fs``."""
        self.evals += 1
        m = fs.means(knobs)
        r = self.wts * (m / self.tgt - 1.0)
        self.history.append({**{k: round(v, 6) for k, v in knobs.items()},
                             **{q: round(float(v), 4) for q, v in zip(CELLS, m, strict=True)},
                             "cost": round(float(r @ r), 6)})
        self.log(f"  [{self.name}] eval {self.evals}: "
                 + " ".join(f"{k}={v:.4f}" for k, v in knobs.items())
                 + " | " + " ".join(f"{q} {v:.2f} ({(v / t - 1) * 100:+.1f}%)"
                                    for q, v, t in zip(CELLS, m, self.tgt, strict=True)))
        return r, m


def _lm_step(jac: np.ndarray, r: np.ndarray, z: np.ndarray, lam: float,
             names: Sequence[str], cap: np.ndarray | None = None
             ) -> tuple[np.ndarray, dict[str, float]]:
    """One Levenberg-Marquardt step from ``z`` (each knob's move at most ``cap``), clipped to
    the bounds: the new ``z`` and its knobs."""
    a = jac.T @ jac
    step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -jac.T @ r)
    if cap is not None:
        step *= min(1.0, float(np.min(cap / np.maximum(np.abs(step), 1e-300))))
    z_new = _to_z(_from_z(names, z + step))
    return z_new, _from_z(names, z_new)


def _broyden(jac: np.ndarray, r_new: np.ndarray, r: np.ndarray, dz: np.ndarray) -> None:
    """Broyden's rank-one update of ``jac`` (in place) after a move ``dz``."""
    if dz @ dz > 0:
        jac += np.outer(r_new - r - jac @ dz, dz) / (dz @ dz)


def _fit_stage1(trace: _FitTrace, spec0: RegimeSpec, x: dict[str, float], *, per_world: int,
                max_evals: int, warm: bool, pub: np.ndarray
                ) -> np.ndarray:
    """Stage 1: the forward-difference Jacobian at ``x`` and, unless ``warm``, LM steps on
    the fit set's contexts (redrawn when ``logit_scale`` moves by more than 2%). Returns the
    Jacobian (the best point is in ``trace.history``)."""
    names = list(x)

    def make_set(alpha: float) -> _CellFitSet:
        trace.passes.append({"contexts_logit_scale": round(alpha, 6),
                             "first_evaluation": trace.evals + 1})
        return _CellFitSet(dataclasses.replace(spec0, logit_scale=alpha), per_world=per_world,
                           world_seeds=FIT_WORLD_SEEDS, context_seed=FIT_CONTEXT_SEED)

    fs = make_set(x["logit_scale"])
    r, m = trace.resid(fs, x)
    z = _to_z(x)
    jac = np.empty((len(CELLS), len(names)))
    for i, k in enumerate(names):
        zi = z.copy()
        zi[i] += _FD_STEP[k] if k != "hard_miss" or z[i] + _FD_STEP[k] <= 0.5 else -_FD_STEP[k]
        ri, _ = trace.resid(fs, _from_z(names, zi))
        jac[:, i] = (ri - r) / (zi[i] - z[i])
    lam = 1e-3
    while (not warm and trace.evals < max_evals
           and not np.all(np.abs(m / trace.tgt - 1.0)[pub] <= 0.01)):
        z_new, x_new = _lm_step(jac, r, z, lam, names)
        if abs(x_new["logit_scale"] / x["logit_scale"] - 1.0) > 0.02:
            fs = make_set(x_new["logit_scale"])
            r, m = trace.resid(fs, x)                     # the old point on the new contexts
            if trace.evals >= max_evals:
                break
        r_new, m_new = trace.resid(fs, x_new)
        _broyden(jac, r_new, r, z_new - z)
        if r_new @ r_new < r @ r:
            z, x, r, m = z_new, x_new, r_new, m_new
            lam = max(lam / 3.0, 1e-4)
        else:
            lam *= 4.0
    return jac


def _fit_stage2(trace: _FitTrace, spec0: RegimeSpec, x: dict[str, float], jac: np.ndarray,
                pub: np.ndarray) -> None:
    """Stage 2: at most :data:`REFINE_STEPS` capped LM steps from ``x`` on
    :data:`REFINE_WORLD_SEEDS` (contexts of each point's own ``logit_scale``)."""
    names = list(x)
    z = _to_z(x)
    trace.passes.append({"contexts_logit_scale": round(x["logit_scale"], 6),
                         "first_evaluation": trace.evals + 1, "refine": True,
                         "exact_alpha": True})
    fs = _ExactAlphaFitSet(spec0, per_world=REFINE_CONTEXTS_PER_WORLD,
                           world_seeds=REFINE_WORLD_SEEDS, context_seed=FIT_CONTEXT_SEED + 1)
    r, m = trace.resid(fs, x)
    lam = 1e-2
    # no knob moves by more than _STEP_CAP first-Jacobian steps in one stage-2 step: stage 1's
    # Jacobian is measured on 300 contexts, and a step it overshoots costs a whole evaluation
    cap = np.array([_STEP_CAP * _FD_STEP[k] for k in names])
    for _ in range(REFINE_STEPS):
        if np.all(np.abs(m / trace.tgt - 1.0)[pub] <= REFINE_STOP):
            break
        z_new, x_new = _lm_step(jac, r, z, lam, names, cap)
        r_new, m_new = trace.resid(fs, x_new)
        _broyden(jac, r_new, r, z_new - z)
        if r_new @ r_new < r @ r:
            z, x, r, m = z_new, x_new, r_new, m_new
        else:
            lam *= 4.0


def fit_regime_table1(name: str, *, per_world: int | None = None, max_evals: int | None = None,
                      start: dict[str, float] | None = None,
                      log: Callable[[str], None] = print) -> dict[str, object]:
    """Fit one regime's :data:`TABLE1_KNOBS` to its six cells (:func:`table1_targets`) at once.

    Weighted least squares in the relative errors ``w_i (sim_i / target_i - 1)`` on the mean of
    :data:`FIT_WORLD_SEEDS` (``per_world`` contexts each; common random numbers):
    Levenberg-Marquardt steps on a forward-difference Jacobian (:data:`_FD_STEP`), updated by
    Broyden's rule after each step. Contexts are redrawn with the current ``logit_scale`` when a
    step moves it by more than 2% (the contexts' burn-in step follows the ``T = 1`` target).
    Stops when every published cell is within 1% on the fit set, or after ``max_evals``
    evaluations (:func:`_fit_stage1`); then refines on 64 worlds (:func:`_fit_stage2`).

    Returns
    -------
    dict
        ``fitted`` (knobs), ``fit`` (cells on the fit set, evaluations, seconds, history).
    """
    name = _check_regime_name(name)
    per_world = check_positive_int(FIT_CONTEXTS_PER_WORLD if per_world is None else per_world,
                                   "per_world")
    max_evals = check_positive_int(FIT_MAX_EVALS if max_evals is None else max_evals,
                                   "max_evals")
    t0 = time.perf_counter()
    fam = _FAMILY_OF[name]
    names = TABLE1_KNOBS[fam]
    targets = table1_targets()[name]
    tgt = np.array([targets[q]["value"] for q in CELLS], dtype=np.float64)
    wts = np.array([targets[q]["weight"] for q in CELLS], dtype=np.float64)
    pub = np.array([targets[q]["published"] for q in CELLS])
    start = dict(start or {})
    # a start with every knob (a stored fit) is already near the optimum: stage 1 then only
    # measures the Jacobian, and stage 2 starts from the start itself; stage 1's steps on its
    # 300 contexts would chase that set's own 2-3% noise (docs/results/calibration.md, "The fit")
    warm = bool(start) and all(k in start for k in names)
    if start and "hard_miss" not in start:
        # a fit without hard misses: they lengthen no chain, so start with less variant noise
        # (the two share the chain's misses) and a sharper target at T = 1
        start["variant_noise"] = max(start.get("variant_noise", 0.45) - 0.12, 0.05)
        start["logit_scale"] = start.get("logit_scale", 5.0) * 1.15
    x = {k: float(start.get(k, {**_START[fam], "hard_miss": 0.03}[k])) for k in names}
    spec0 = base_spec(name, **{k: v for k, v in x.items() if k != "hard_miss"})
    trace = _FitTrace(name, tgt, wts, log)
    jac = _fit_stage1(trace, spec0, x, per_world=per_world, max_evals=max_evals, warm=warm,
                      pub=pub)
    # Stage 2: stage 1's 300 contexts leave its means uncertain by 2-3% and its six worlds add
    # their own spread, together as large as the tolerance (docs/results/calibration.md,
    # "The fit"); the last steps run on 64 worlds (REFINE_WORLD_SEEDS), from the best point of
    # stage 1 (or the warm start) with its Jacobian, each on contexts of its own logit_scale,
    # and only stage-2 points compete for the result.
    stage1 = len(trace.history)
    x = _from_z(names, _to_z(x if warm else
                             {k: float(min(trace.history, key=lambda h: h["cost"])[k])
                              for k in names}))
    _fit_stage2(trace, spec0, x, jac, pub)
    best = min(trace.history[stage1:], key=lambda h: h["cost"])
    fitted = {k: float(best[k]) for k in names}
    seconds = time.perf_counter() - t0
    log(f"  [{name}] fitted {fitted} in {trace.evals} evaluations, {seconds:.0f} s")
    return {"fitted": fitted, "fit": {
        "cells": {q: best[q] for q in CELLS}, "world_seeds": list(REFINE_WORLD_SEEDS),
        "context_seed": FIT_CONTEXT_SEED + 1, "contexts_per_world": REFINE_CONTEXTS_PER_WORLD,
        "stage1": {"world_seeds": list(FIT_WORLD_SEEDS), "context_seed": FIT_CONTEXT_SEED,
                   "contexts_per_world": per_world, "evaluations": stage1},
        "evaluations": trace.evals, "passes": trace.passes, "seconds": round(seconds, 1),
        "history": trace.history}}


def _print_flush(line: str) -> None:
    """Progress sink of worker processes (unbuffered, so parallel fits interleave by line)."""
    print(line, flush=True)


def fit(regimes: Sequence[str] = CALIBRATED_REGIMES, *, contexts: int = DEFAULT_CONTEXTS,
        out: Path | str = CALIBRATION_FILE, log: Callable[[str], None] = print,
        workers: int = 1) -> dict:
    """Fit ``regimes`` and write them (merged with the others already in ``out``) to ``out``.

    Each regime starts from its stored fit in ``out`` where there is one. The file is
    rewritten (atomically) after every finished regime, so an interrupted run keeps what it
    finished. ``workers > 1`` fits regimes in that many processes (progress lines from worker
    processes go to stdout).
    """
    names = [_check_regime_name(r) for r in regimes]
    contexts = check_positive_int(contexts, "contexts")
    workers = check_positive_int(workers, "workers")
    t0 = time.perf_counter()
    data = load_calibration_file(Path(out))
    entries = dict(data.get("regimes", {}))
    starts = {n: dict(entries[n].get("fitted", {})) for n in names if n in entries}
    if workers == 1:
        for name in names:
            entries[name] = fit_regime(name, contexts=contexts, log=log, start=starts.get(name))
            data = _write(Path(out), entries, t0)
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(names))) as pool:
            futures = {pool.submit(fit_regime, name, contexts=contexts, log=_print_flush,
                                   start=starts.get(name)): name for name in names}
            for fut in as_completed(futures):
                entries[futures[fut]] = fut.result()
                data = _write(Path(out), entries, t0)
    log(f"wrote {out} ({len(names)} regime(s) fitted in {time.perf_counter() - t0:.0f} s)")
    return data


def _write(path: Path, entries: dict[str, dict], t0: float) -> dict:
    """Write the calibration file with ``entries`` (atomic replace); returns its content."""
    ordered = {r: entries[r] for r in CALIBRATED_REGIMES if r in entries}
    data = {
        "format": 2,
        "about": ("Calibrated regimes of treespec_sim (python -m treespec_sim.calibrate). "
                  "Targets: Qwen3-8B, DDTree Table 1 (argmax-chain tau, L = 15, and DDTree "
                  "tau at its best budget, compared at B = 512) and TEV's DDTree tau at "
                  "B = 64, at T = 0 and T = 1 (exact E[tau], rule follow). 'table1' holds the "
                  "six cells; 'target'/'achieved' the chain and DDTree@64 of them. 'achieved' "
                  "is measured on fresh worlds and contexts."),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m treespec_sim.calibrate " + " ".join(sys.argv[1:]),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "budget": BUDGET,
        "best_budget": BEST_BUDGET,
        "cells": list(CELLS),
        "tolerance": TOLERANCE,
        "fitted_knobs": {f: list(k) for f, k in FITTED_KNOBS.items()},
        "families": REGIME_GROUPS,  # the data file's key, kept for its readers
        "seeds": {"fit_world_seeds": list(FIT_WORLD_SEEDS),
                  "fit_context_seed": FIT_CONTEXT_SEED,
                  "eval_world_seeds": list(EVAL_WORLD_SEEDS),
                  "eval_context_seed": EVAL_CONTEXT_SEED,
                  "check_world_seeds": list(CHECK_WORLD_SEEDS),
                  "check_context_seed": CHECK_CONTEXT_SEED},
        "last_run_seconds": round(time.perf_counter() - t0, 1),
        "regimes": ordered,
    }
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return data


# ---------------------------------------------------------------------- the published convention
#: DDTree Table 1's convention: responses of at most 2048 new tokens, tau the mean over responses
#: of each response's mean (``docs/results/calibration.md``, "Convention").
RESPONSE_TOKENS = 2048
#: The Table-1 cells a decoded response measures (:data:`CELL_SPECS`: chain and DDTree at
#: :data:`BEST_BUDGET`, T = 0 and T = 1).
RESPONSE_CELLS = ("chain", "ddtree512", "chain_t1", "ddtree512_t1")
#: Seed of the responses' starting contexts and sampled outcomes.
RESPONSE_SEED = 16180339


def _expected_and_sampled(rnd) -> tuple[float, int]:
    """A decoded round's exact E[tau] given its context, and its sampled tau."""
    return rnd.expected_tau, rnd.outcome.tau


def response_means(spec: RegimeSpec, *, responses_per_world: int, world_seeds: Sequence[int],
                   rng: np.random.Generator, n_tokens: int = RESPONSE_TOKENS) -> np.ndarray:
    r"""Per-response mean :math:`\tau` of decoded responses (the published convention).

    For each world ``make_world(spec, seed)`` and each response: a fresh starting context
    ``world.sample_context(rng)``, shared by the cells of :data:`RESPONSE_CELLS`; for each cell
    :func:`treespec_sim.engine.decode` of ``n_tokens`` new tokens from it (rule ``"follow"``,
    every round committing its sampled outcome, so every round after the first drafts from a
    context the decode reached, not a fresh one). A response's mean is the mean over its rounds.

    Parameters
    ----------
    spec : RegimeSpec
    responses_per_world : int
    world_seeds : sequence of int
        Non-empty.
    rng : numpy.random.Generator
        Draws the starting contexts and the sampled outcomes.
    n_tokens : int, default 2048
        New tokens per response (the last round is counted whole).

    Returns
    -------
    ndarray of float64, shape (n_worlds, responses_per_world, len(RESPONSE_CELLS), 3)
        ``[..., 0]``: the mean over the response's rounds of each round's exact E[tau] given
        its context; ``[..., 1]``: the mean of its sampled tau (tokens per round, bonus
        counted); ``[..., 2]``: its number of rounds.
    """
    if not isinstance(spec, RegimeSpec):
        raise ValueError(f"spec must be a RegimeSpec; got {type(spec).__name__}")
    responses_per_world = check_positive_int(responses_per_world, "responses_per_world")
    n_tokens = check_positive_int(n_tokens, "n_tokens")
    check_rng(rng)
    seeds = tuple(int(s) for s in world_seeds)
    if not seeds:
        raise ValueError("world_seeds must be non-empty")
    out = np.empty((len(seeds), responses_per_world, len(RESPONSE_CELLS), 3))
    for i, seed in enumerate(seeds):
        world = make_world(spec, seed=seed)
        for k in range(responses_per_world):
            ctx = world.sample_context(rng)
            for j, q in enumerate(RESPONSE_CELLS):
                method, budget, t = CELL_SPECS[q]
                recs = np.array(decode(world, ctx, n_tokens=n_tokens, rng=rng, method=method,
                                       budget=budget, rule="follow", temperature=t,
                                       record=_expected_and_sampled).records,
                                dtype=np.float64)
                out[i, k, j] = (recs[:, 0].mean(), recs[:, 1].mean(), recs.shape[0])
    return out


def convention(regimes: Sequence[str] | None = None, *, responses_per_world: int = 2,
               path: Path | str = CALIBRATION_FILE, n_tokens: int = RESPONSE_TOKENS,
               log: Callable[[str], None] = print) -> dict[str, dict[str, dict[str, object]]]:
    """Per-response means of decoded responses against the data file's per-round means.

    :func:`response_means` of each stored regime on :data:`EVAL_WORLD_SEEDS` (the worlds of the
    held-out evaluation, whose per-round means over fresh contexts the file holds) with seed
    :data:`RESPONSE_SEED`. Per regime and cell of :data:`RESPONSE_CELLS`: ``per_response``
    (mean over responses of the exact per-round E[tau] means, 95% t-interval over responses),
    ``sampled`` (the same with the sampled tau), ``per_round`` (the file's held-out mean and
    interval), ``difference`` (per-response minus per-round, relative to per-round, with a
    Welch 95% interval) and ``rounds`` (mean rounds per response).
    """
    data = load_calibration_file(Path(path))
    stored = data.get("regimes", {})
    names = list(CALIBRATED_REGIMES if regimes is None else regimes)
    for r in names:
        _check_regime_name(r)
        if r not in stored or "table1" not in stored[r]:
            raise ValueError(f"regime {r!r} has no six-cell fit in the calibration file {path}")
    out: dict[str, dict[str, dict[str, object]]] = {}
    for r in names:
        t0 = time.perf_counter()
        spec = RegimeSpec(**stored[r]["knobs"])
        vals = response_means(spec, responses_per_world=responses_per_world,
                              world_seeds=EVAL_WORLD_SEEDS,
                              rng=cell_rng(RESPONSE_SEED), n_tokens=n_tokens)
        out[r] = {}
        for j, q in enumerate(RESPONSE_CELLS):
            v = vals[:, :, j, 0].ravel()
            pr = mean_ci(v)
            ps = mean_ci(vals[:, :, j, 1].ravel())
            a = stored[r]["table1"]["achieved"][q]
            n_b = int(a["n"])
            se_b = (a["ci"][1] - a["ci"][0]) / 2 / t_quantile(n_b - 1)
            se_a = float(v.std(ddof=1) / math.sqrt(v.size))
            se = math.hypot(se_a, se_b)
            dof = max(1, int(se ** 4 / (se_a ** 4 / (v.size - 1) + se_b ** 4 / (n_b - 1))))
            diff = pr.mean - a["mean"]
            half = t_quantile(dof) * se
            out[r][q] = {"per_response": [round(pr.mean, 4), round(pr.low, 4), round(pr.high, 4)],
                         "sampled": [round(ps.mean, 4), round(ps.low, 4), round(ps.high, 4)],
                         "per_round": [a["mean"], a["ci"][0], a["ci"][1]],
                         "difference": [round(diff / a["mean"], 4),
                                        round((diff - half) / a["mean"], 4),
                                        round((diff + half) / a["mean"], 4)],
                         "rounds": round(float(vals[:, :, j, 2].mean()), 1),
                         "responses": int(v.size)}
        log(f"  [{r}] " + ", ".join(
            f"{q} {out[r][q]['per_response'][0]:.2f} vs {out[r][q]['per_round'][0]:.2f} "
            f"({out[r][q]['difference'][0] * 100:+.1f}%)" for q in RESPONSE_CELLS)
            + f"; {time.perf_counter() - t0:.0f} s")
    return out


def convention_table(results: dict[str, dict[str, dict[str, object]]]) -> str:
    """:func:`convention`'s results as Markdown: per regime and cell the per-response mean with
    its 95% interval, the per-round mean over fresh contexts with its interval, and their
    relative difference with its interval."""
    rows = ["| regime | cell | per response [95% CI] | per round, fresh contexts [95% CI] | "
            "difference [95% CI] | rounds per response |", "|---|---|---|---|---|---|"]
    for r, cells in results.items():
        for q, c in cells.items():
            a, b, d = c["per_response"], c["per_round"], c["difference"]
            rows.append(f"| {r} | {CELL_LABELS[q]} | {a[0]:.2f} [{a[1]:.2f}, {a[2]:.2f}] | "
                        f"{b[0]:.2f} [{b[1]:.2f}, {b[2]:.2f}] | {_pct(d[0])} "
                        f"[{_pct(d[1])}, {_pct(d[2])}] | {c['rounds']:.0f} |")
    return "\n".join(rows)


def check(regimes: Sequence[str] | None = None, *, contexts: int = CHECK_CONTEXTS,
          path: Path | str = CALIBRATION_FILE, seed: int = CHECK_CONTEXT_SEED,
          log: Callable[[str], None] = print) -> dict[str, CellEvaluation]:
    """Re-evaluate the stored fit on worlds and contexts no fit used (no refit); print it.

    :func:`evaluate_cells` on :data:`CHECK_WORLD_SEEDS` (``contexts`` split over them)
    with context seed ``seed``. Per regime one line per cell of :data:`CELLS`: the target
    (``*`` derived), the mean with its 95% interval over contexts, the relative error, the
    between-world interval and the between-world spread (s.d. of the world means beyond the
    contexts' noise, relative to the mean), and whether a published cell is within
    :data:`TOLERANCE` (:func:`published_verdict`: its interval inside the band).

    Returns the new evaluations; ``ValueError`` if a regime is unknown or not in the file.
    """
    data = load_calibration_file(Path(path))
    stored = data.get("regimes", {})
    names = list(CALIBRATED_REGIMES if regimes is None else regimes)
    for r in names:
        _check_regime_name(r)
        if r not in stored:
            raise ValueError(f"regime {r!r} is not in the calibration file {path}")
    contexts = check_positive_int(contexts, "contexts")
    per_world = max(1, contexts // len(CHECK_WORLD_SEEDS))
    targets = table1_targets()
    out: dict[str, CellEvaluation] = {}
    log(f"{'regime':<14} {'cell':<17} {'target':>7} {'now [95% CI]':>22} {'err':>7} "
        f"{'between-world CI':>17} {'spread':>7}  ok")
    for r in names:
        spec = RegimeSpec(**stored[r]["knobs"])
        ev = evaluate_cells(spec, per_world=per_world, world_seeds=CHECK_WORLD_SEEDS,
                            rng=cell_rng(seed))
        out[r] = ev
        summ = ev.summary()
        for q in CELLS:
            t, c = targets[r][q], summ[q]
            err = c["mean"] / t["value"] - 1.0
            wci = c["world_ci"]
            wtxt = "-" if wci is None else f"[{wci[0]:.2f}, {wci[1]:.2f}]"
            ok = published_verdict(c["mean"], *c["ci"], t["value"]) if t["published"] \
                else "(derived)"
            log(f"{r:<14} {CELL_LABELS[q]:<17} {t['value']:>6.2f}{'' if t['published'] else '*'}"
                f"{'' if not t['published'] else ' '} {c['mean']:>6.2f} "
                f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]{'':>1} {err * 100:>+6.1f}% "
                f"{wtxt:>17} {c['world_sd_excess_rel'] * 100:>6.1f}%  {ok}")
    return out


def calibration_table(data: dict) -> str:
    """The stored fit as Markdown: the fidelity table (:func:`fidelity_table`), then the
    fitted knobs per regime."""
    rows = ["| regime | family | variant_noise | hard_miss | depth_sharpening | calibration | "
            "logit_scale |", "|---|---|---|---|---|---|---|"]
    for name, e in data.get("regimes", {}).items():
        k = e["knobs"]
        rows.append(f"| {name} | {e['family']} | {k['variant_noise']:.4f} | "
                    f"{k.get('hard_miss', 0.0):.4f} | {k['depth_sharpening']:.4f} | "
                    f"{k['calibration']:.4f} | {k.get('logit_scale', 1.0):.3f} |")
    return fidelity_table(data) + "\n\n" + "\n".join(rows)


def fidelity_table(data: dict, checked: dict[str, CellEvaluation] | None = None) -> str:
    """Every published (and derived) cell beside the simulator's number, as Markdown.

    Per regime and cell of :data:`CELLS`: the target (``*`` derived, not published), the
    held-out mean (the data file's ``table1.achieved``: evaluation worlds and contexts the fit
    did not use) with its 95% interval over contexts and its relative error, the fit set's value
    (the fitted one), the between-world spread beyond the contexts' noise, and, with
    ``checked`` (:func:`check`'s evaluations), the check's mean and interval.
    """
    head = ("| regime | cell | target | held out [95% CI] | rel. err. | fit set | "
            "world spread |" + (" check [95% CI] | rel. err. |" if checked else ""))
    rows = [head, "|" + "---|" * (7 + (2 if checked else 0))]
    for name, e in data.get("regimes", {}).items():
        t1 = e.get("table1")
        if t1 is None:
            continue
        summ = None if checked is None or name not in checked else checked[name].summary()
        for q in CELLS:
            t, a = t1["targets"][q], t1["achieved"][q]
            star = "" if t["published"] else "*"
            line = (f"| {name} | {CELL_LABELS[q]} | {t['value']:g}{star} | {a['mean']:.2f} "
                    f"[{a['ci'][0]:.2f}, {a['ci'][1]:.2f}] | "
                    f"{_pct(a['mean'] / t['value'] - 1)} | {e['fit']['cells'][q]:.2f} | "
                    f"{a['world_sd_excess_rel'] * 100:.1f}% |")
            if checked:
                c = None if summ is None else summ[q]
                line += (" - | - |" if c is None else
                         f" {c['mean']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] | "
                         f"{_pct(c['mean'] / t['value'] - 1)} |")
            rows.append(line)
    return "\n".join(rows)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%".replace("-", "\u2212")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m treespec_sim.calibrate``."""
    ap = OneLineParser(
        prog="python -m treespec_sim.calibrate",
        description="Fit the calibrated regimes (synthetic worlds whose chain tau and DDTree@64 "
                    "tau at T = 0, and DDTree@64 tau at T = 1, match published Qwen3-8B "
                    "values) and write the data file; "
                    "or --check the stored fit on a fresh seed; or print it as a --table.",
        epilog="exit status: 0 done, 2 bad input")
    ap.add_argument("--regimes", nargs="+", metavar="NAME", default=list(CALIBRATED_REGIMES),
                    help=f"regimes to fit or check, of {', '.join(CALIBRATED_REGIMES)} "
                         f"(default: all eight)")
    ap.add_argument("--contexts", type=int, metavar="N", default=None,
                    help=f"contexts per evaluation (default: {DEFAULT_CONTEXTS} for a fit, "
                         f"{CHECK_CONTEXTS} for --check)")
    ap.add_argument("--check", action="store_true",
                    help="re-evaluate the stored fit on a fresh seed; do not refit")
    add_seed(ap, "context seed of --check (default: %(default)s)", default=CHECK_CONTEXT_SEED)
    ap.add_argument("--file", type=Path, default=CALIBRATION_FILE,
                    help="calibration data file: a fit writes it, --check and --table read it "
                         "(default: the package's treespec_sim/data/calibration.json)")
    # --workers is spelled here: tests/test_docs.py finds the options docs/ quote in the source
    ap.add_argument("--workers", type=positive_int, default=1, metavar="N",
                    help="fit regimes in N processes (default: %(default)s)")
    ap.add_argument("--table", action="store_true",
                    help="print the stored fit as a Markdown table and exit")
    add_from_log_arguments(ap)  # --from-log FILE: a regime fitted to a public log (acceptance.py)
    add_debug(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _main)


def _main(args: argparse.Namespace) -> int:
    if args.from_log is not None:
        return from_log_main(args, contexts=args.contexts, seed=args.seed)
    for r in args.regimes:
        _check_regime_name(r)
    if args.contexts is not None and args.contexts < 1:
        raise ValueError(f"--contexts must be >= 1; got {args.contexts}")
    if args.table:
        data = load_calibration_file(args.file)
        load_calibrated(args.file)  # every entry's knobs make a RegimeSpec (else named)
        try:
            print(calibration_table(data))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{args.file}: not a calibration file written by this command "
                             f"({type(exc).__name__}: {exc})") from None
    elif args.check:
        check(args.regimes, contexts=CHECK_CONTEXTS if args.contexts is None else args.contexts,
              path=args.file, seed=args.seed)
    else:
        fit(args.regimes, out=args.file, workers=args.workers,
            contexts=DEFAULT_CONTEXTS if args.contexts is None else args.contexts)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
