r"""Calibrated regimes: synthetic worlds fitted to published acceptance lengths.

``python -m treespec_sim.calibrate`` fits eight named regimes, one per benchmark of the DDTree and
CaDDTree papers (``math500, gsm8k, aime25, humaneval, mbpp, livecodebench, mt-bench, alpaca``), so
that three measured quantities match the published Qwen3-8B values:

* the argmax-chain :math:`\tau` at ``T = 0`` (DFlash's own draft, ``L = 15``),
* DDTree's :math:`\tau` at ``B = 64``, ``T = 0``: the exact :math:`E[\tau]` of the fixed tree
  under predraw-and-follow (:func:`treespec_sim.verify.expected_length`, rule ``"follow"``), and
* DDTree's :math:`\tau` at ``B = 64``, ``T = 1``: the same exact quantity against the target
  sampled at ``T = 1``.

All are means over contexts drawn as :func:`treespec_sim.engine.run_rounds` draws them with
``rounds_per_sequence=1`` (:meth:`~treespec_sim.synth.World.sample_context`), with the bonus
token counted.

Targets
-------
:data:`PUBLISHED` holds the numbers (``docs/results/calibration.md``, "Targets");
:func:`derive_targets` turns them into one (chain, DDTree@64, DDTree@64 at T = 1) triple per
regime. Where a value is not published it is derived from the published ones by a documented ratio
(``docs/results/calibration.md`` and each target's ``derivation`` string).

Model and fitted knobs
----------------------
Each regime is a :class:`~treespec_sim.synth.RegimeSpec` (``V = 32768``, ``L = 15``, 8192 word
classes of 4 surface variants) on one of two *families* of fixed knobs (:data:`FAMILIES`: a
low-entropy target for math and code, a higher-entropy one for chat), plus two fitted drafter
knobs and one fitted target knob (:data:`FITTED_KNOBS`):

``variant_noise`` (both families)
    the drafter's error on the within-class variant weights: near-miss drafts whose right token
    is a sibling. It sets the argmax chain's acceptance.
``depth_sharpening`` (math-code)
    the per-depth output calibration ``beta_d = 1 + depth_sharpening (d - 1) / (L - 1)``. It
    never moves an argmax, so the chain is unchanged; it decides how deep DDTree's best-first
    budget reaches, and so DDTree@64.
``calibration`` (chat)
    the temperature of the drafter's logits. A flatter drafter lowers DDTree's gain over the
    chain (and moves the chain a little, so ``variant_noise`` is refitted to the chain at every
    trial).
``logit_scale`` (both families)
    the target's logit scale ``alpha`` (:class:`~treespec_sim.synth.RegimeSpec`): how peaked the
    target is at ``T = 1``. It moves no argmax, so it changes the ``T = 0`` quantities only
    through the contexts (drawn from the ``T = 1`` target); it sets DDTree@64 at ``T = 1``.

The ``T = 0`` knobs and ``alpha`` are fitted in alternation: the ``T = 0`` knobs on contexts
drawn with the current ``alpha``, then ``alpha`` on the same contexts, until ``alpha`` moves by
less than 2% (at most :data:`MAX_PASSES` passes).

Each fit is a 1-D monotone root find (secant steps to a bracket, then the Illinois variant of
regula falsi) on common random numbers: the same worlds and contexts for every trial value, so
each objective is a deterministic function of the knobs.

Reproducibility and honesty
---------------------------
Every seed is fixed (:data:`FIT_WORLD_SEEDS`, :data:`FIT_CONTEXT_SEED`, :data:`EVAL_WORLD_SEEDS`,
:data:`EVAL_CONTEXT_SEED`). The *achieved* values written to the data file are measured afterwards
on fresh world seeds and a fresh context stream by :func:`evaluate`, which runs the one round
loop (:func:`treespec_sim.engine.run_round` with methods ``chain`` and ``ddtree``, exact
``follow`` :math:`E[\tau]`), with the per-world means beside the pooled ones and the
target's token-entropy quantiles at ``T = 1``
(:func:`~treespec_sim.synth.diagnostics.token_entropies`). ``--check`` re-measures the stored fit
on yet another seed. The fit's inner objective scores DDTree@64 through the same loop and the
chain by its closed form (the first depth where the drafter's argmax leaves the target's greedy
continuation; a test checks it against ``run_round``).

Command line::

    python -m treespec_sim.calibrate                       # fit all 8, write the data file
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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cli import OneLineParser, add_debug, add_seed, positive_int, run
from .engine import run_round
from .files import atomic_write_text
from .synth import World, make_world
from .synth.diagnostics import greedy_continuation, token_entropies
from .synth.regimes import CALIBRATION_FILE, RegimeSpec
from .validation import check_positive_int, check_rng

__all__ = [
    "BUDGET",
    "CALIBRATED_REGIMES",
    "CALIBRATION_FILE",
    "FAMILIES",
    "FITTED_KNOBS",
    "PUBLISHED",
    "Estimate",
    "Evaluation",
    "Target",
    "base_spec",
    "calibration_rows",
    "calibration_table",
    "check",
    "derive_targets",
    "evaluate",
    "fit",
    "fit_regime",
    "main",
]

#: The eight regimes, in the order of the CaDDTree paper's task list.
CALIBRATED_REGIMES = ("math500", "gsm8k", "aime25", "humaneval", "mbpp", "livecodebench",
                      "mt-bench", "alpaca")
#: DDTree budget of the calibrated tree quantity.
BUDGET = 64
#: Relative tolerance the fit must reach on fresh seeds.
TOLERANCE = 0.05
#: The fitted knobs of each family: ``variant_noise`` sets the chain, the family's *tree knob*
#: sets DDTree@64 (all drafter-only: the target and the contexts never change in a fit).
FITTED_KNOBS = {"math-code": ("variant_noise", "depth_sharpening", "logit_scale"),
                "chat": ("variant_noise", "calibration", "logit_scale")}
#: The calibrated quantities, in table order, with their labels.
QUANTITIES = ("chain", "ddtree64", "ddtree64_t1")
QUANTITY_LABELS = {"chain": "chain τ (T = 0)", "ddtree64": "DDTree@64 τ (T = 0)",
                   "ddtree64_t1": "DDTree@64 τ (T = 1)"}
#: Most alternations of the T = 0 knobs and ``logit_scale`` in one regime's fit.
MAX_PASSES = 3
#: Search intervals of the fitted knobs.
KNOB_BOUNDS = {"variant_noise": (0.0, 3.0), "depth_sharpening": (-0.95, 2.0),
               "calibration": (0.1, 1.0), "logit_scale": (1.0, 40.0)}
#: Per family: (tree knob, DDTree@64 increasing in it?, does the chain depend on it?, step).
_TREE_KNOB = {"math-code": ("depth_sharpening", True, False, 0.3),
              "chat": ("calibration", False, True, 0.05)}

FIT_WORLD_SEEDS = (0, 1, 2)
FIT_CONTEXT_SEED = 20261129
EVAL_WORLD_SEEDS = (100, 101, 102)
EVAL_CONTEXT_SEED = 31415926
CHECK_WORLD_SEEDS = (200, 201, 202)
CHECK_CONTEXT_SEED = 27182818
DEFAULT_CONTEXTS = 3000

# ---------------------------------------------------------------------- published numbers
#: Published Qwen3-8B numbers at T = 0 (H200, batch 1, HF; tau counts the bonus token).
#: ``chain``: DFlash tau (DDTree Table 1); ``ddtree64``: DDTree tau at B = 64 (TEV Table 1);
#: ``dflash_speedup`` and ``ddtree_speedup`` (best B) from DDTree Table 1 and its project page.
#: ``None`` = not published. Sources and page numbers: ``docs/results/calibration.md``.
#: ``ddtree64_t1``: DDTree tau at B = 64 and T = 1 (TEV Table 1).
PUBLISHED: dict[str, dict[str, float | None]] = {
    "math500": {"chain": 7.79, "ddtree64": 9.76, "ddtree64_t1": 8.17, "dflash_speedup": 5.56,
                "ddtree_speedup": 7.52},
    "gsm8k": {"chain": 6.57, "ddtree64": 8.49, "ddtree64_t1": 7.84, "dflash_speedup": 4.78,
              "ddtree_speedup": 6.75},
    "aime25": {"chain": 7.39, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": 5.32,
               "ddtree_speedup": 7.0},
    "humaneval": {"chain": 6.61, "ddtree64": 8.01, "ddtree64_t1": 7.06, "dflash_speedup": 4.84,
                  "ddtree_speedup": 6.9},
    "mbpp": {"chain": None, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": None,
             "ddtree_speedup": 6.4},
    "livecodebench": {"chain": None, "ddtree64": None, "ddtree64_t1": None,
                      "dflash_speedup": None, "ddtree_speedup": 7.1},
    "mt-bench": {"chain": None, "ddtree64": 5.54, "ddtree64_t1": 5.03, "dflash_speedup": 2.56,
                 "ddtree_speedup": 4.10},
    "alpaca": {"chain": 3.12, "ddtree64": None, "ddtree64_t1": None, "dflash_speedup": 2.07,
               "ddtree_speedup": 3.36},
}
#: Datasets with both taus published (the reference set of every derivation ratio).
_REFERENCE = ("math500", "gsm8k", "humaneval")
#: Where the T = 1 value is not published: the published dataset of the same kind whose
#: T = 1 / T = 0 DDTree@64 ratio is applied to the regime's T = 0 target.
T1_NEAREST = {"aime25": "math500", "mbpp": "humaneval", "livecodebench": "humaneval",
              "alpaca": "mt-bench"}


@dataclass(frozen=True)
class Target:
    """The three calibration targets of a regime and where they come from."""

    chain: float
    ddtree64: float
    chain_derivation: str
    ddtree64_derivation: str
    ddtree64_t1: float
    ddtree64_t1_derivation: str

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def derive_targets(published: dict[str, dict[str, float | None]] | None = None
                   ) -> dict[str, Target]:
    r"""Targets for every calibrated regime; unpublished values derived from published ones.

    With the reference set ``R = {math500, gsm8k, humaneval}`` (both taus published):

    * ``g`` = mean over ``R`` of DDTree@64 / chain (the tree's gain at B = 64);
    * ``a`` = mean over ``R`` of (DDTree@64 / chain) / (DDTree best-B speedup / DFlash
      speedup): how the tau gain at B = 64 relates to the published *speedup* gain;
    * ``m`` = mean over ``R`` of DDTree@64 tau / DDTree best-B speedup.

    Then

    * AIME25 (chain published): DDTree@64 = chain · a · (7.0 / 5.32);
    * Alpaca (chain published): DDTree@64 = chain · a · (3.36 / 2.07);
    * MT-Bench (DDTree@64 published): chain = DDTree@64 / (a · (4.10 / 2.56));
    * MBPP, LiveCodeBench (only the DDTree speedup published): DDTree@64 = m · speedup,
      chain = DDTree@64 / g;
    * DDTree@64 at ``T = 1`` where it is not published: the regime's DDTree@64 target times the
      published ``T = 1 / T = 0`` ratio of the nearest published dataset (:data:`T1_NEAREST`:
      AIME25 from MATH-500, MBPP and LiveCodeBench from HumanEval, Alpaca from MT-Bench).

    Parameters
    ----------
    published : dict, optional
        Defaults to :data:`PUBLISHED`.

    Returns
    -------
    dict of str to Target
    """
    pub = PUBLISHED if published is None else published
    ref = [pub[r] for r in _REFERENCE]
    g = float(np.mean([r["ddtree64"] / r["chain"] for r in ref]))
    a = float(np.mean([(r["ddtree64"] / r["chain"])
                       / (r["ddtree_speedup"] / r["dflash_speedup"]) for r in ref]))
    m = float(np.mean([r["ddtree64"] / r["ddtree_speedup"] for r in ref]))
    out: dict[str, Target] = {}
    for name in CALIBRATED_REGIMES:
        p = pub[name]
        chain_v, dd_v = p["chain"], p["ddtree64"]
        c_src = "published (DDTree Table 1, DFlash column)" if chain_v is not None else ""
        d_src = "published (TEV Table 1, DDTree at B = 64)" if dd_v is not None else ""
        if chain_v is not None and dd_v is None:
            s_ratio = p["ddtree_speedup"] / p["dflash_speedup"]
            dd_v = chain_v * a * s_ratio
            d_src = (f"chain x a x (DDTree speedup / DFlash speedup) = {chain_v:g} x {a:.4f} x "
                     f"({p['ddtree_speedup']:g} / {p['dflash_speedup']:g})")
        elif dd_v is not None and chain_v is None:
            s_ratio = p["ddtree_speedup"] / p["dflash_speedup"]
            chain_v = dd_v / (a * s_ratio)
            c_src = (f"DDTree@64 / (a x DDTree speedup / DFlash speedup) = {dd_v:g} / ({a:.4f} x "
                     f"{p['ddtree_speedup']:g} / {p['dflash_speedup']:g})")
        elif chain_v is None and dd_v is None:
            dd_v = m * p["ddtree_speedup"]
            chain_v = dd_v / g
            d_src = f"m x DDTree best-B speedup = {m:.4f} x {p['ddtree_speedup']:g}"
            c_src = f"DDTree@64 / g = {dd_v:.4f} / {g:.4f}"
        t1_v = p["ddtree64_t1"]
        t1_src = "published (TEV Table 1, DDTree at B = 64, T = 1)"
        if t1_v is None:
            ref_pub = pub[T1_NEAREST[name]]
            ratio = ref_pub["ddtree64_t1"] / ref_pub["ddtree64"]
            t1_v = dd_v * ratio
            t1_src = (f"DDTree@64 x {_DATASET[T1_NEAREST[name]]}'s T1/T0 ratio = {dd_v:.4f} x "
                      f"({ref_pub['ddtree64_t1']:g} / {ref_pub['ddtree64']:g})")
        out[name] = Target(round(float(chain_v), 3), round(float(dd_v), 3), c_src, d_src,
                           round(float(t1_v), 3), t1_src)
    return out


# ---------------------------------------------------------------------- families (fixed knobs)
_COMMON: dict[str, object] = dict(
    vocab_size=32768, depth=15, n_topics=32, successors=8, sharpness_spread=1.0,
    zipf_exponent=0.9, topic_strength=1.0, topic_density=1.0, context_burn_in=1, mismatch=0.0,
    boost_noise=0.1, topic_awareness=1.0, degradation=0.0, junk=0.02, correction_quality=0.5,
    variants=4)

#: Fixed knobs per family (the fitted ones are set by :func:`base_spec`). ``math-code``: a sharp
#: target (first-successor log-odds 4 against the whole background, successors 2 nats apart,
#: dominant surface variants), a confident drafter (logits / 0.15) with no misnamed successors,
#: and the DDTree gain set by ``depth_sharpening``. ``chat``: a flatter target (log-odds 2.5,
#: gaps 1.5 nats, near-equal variants), no depth sharpening (chat trees are shallow, so it has
#: little leverage there), and the DDTree gain set by the drafter's ``calibration`` (its logit
#: temperature: a flatter drafter spreads its budget over siblings that rarely pay). Both
#: families draw contexts the way a benchmark's
#: many prompts are diverse: the first token from the unscaled background, then
#: ``context_burn_in = 1`` step of the target (a long T = 1 burn-in of the sharp, fitted target
#: ends on the few cycles of its greedy map: with 4 steps at ``logit_scale = 5`` the per-world
#: DDTree@64 means spread by about 3.5% between worlds, with 1 step by no more than the noise
#: of 300 contexts per world), and a dense topic term (``topic_density = 1``), so that each of
#: the 32 topics has its own successor order (with the sparse topics of the older regimes,
#: greedy paths of different contexts merged onto a few hundred word classes and one world's
#: chain tau was 4-5% away from another's).
FAMILIES: dict[str, dict[str, object]] = {
    "math-code": dict(_COMMON, sharpness=4.0, successor_decay=2.0, calibration=0.15,
                      variant_spread=2.0),
    "chat": dict(_COMMON, sharpness=2.5, successor_decay=1.5, variant_spread=1.0),
}
_FAMILY_OF = {"math500": "math-code", "gsm8k": "math-code", "aime25": "math-code",
              "humaneval": "math-code", "mbpp": "math-code", "livecodebench": "math-code",
              "mt-bench": "chat", "alpaca": "chat"}
#: Starting values of the fitted knobs per family.
_START = {"math-code": {"variant_noise": 0.45, "depth_sharpening": 0.0, "logit_scale": 5.0},
          "chat": {"variant_noise": 0.55, "calibration": 0.35, "logit_scale": 4.5}}
_DATASET = {"math500": "MATH-500", "gsm8k": "GSM8K", "aime25": "AIME25",
            "humaneval": "HumanEval", "mbpp": "MBPP", "livecodebench": "LiveCodeBench",
            "mt-bench": "MT-Bench", "alpaca": "Alpaca"}


def _check_regime_name(name: object) -> str:
    if name not in CALIBRATED_REGIMES:
        raise ValueError(f"unknown calibrated regime {name!r}; known: "
                         f"{', '.join(CALIBRATED_REGIMES)}")
    return str(name)


def base_spec(name: str, **knobs: float) -> RegimeSpec:
    """The regime ``name`` on its family's fixed knobs, with ``knobs`` (fitted ones) set.

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
    desc = (f"{_DATASET[name]} (Qwen3-8B): fitted to chain tau {target.chain:g} and DDTree@64 "
            f"tau {target.ddtree64:g} at T = 0, DDTree@64 tau {target.ddtree64_t1:g} at T = 1")
    params = dict(FAMILIES[fam])
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
    if isinstance(entropy_contexts, bool) or not isinstance(entropy_contexts, int) \
            or entropy_contexts < 0:
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
_NO_DRAWS = np.random.default_rng(0)


# ---------------------------------------------------------------------- fast fit objective
class _FitSet:
    """Fixed worlds and contexts for one pass of a regime's fit (common random numbers).

    The contexts are drawn once, from the spec's target at ``T = 1`` (with its
    ``logit_scale``), and the target's greedy continuations computed once; each trial rebuilds
    only the drafter and shares the target kernels (cached by effective temperature, so a trial
    ``logit_scale`` is safe). The chain is scored by comparing the per-depth
    argmax of the drafter's marginals (``drafter.argmax_marginals``) with the greedy
    continuation: that is the chain's exact ``E[tau]`` at ``T = 0`` (junk and
    ``depth_sharpening`` are monotone per row, so ``world.draft`` has the same argmax up to
    rounding ties, and :func:`evaluate` re-measures on the full path anyway). DDTree@64 is
    scored by ``expected_length`` as in :func:`evaluate`.
    Chain trials are remembered, keyed by the knobs the chain depends on.
    """

    def __init__(self, spec: RegimeSpec, *, contexts: int, world_seeds: Sequence[int],
                 context_seed: int) -> None:
        rng = np.random.default_rng(context_seed)
        self.spec = spec
        self.n_contexts = contexts
        self.world_seeds = tuple(world_seeds)
        self.context_seed = context_seed
        self.ref: list[World] = []
        self.contexts: list[list] = []
        self.greedy: list[np.ndarray] = []
        for seed, n in zip(self.world_seeds, _split(contexts, len(self.world_seeds)),
                           strict=True):
            w = make_world(spec, seed=seed)
            cs = [w.sample_context(rng) for _ in range(n)]
            self.ref.append(w)
            self.contexts.append(cs)
            self.greedy.append(np.stack([greedy_continuation(w, c, spec.depth) for c in cs]))
        self.trials = 0
        self.chain_points: dict[tuple[float, tuple[tuple[str, float], ...]], float] = {}

    def _worlds(self, knobs: dict[str, float]) -> list[World]:
        spec = dataclasses.replace(self.spec, **knobs)
        out = []
        for seed, ref in zip(self.world_seeds, self.ref, strict=True):
            w = make_world(spec, seed=seed)
            w.share_target_kernels(ref)
            out.append(w)
        self.trials += 1
        return out

    def chain_tau(self, variant_noise: float, other: dict[str, float]) -> float:
        """Chain tau at ``variant_noise`` and the other chain-relevant knobs ``other``."""
        key = (variant_noise, tuple(sorted(other.items())))
        if key in self.chain_points:
            return self.chain_points[key]
        taus = []
        depth = self.spec.depth
        worlds = self._worlds({"variant_noise": variant_noise, **other})
        for w, cs, greedy in zip(worlds, self.contexts, self.greedy, strict=True):
            for c, g in zip(cs, greedy, strict=True):
                hit = w.drafter.argmax_marginals(c.topic, c.last_token) == g
                taus.append(1 + (depth if hit.all() else int(np.argmin(hit))))
        self.chain_points[key] = out = float(np.mean(taus))
        return out

    def ddtree_tau(self, knobs: dict[str, float], n: int, temperature: float = 0.0) -> float:
        """DDTree@64 tau with ``knobs`` on the first ``n`` contexts (spread over the worlds).

        ``knobs`` may include ``logit_scale``: the contexts stay those drawn with the fit set's
        own ``logit_scale`` (the outer alternation of :func:`fit_regime` re-draws them).
        """
        taus = []
        worlds = self._worlds(knobs)
        for w, cs, k in zip(worlds, self.contexts, _split(n, len(worlds)), strict=True):
            for c in cs[:k]:
                taus.append(_tau(w, c, "ddtree", BUDGET, temperature))
        return float(np.mean(taus))

    def guess_variant_noise(self, target: float, other: dict[str, float], default: float,
                            roots: Sequence[tuple[float, float]] = ()) -> tuple[float, float]:
        """Start and first step for a chain fit.

        From ``roots`` (this regime's earlier fits: ``(tree knob, variant_noise)``) by linear
        extrapolation in the tree knob when there are any; otherwise the secant through the
        two cached chain points nearest the target (in tau), preferring those with the same
        ``other`` knobs; ``default`` if there are fewer than two.
        """
        lo, hi = KNOB_BOUNDS["variant_noise"]
        if roots and other:
            t = next(iter(other.values()))
            near = sorted(roots, key=lambda r: abs(r[0] - t))[:2]
            x = near[0][1]
            if len(near) == 2 and near[0][0] != near[1][0]:
                (t0, x0), (t1, x1) = near
                x = x0 + (t - t0) * (x1 - x0) / (t1 - t0)
            return min(max(x, lo), hi), 0.01
        same = tuple(sorted(other.items()))
        pts = [(k[0], v, k[1] != same) for k, v in self.chain_points.items()]
        pts = sorted(pts, key=lambda p: (p[2], abs(p[1] - target)))[:2]
        if len(pts) == 2 and pts[0][1] != pts[1][1] and pts[0][0] != pts[1][0]:
            (x0, y0, _), (x1, y1, _) = pts
            slope = (y1 - y0) / (x1 - x0)
            if slope < 0:                                # the chain falls as variant_noise grows
                x = min(max(x0 + (target - y0) / slope, lo), hi)
                return x, max(0.005, min(0.1, 0.5 * abs(x - x0)))
        return default, 0.1


def _solve_monotone(f: Callable[[float], float], target: float, x0: float,
                    bounds: tuple[float, float], *, increasing: bool, step: float,
                    rtol: float = 0.003, max_evals: int = 10,
                    log: Callable[[str], None] = lambda s: None) -> tuple[float, float, int]:
    """Find ``x`` in ``bounds`` with ``f(x) ~ target`` for a monotone ``f``.

    Secant steps from ``x0`` (first step ``step``; each later step at most 4x the previous one
    and 10% past the secant root, so that the root gets bracketed) until the sign changes, then
    the Illinois variant of regula falsi. Stops when ``|f(x) - target| <= rtol * target``, the
    bracket is narrower than 1e-4, or after ``max_evals`` evaluations.

    Returns
    -------
    x, f(x), evaluations : float, float, int
        The evaluated point closest to the target.
    """
    lo_b, hi_b = bounds
    sign = 1.0 if increasing else -1.0
    seen: list[tuple[float, float, float]] = []

    def g(x: float) -> float:                    # increasing in x, root at the target
        y = f(x)
        log(f"    x = {x:.4f}: {y:.4f} (target {target:.4f})")
        seen.append((abs(y - target), x, y))
        return sign * (y - target)

    def done(gx: float) -> bool:
        return abs(gx) <= rtol * abs(target) or len(seen) >= max_evals

    def result() -> tuple[float, float, int]:
        _, x, y = min(seen)
        return x, y, len(seen)

    a = min(max(x0, lo_b), hi_b)
    ga = g(a)
    if done(ga):
        return result()
    b = min(max(a + (-step if ga > 0 else step), lo_b), hi_b)
    if b == a:
        return result()
    gb = g(b)
    while (ga > 0) == (gb > 0):                  # not bracketed yet: extrapolate
        if done(gb):
            return result()
        h = b - a
        slope = (gb - ga) / h
        dx = -1.1 * gb / slope if slope > 0 else 2.0 * h
        if dx * h < 0:                           # the secant points back: keep going forward
            dx = 2.0 * h
        dx = math.copysign(min(abs(dx), 4.0 * abs(h)), dx)
        nxt = min(max(b + dx, lo_b), hi_b)
        if nxt == b:
            return result()                      # at a bound without a sign change
        a, ga = b, gb
        b, gb = nxt, g(nxt)
    side = 0
    while not done(gb) and abs(b - a) > 1e-4:
        c = b - gb * (b - a) / (gb - ga) if gb != ga else 0.5 * (a + b)
        if not min(a, b) < c < max(a, b):
            c = 0.5 * (a + b)
        gc = g(c)
        if (gc > 0) == (gb > 0):
            b, gb = c, gc
            if side == -1:
                ga *= 0.5
            side = -1
        else:
            a, ga = b, gb
            b, gb = c, gc
            side = 1
    return result()


# ---------------------------------------------------------------------- the fit
def _fit_t0(fitset: _FitSet, target: Target, fam: str, values: dict[str, float], n_dd: int,
            log: Callable[[str], None]) -> tuple[float, float, float, float]:
    """Fit the ``T = 0`` knobs on ``fitset`` from the start ``values``.

    ``variant_noise`` is fitted to the chain target; the family's tree knob to the DDTree@64
    target. Where the chain does not depend on the tree knob (``depth_sharpening``) the two
    are 1-D fits in turn; where it does (``calibration``) the tree-knob fit is the outer loop
    and every trial refits ``variant_noise`` to the chain first.

    Returns
    -------
    variant_noise, tree knob, chain tau, DDTree@64 tau : float
        The fitted knobs and the fit set's values there.
    """
    knob, increasing, chain_depends, tree_step = _TREE_KNOB[fam]
    fits: dict[float | None, tuple[float, float]] = {}

    def fit_chain(t: float | None) -> tuple[float, float]:
        other = {knob: t} if chain_depends else {}
        log(f"  variant_noise -> chain tau{f' ({knob} = {t:.4f})' if chain_depends else ''}")
        roots = [(k, v[0]) for k, v in fits.items() if k is not None]
        x0, step = fitset.guess_variant_noise(target.chain, other, values["variant_noise"],
                                              roots)
        vn, ch, _ = _solve_monotone(lambda x: fitset.chain_tau(x, other), target.chain, x0,
                                    KNOB_BOUNDS["variant_noise"], increasing=False, step=step,
                                    log=log)
        fits[t] = (float(vn), ch)
        return fits[t]

    def dd_at(t: float) -> float:
        vn, _ = fit_chain(t) if chain_depends else fits[None]
        return fitset.ddtree_tau({"variant_noise": vn, knob: t}, n_dd)

    if not chain_depends:
        fit_chain(None)
    log(f"  {knob} -> DDTree@64 tau (T = 0)")
    t_fit, dd_fit, _ = _solve_monotone(dd_at, target.ddtree64, values[knob], KNOB_BOUNDS[knob],
                                       increasing=increasing, step=tree_step, log=log)
    vn, chain_fit = fits[t_fit if chain_depends else None]
    return vn, float(t_fit), chain_fit, dd_fit


def fit_regime(name: str, *, contexts: int = DEFAULT_CONTEXTS,
               log: Callable[[str], None] = print, start: dict[str, float] | None = None
               ) -> dict[str, object]:
    """Fit one regime and measure it on fresh seeds; returns its data-file entry.

    Passes of (``T = 0`` knobs by :func:`_fit_t0`, then ``logit_scale`` to DDTree@64 at
    ``T = 1``) on contexts drawn with the current ``logit_scale``, until a pass moves
    ``logit_scale`` by less than 2% or :data:`MAX_PASSES` passes are done.

    Parameters
    ----------
    name : str
        One of :data:`CALIBRATED_REGIMES`.
    contexts : int
        Contexts of the chain fit and of the fresh evaluation; the DDTree fits use half.
    log : callable
        Progress sink (one line per call).
    start : dict, optional
        Starting values of the fitted knobs (e.g. the stored fit); missing ones from the
        family's defaults.
    """
    name = _check_regime_name(name)
    contexts = check_positive_int(contexts, "contexts")
    t0 = time.perf_counter()
    target = derive_targets()[name]
    fam = _FAMILY_OF[name]
    knob = _TREE_KNOB[fam][0]
    values = dict(_START[fam])
    values.update({k: float(v) for k, v in (start or {}).items() if k in FITTED_KNOBS[fam]})
    log(f"[{name}] family {fam}; targets chain {target.chain:g}, DDTree@64 {target.ddtree64:g} "
        f"(T = 0), {target.ddtree64_t1:g} (T = 1); start {values}")
    n_dd = max(1, contexts // 2)
    passes: list[dict[str, object]] = []
    trials = 0
    for p in range(1, MAX_PASSES + 1):
        fitset = _FitSet(base_spec(name, **values), contexts=contexts,
                         world_seeds=FIT_WORLD_SEEDS, context_seed=FIT_CONTEXT_SEED)
        log(f" pass {p}: contexts drawn with logit_scale {values['logit_scale']:.4f}")
        vn, t_fit, chain_fit, dd_fit = _fit_t0(fitset, target, fam, values, n_dd, log)
        values.update({"variant_noise": vn, knob: t_fit})
        alpha0 = values["logit_scale"]
        log("  logit_scale -> DDTree@64 tau (T = 1)")
        alpha, t1_fit, _ = _solve_monotone(
            lambda a, fs=fitset: fs.ddtree_tau({**values, "logit_scale": a}, n_dd, 1.0),
            target.ddtree64_t1, alpha0, KNOB_BOUNDS["logit_scale"], increasing=True,
            step=0.1 * alpha0, log=log)
        values["logit_scale"] = float(alpha)
        trials += fitset.trials
        passes.append({"contexts_logit_scale": round(alpha0, 6), **{
            k: round(v, 6) for k, v in values.items()}, "chain": round(chain_fit, 4),
            "ddtree64": round(dd_fit, 4), "ddtree64_t1": round(t1_fit, 4)})
        if abs(alpha - alpha0) <= 0.02 * alpha0:
            break
    knobs = {k: values[k] for k in FITTED_KNOBS[fam]}
    spec = base_spec(name, **knobs)
    fit_s = time.perf_counter() - t0
    log(f"  fitted {knobs} in {len(passes)} pass(es), {trials} trials, {fit_s:.0f} s; "
        f"evaluating on fresh seeds")
    ev = evaluate(spec, contexts=contexts, world_seeds=EVAL_WORLD_SEEDS,
                  rng=np.random.default_rng(EVAL_CONTEXT_SEED))
    ok = all(_within(getattr(ev, q).mean, getattr(target, q)) for q in QUANTITIES)
    total_s = time.perf_counter() - t0
    log("  achieved " + ", ".join(f"{q} {getattr(ev, q).mean:.3f} ± {getattr(ev, q).se:.3f}"
                                   for q in QUANTITIES)
        + f" ({'within' if ok else 'OUTSIDE'} ±{TOLERANCE:.0%}); {total_s:.0f} s")
    last = passes[-1]
    return {
        "description": spec.description,
        "family": fam,
        "knobs": spec.knobs(),
        "fitted": knobs,
        "target": target.to_dict(),
        "fit": {"chain": last["chain"], "ddtree64": last["ddtree64"],
                "ddtree64_t1": last["ddtree64_t1"], "passes": passes,
                "world_seeds": list(FIT_WORLD_SEEDS), "context_seed": FIT_CONTEXT_SEED,
                "contexts_chain": contexts, "contexts_ddtree64": n_dd,
                "trials": trials, "seconds": round(fit_s, 1)},
        "achieved": {**ev.to_dict(), "context_seed": EVAL_CONTEXT_SEED, "contexts": contexts},
        "within_tolerance": ok,
        "seconds": round(total_s, 1),
    }


def _within(value: float, target: float, tol: float = TOLERANCE) -> bool:
    return abs(value - target) <= tol * target


def _load(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}


def _git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


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
    data = _load(Path(out))
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
                  "Targets: Qwen3-8B, argmax-chain tau (L = 15, T = 0) and DDTree tau at "
                  "B = 64 (exact E[tau], rule follow) at T = 0 and T = 1. 'achieved' is "
                  "measured on fresh seeds."),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m treespec_sim.calibrate " + " ".join(sys.argv[1:]),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "budget": BUDGET,
        "tolerance": TOLERANCE,
        "fitted_knobs": {f: list(k) for f, k in FITTED_KNOBS.items()},
        "families": FAMILIES,
        "seeds": {"fit_world_seeds": list(FIT_WORLD_SEEDS), "fit_context_seed": FIT_CONTEXT_SEED,
                  "eval_world_seeds": list(EVAL_WORLD_SEEDS),
                  "eval_context_seed": EVAL_CONTEXT_SEED},
        "last_run_seconds": round(time.perf_counter() - t0, 1),
        "regimes": ordered,
    }
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return data


def check(regimes: Sequence[str] | None = None, *, contexts: int = 1000,
          path: Path | str = CALIBRATION_FILE, seed: int = CHECK_CONTEXT_SEED,
          log: Callable[[str], None] = print) -> dict[str, Evaluation]:
    """Re-evaluate the stored fit on fresh seeds (no refit) and print target vs achieved.

    One line per regime: per quantity the target, the stored achieved value and the new one
    (mean ± s.e. over contexts, pooled over :data:`CHECK_WORLD_SEEDS`), then the per-world
    means of the new evaluation and whether all three are within :data:`TOLERANCE`.

    Returns the new evaluations; ``ValueError`` if a regime is unknown or not in the file.
    """
    data = _load(Path(path))
    stored = data.get("regimes", {})
    names = list(CALIBRATED_REGIMES if regimes is None else regimes)
    for r in names:
        _check_regime_name(r)
        if r not in stored:
            raise ValueError(f"regime {r!r} is not in the calibration file {path}")
    contexts = check_positive_int(contexts, "contexts")
    out: dict[str, Evaluation] = {}
    short = {"chain": "chain", "ddtree64": "DD@64 T0", "ddtree64_t1": "DD@64 T1"}
    log(f"{'regime':<14} " + "  ".join(f"{short[q] + ' tgt':>12} {'stored':>12} {'now':>12}"
                                       for q in QUANTITIES) + "  ok  per-world now (T1)")
    for r in names:
        e = stored[r]
        spec = RegimeSpec(**e["knobs"])
        ev = evaluate(spec, contexts=contexts, world_seeds=CHECK_WORLD_SEEDS,
                      rng=np.random.default_rng(seed), entropy_contexts=0)
        out[r] = ev
        t, a = e["target"], e["achieved"]
        ok = all(_within(getattr(ev, q).mean, t[q]) for q in QUANTITIES if q in t)

        def pm(d: dict | None) -> str:
            return "-" if d is None else f"{d['mean']:.2f} ± {d['se']:.2f}"

        cells = [f"{t.get(q, math.nan):>12.2f} {pm(a.get(q)):>12} "
                 f"{pm(getattr(ev, q).to_dict()):>12}" for q in QUANTITIES]
        worlds = " ".join(f"{x:.2f}" for x in ev.per_world["ddtree64_t1"])
        log(f"{r:<14} " + "  ".join(cells) + f"  {'yes' if ok else 'NO '}  {worlds}")
    return out


def calibration_rows(data: dict | None = None, regimes: Iterable[str] | None = None
                     ) -> list[dict[str, object]]:
    """The stored fit, one flat dict per regime (in :data:`CALIBRATED_REGIMES` order).

    Parameters
    ----------
    data : dict, optional
        The parsed calibration file; defaults to the package's (:data:`CALIBRATION_FILE`).
    regimes : iterable of str, optional
        Keep only these; names that are not calibrated (or not in ``data``) are skipped.

    Returns
    -------
    list of dict
        Keys ``regime``, ``family``; per quantity ``q`` in :data:`QUANTITIES`:
        ``q_target``, ``q_published`` (the target is published, not derived), ``q_mean``,
        ``q_se``, ``q_n``, ``q_within`` (achieved mean within :data:`TOLERANCE` of the target),
        ``q_worlds`` (per-world means); ``within`` (all three), ``world_seeds``,
        ``context_seed`` (of the achieved values), ``entropy_t1`` (token-entropy quantiles at
        ``T = 1``) and ``knobs`` (the regime's full knob dict).
    """
    if data is None:
        data = _load(CALIBRATION_FILE)
    keep = None if regimes is None else set(regimes)
    stored = data.get("regimes", {})
    out: list[dict[str, object]] = []
    for name in CALIBRATED_REGIMES:
        e = stored.get(name)
        if e is None or (keep is not None and name not in keep):
            continue
        t, a = e["target"], e["achieved"]
        row: dict[str, object] = {"regime": name, "family": e["family"]}
        for q in QUANTITIES:
            if q not in t or q not in a:        # a file from before the T = 1 fit
                continue
            row[f"{q}_target"] = t[q]
            row[f"{q}_published"] = t[f"{q}_derivation"].startswith("published")
            row[f"{q}_mean"] = a[q]["mean"]
            row[f"{q}_se"] = a[q]["se"]
            row[f"{q}_n"] = a[q]["n"]
            row[f"{q}_within"] = _within(a[q]["mean"], t[q])
            row[f"{q}_worlds"] = list(a.get("per_world", {}).get(q, []))
        row["within"] = all(row.get(f"{q}_within", False) for q in QUANTITIES)
        row["world_seeds"] = list(a.get("world_seeds", []))
        row["context_seed"] = a.get("context_seed")
        row["entropy_t1"] = dict(a.get("entropy_t1", {}))
        row["knobs"] = e["knobs"]
        out.append(row)
    return out


def calibration_table(data: dict) -> str:
    """The stored fit as a Markdown table (target vs achieved ± s.e., fitted knobs)."""
    head = " | ".join(f"{QUANTITY_LABELS[q]} target | achieved ± se (per world)"
                      for q in QUANTITIES)
    rows = [f"| regime | family | {head} | variant_noise | depth_sharpening | calibration | "
            "logit_scale |", "|---|---|" + "---|---|" * len(QUANTITIES) + "---|---|---|---|"]
    for r in calibration_rows(data):
        k = r["knobs"]
        cells = []
        for q in QUANTITIES:
            if f"{q}_target" not in r:
                cells.append("- | -")
                continue
            star = "" if r[f"{q}_published"] else "*"
            flag = "" if r[f"{q}_within"] else " (outside ±5%)"
            worlds = " / ".join(f"{x:.2f}" for x in r[f"{q}_worlds"])
            cells.append(f"{r[f'{q}_target']:.2f}{star} | "
                         f"{r[f'{q}_mean']:.2f} ± {r[f'{q}_se']:.2f}{flag} ({worlds})")
        rows.append(f"| {r['regime']} | {r['family']} | " + " | ".join(cells) + " | "
                    f"{k['variant_noise']:.4f} | {k['depth_sharpening']:.4f} | "
                    f"{k['calibration']:.3f} | {k.get('logit_scale', 1.0):.3f} |")
    return "\n".join(rows)


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
                         f"1000 for --check)")
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
    add_debug(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _main)


def _main(args: argparse.Namespace) -> int:
    for r in args.regimes:
        _check_regime_name(r)
    if args.contexts is not None and args.contexts < 1:
        raise ValueError(f"--contexts must be >= 1; got {args.contexts}")
    if args.table:
        print(calibration_table(_load(args.file)))
    elif args.check:
        check(args.regimes, contexts=1000 if args.contexts is None else args.contexts,
              path=args.file, seed=args.seed)
    else:
        fit(args.regimes, out=args.file, workers=args.workers,
            contexts=DEFAULT_CONTEXTS if args.contexts is None else args.contexts)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
