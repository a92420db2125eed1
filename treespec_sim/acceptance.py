r"""Acceptance logs: hold them against a regime, fit one, and predict another tree's gain.

An engine or a research tool keeps, per decoded round (or per request, or per logging window),
how many tokens the rounds committed; :mod:`treespec_sim.acceptance_readers` reads them in the
formats people have (vLLM's and SGLang's metrics, Spec-Bench, AIPerf, the DDTree/TEV/CaDDTree
and JetSpec logs) into :class:`AcceptanceLog` values that say what the log determines and what
it does not. This module answers the questions a log is read for:

* **how close is a regime** (:func:`regime_distribution`, :func:`compare`): a regime's exact
  acceptance-length law for what the log drafted, beside the log's (total variation, the largest
  CDF gap, the means with their intervals);
* **which regime is it** (:func:`fit_log`): a regime's knobs fitted to the log's whole law (or
  its mean, where that is all it holds), with the distance it reached and a warning above
  :data:`FIT_WARN_TV` / :data:`FIT_WARN_CDF_GAP`;
* **what would another tree give** (:func:`predict`): the tokens per round (and per second,
  under a latency model) of DDTree at ``B`` or CaDDTree, with an interval that includes what the
  log cannot identify. A chain's log fixes the chain's law, not how much mass the drafter's
  second and third candidates hold -- the part a tree recovers. Each calibrated regime is one
  structure of drafter and target; refitted to the log through a near-miss knob
  (``variant_noise``: misses whose right token is a sibling, which a tree recovers) or a
  hard-miss knob (``hard_miss``: misses no tree recovers), each structure consistent with the
  log gives one prediction, and the interval spans them (with each one's between-world
  interval): the log's silence, made visible.

What the log does not say must be given: the decode's temperature (``temperature``; the
worlds' target is tempered by it) and the drafter's kind (``drafter``): the worlds model a
*block-diffusion* drafter's per-depth marginals; an *autoregressive* drafter (EAGLE, an MTP
head) is modelled by the same world's drafter asked for its conditionals (``correction_quality
= 1``), its chain the greedy chain of those (method ``ar-chain``) and "DDTree at ``B``" DDTree's
best-first rule on its conditional path scores (``ar-ddtree``, an EAGLE-2-style tree).

Under rule ``follow`` a round's accepted path ends at depth ``d`` with the exit mass at depth
``d`` (:attr:`treespec_sim.engine.Round.exits`), so a regime's law is exact per context and its
mean over contexts is the regime's histogram (no sampling).

Command line (``docs/engine_logs.md``)::

    python -m treespec_sim.acceptance show LOG
    python -m treespec_sim.acceptance compare LOG --temperature 0 --drafter autoregressive \
           --predict ddtree --budget 64 [--cost-model h200-qwen3-8b] [--json]
    python -m treespec_sim.acceptance compare LOG --regime math500 --out runs/cmp
    python -m treespec_sim.acceptance fit LOG --temperature 0 --drafter block-diffusion \
           --fit-out fitted.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .acceptance_readers import (
    DEFAULT_WIDTH,
    FORMATS,
    AcceptanceLog,
    read_log,
    read_logs,
)
from .cli import (
    OneLineParser,
    add_debug,
    add_json_flag,
    add_seed,
    positive_int,
    run_subcommand,
    temperature,
)
from .cost import get_cost_model
from .engine import run_round
from .files import atomic_write_text
from .policies import chain
from .stats import MeanCI, mean_ci, world_ci
from .synth import REGIMES, RegimeSpec, make_world, resolve_regime
from .synth.regimes import CALIBRATION_FILE, load_calibrated
from .torch_save import Record, load_torch_save
from .validation import check_positive_int, check_rng, check_temperature

__all__ = ["DEFAULT_WIDTH", "DRAFTERS", "FIT_WARN_CDF_GAP", "FIT_WARN_TV", "FORMATS",
           "PREDICT_KNOBS", "AcceptanceLog", "Candidate", "Comparison", "Distribution",
           "Drafted", "LogFit", "Prediction", "Record", "WorldSet", "chain_prefix", "compare",
           "compare_markdown", "drafter_spec", "fit_log", "guess_method", "load_torch_save",
           "main", "plot_comparison", "predict", "prediction_markdown", "read_log", "read_logs",
           "regime_distribution", "resolve_regime", "trace_distribution", "tv_noise",
           "write_fit"]

#: The drafters a log can come from, and the knobs that make a regime's drafter of that kind.
DRAFTERS = {"block-diffusion": {}, "autoregressive": {"correction_quality": 1.0}}
#: A fit farther from the log than this total variation, or ...
FIT_WARN_TV = 0.05
#: ... than this largest gap between the two CDFs, is flagged (and, in :func:`predict`, a
#: structure that cannot come this close is not consistent with the log).
FIT_WARN_CDF_GAP = 0.05
#: A mean-only log: a structure is consistent when its mean is this close (relative), or
#: within the log's interval.
MEAN_TOLERANCE = 0.02
#: The knobs :func:`predict` moves to make each structure reproduce the log: near misses (a
#: tree recovers them) and hard misses (no tree does), with their search ranges.
PREDICT_KNOBS = {"variant_noise": (0.0, 3.0), "hard_miss": (0.0, 0.5)}


def drafter_spec(spec: RegimeSpec, drafter: str) -> RegimeSpec:
    """``spec`` with the drafter knobs of ``drafter`` (:data:`DRAFTERS`)."""
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter: {drafter!r} is not one of {', '.join(DRAFTERS)}")
    return dataclasses.replace(spec, **DRAFTERS[drafter]) if DRAFTERS[drafter] else spec


def chain_prefix(log_q, budget: int | None, *, root_token: int = -1):
    """The DFlash chain's first ``budget`` positions (an engine drafting ``k < L`` tokens from
    a block-diffusion drafter): :func:`treespec_sim.policies.chain` with ``length=budget``."""
    return chain(log_q, budget, root_token=root_token)


# ----------------------------------------------------------------------------- what was drafted
@dataclass(frozen=True)
class Drafted:
    """What a log's rounds drafted, as treespec runs it: the regime reproduces this.

    Attributes
    ----------
    method : str
        ``"chain"``, ``"ddtree"`` or ``"caddtree"``.
    budget : int or None
        DDTree's budget, CaDDTree's maximum, a chain's length (``None``: the drafter's ``L``).
    rule : str
        The verification rule (``follow``; ``tev`` where the log names TEV).
    drafter : str
        ``"block-diffusion"`` or ``"autoregressive"`` (:data:`DRAFTERS`).
    """

    method: str
    budget: int | None = None
    rule: str = "follow"
    drafter: str = "block-diffusion"

    def __post_init__(self) -> None:
        if self.method not in ("chain", "ddtree", "caddtree"):
            raise ValueError(f"drafted: method {self.method!r} is not chain, ddtree or caddtree")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter: {self.drafter!r} is not one of {', '.join(DRAFTERS)}")
        if self.budget is not None:
            check_positive_int(self.budget, "drafted budget")
        if self.method != "chain" and self.budget is None:
            raise ValueError(f"drafted: {self.method} needs a budget")

    @property
    def label(self) -> str:
        b = "" if self.budget is None else f"@{self.budget}"
        return f"{self.method}{b}" + (" (autoregressive)" if self.drafter == "autoregressive"
                                      else "")

    def run_args(self) -> tuple[str | Callable, int | None]:
        """``(method, budget)`` for :func:`~treespec_sim.engine.run_round`."""
        ar = self.drafter == "autoregressive"
        if self.method == "chain":
            if ar:
                return "ar-chain", self.budget
            return ("chain", None) if self.budget is None else (chain_prefix, self.budget)
        if self.method == "ddtree":
            return ("ar-ddtree" if ar else "ddtree"), self.budget
        if ar:
            raise ValueError("caddtree stops DDTree's pop order of a block-diffusion drafter by "
                             "its surrogate; it is not defined here for an autoregressive "
                             "drafter (predict ddtree at a budget instead)")
        return "caddtree", self.budget

    @classmethod
    def parse(cls, text: str, drafter: str = "block-diffusion") -> Drafted:
        """``"chain"``, ``"chain@3"``, ``"ddtree@64"``, ``"caddtree@1024"``."""
        m = re.fullmatch(r"(chain|ddtree|caddtree)(?:@(\d+))?", str(text).strip())
        if not m:
            raise ValueError(f"drafted: {text!r} is not chain, chain@K, ddtree@B or caddtree@B")
        return cls(m.group(1), int(m.group(2)) if m.group(2) else None, "follow", drafter)


def guess_method(log: AcceptanceLog, drafter: str = "block-diffusion") -> Drafted:
    """What a log's rounds drafted (:class:`Drafted`), from its method key and format.

    ``dflash`` -> the chain; ``..tb<B>`` -> DDTree at ``B`` (rule ``tev`` when the key names
    TEV); ``caddtree`` -> CaDDTree at the log's ``max_tree_budget``; a JetSpec tree log ->
    DDTree at its median tree size (JetSpec's own builder differs: an approximation,
    overridable); an engine's log (vLLM, SGLang, AIPerf, Spec-Bench) -> a chain of the log's
    width (vLLM verifies chains; SGLang and Spec-Bench do not say: ``--drafted`` overrides).
    ``ValueError`` for the autoregressive ``baseline``.
    """
    key = log.method
    rule = "tev" if "tev" in key.lower() else "follow"
    if key == "baseline":
        raise ValueError("method 'baseline' is autoregressive decoding (every round commits 1 "
                         "token); name a speculative method of the log")
    if log.source in ("benchmark", "caddtree-traces", "jetspec"):
        m = re.fullmatch(r".*tb(\d+)", key)
        if m:
            return Drafted("ddtree", int(m.group(1)), rule, drafter)
        if key.startswith("caddtree"):
            args = log.meta.get("args") or {}
            return Drafted("caddtree", int(args.get("max_tree_budget", 1024)), rule, drafter)
        if log.budgets is not None and key != "dflash":
            return Drafted("ddtree", max(1, int(np.median(log.budgets))), rule, drafter)
        return Drafted("chain", None, rule, drafter)
    return Drafted("chain", log.width, "follow", drafter)


# ----------------------------------------------------------------------------- regimes' laws
@dataclass(frozen=True)
class Distribution:
    """A model's acceptance-length law for one method: exact per context, averaged.

    Attributes
    ----------
    label : str
    probs : ndarray float64 (L+1,)
        ``probs[k - 1] = P(tau = k)``, the mean over contexts of the exact per-context law.
    taus : ndarray float64 (n,)
        Each context's exact ``E[tau]`` under ``rule`` (under a rule other than ``follow`` the
        histogram is of one sampled outcome per context, the means stay exact).
    units : ndarray int64 (n,)
        The unit of each context for intervals (its own index, or a trace's prompt).
    method, budget, temperature, rule
        What was run.
    world : ndarray int64 (n,) or None
        The world of each context (synthetic regimes), for between-world intervals.
    seconds : ndarray float64 (n,) or None
        Each round's modelled seconds under a latency model (when one was given).
    """

    label: str
    probs: np.ndarray
    taus: np.ndarray
    units: np.ndarray
    method: str
    budget: int | None
    temperature: float
    rule: str = "follow"
    world: np.ndarray | None = None
    seconds: np.ndarray | None = None

    def mean(self) -> MeanCI:
        return mean_ci([self.taus[self.units == u] for u in dict.fromkeys(self.units.tolist())])

    def world_means(self) -> np.ndarray:
        """Mean ``tau`` of each world, float64 ``(k,)``."""
        if self.world is None:
            raise ValueError(f"{self.label}: no worlds (a trace's law)")
        return np.array([self.taus[self.world == w].mean() for w in np.unique(self.world)])

    def world_throughputs(self) -> np.ndarray:
        """Tokens per second of each world, ``sum tau / sum seconds`` (renewal-reward)."""
        if self.seconds is None or self.world is None:
            raise ValueError(f"{self.label}: no latency model was given")
        return np.array([self.taus[self.world == w].sum() / self.seconds[self.world == w].sum()
                         for w in np.unique(self.world)])


def _round_probs(rnd, depth: int, rule: str) -> np.ndarray:
    if rule == "follow":
        return np.asarray(rnd.exits.by_depth, dtype=np.float64)[: depth + 1]
    out = np.zeros(depth + 1)
    out[rnd.outcome.tau - 1] = 1.0
    return out


def _contexts_law(backend, contexts, *, method, budget: int | None, temperature: float,
                  rule: str, rng: np.random.Generator, cost
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    depth = int(backend.depth)
    probs, taus, secs = [], [], []
    for ctx in contexts:
        rnd = run_round(backend, ctx, method=method, budget=budget, rule=rule,
                        temperature=temperature, rng=rng, sample=rule != "follow", cost=cost)
        probs.append(_round_probs(rnd, depth, rule))
        taus.append(float(rnd.expected_tau))  # exact under every rule
        secs.append(rnd.cost_s)
    return np.array(probs), np.array(taus), (None if cost is None else np.array(secs))


#: The knobs of a regime's drafter: a trial that moves only these keeps the target (and its
#: contexts). ``hard_miss`` renames drafter successor slots (:mod:`treespec_sim.synth.world`).
_DRAFTER_KNOBS = frozenset({"name", "description", "mismatch", "boost_noise", "topic_awareness",
                            "calibration", "degradation", "junk", "correction_quality",
                            "variant_noise", "depth_sharpening", "hard_miss"})


def _same_target(a: RegimeSpec, b: RegimeSpec) -> bool:
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a)
               if f.name not in _DRAFTER_KNOBS)


class WorldSet:
    """A regime's worlds and their contexts, fixed for every trial of drafter knobs.

    ``contexts`` fresh contexts split over ``worlds`` worlds (seeds ``seed + i``, contexts from
    ``default_rng([seed + i, stream])``). A trial spec whose target is the regime's (only
    drafter knobs moved, ``hard_miss`` among them) is built on the same seeds, shares the
    reference worlds' target kernels and runs on the same contexts: common random numbers, and
    the per-topic target tables built once. A trial that moves a target knob
    (``logit_scale``, ``sharpness``, ...) gets its own worlds and contexts drawn from its own
    target on the same seeds and streams.

    Parameters
    ----------
    spec : RegimeSpec
    contexts, worlds, seed : int
    vocab_size, depth : int, optional
        Override ``V`` (a smaller world is faster) and ``L``.
    stream : int
        The context stream (17: :func:`regime_distribution`'s; another gives fresh contexts on
        the same worlds).
    """

    def __init__(self, spec: RegimeSpec, *, contexts: int = 128, worlds: int = 2,
                 seed: int = 0, vocab_size: int | None = None, depth: int | None = None,
                 stream: int = 17) -> None:
        n = check_positive_int(contexts, "contexts")
        k = check_positive_int(worlds, "worlds")
        if n < k:
            raise ValueError(f"contexts ({n}) must be at least worlds ({k})")
        self.spec = spec
        self.seed = int(seed)
        self.vocab_size, self.depth, self.stream = vocab_size, depth, stream
        self.ref, self.contexts, self.states = [], [], []
        for i in range(k):
            w = make_world(spec, seed=self.seed + i, vocab_size=vocab_size, depth=depth)
            rng = np.random.default_rng([self.seed + i, stream])
            m = n // k + (i < n % k)
            self.contexts.append([w.sample_context(rng) for _ in range(m)])
            self.states.append(rng.bit_generator.state)
            self.ref.append(w)

    def law(self, trial: RegimeSpec | None = None, *, method: str | Callable = "ddtree",
            budget: int | None = 64, temperature: float = 0.0, rule: str = "follow",
            cost: Any = None, label: str | None = None) -> Distribution:
        """The law of ``trial`` (default the regime itself) on these worlds' contexts."""
        spec = self.spec if trial is None else trial
        t = check_temperature(temperature)
        probs, taus, secs, world = [], [], [], []
        shared = _same_target(spec, self.spec)
        for i, (ref, ctxs, state) in enumerate(zip(self.ref, self.contexts, self.states,
                                                   strict=True)):
            w = ref
            rng = np.random.default_rng()
            rng.bit_generator.state = state
            if spec != self.spec:
                w = make_world(spec, seed=self.seed + i, vocab_size=self.vocab_size,
                               depth=self.depth)
                if shared:
                    w.share_target_kernels(ref)
                else:
                    rng = np.random.default_rng([self.seed + i, self.stream])
                    ctxs = [w.sample_context(rng) for _ in ctxs]
            p, tau, sec = _contexts_law(w, ctxs, method=method, budget=budget, temperature=t,
                                        rule=rule, rng=rng, cost=cost)
            probs.append(p)
            taus.append(tau)
            secs.append(sec)
            world.append(np.full(tau.size, i, dtype=np.int64))
        probs_all = np.concatenate(probs)
        name = getattr(method, "__name__", method)
        return Distribution(label or f"{spec.name} ({name}"
                            f"{'' if budget is None else f'@{budget}'}, T = {t:g})",
                            probs_all.mean(axis=0), np.concatenate(taus),
                            np.arange(probs_all.shape[0]), str(name), budget, t, rule,
                            np.concatenate(world),
                            None if cost is None else np.concatenate(secs))


def regime_distribution(regime: str | RegimeSpec, *, method: str | Callable = "ddtree",
                        budget: int | None = 64, temperature: float = 0.0, rule: str = "follow",
                        contexts: int = 128, worlds: int = 2, seed: int = 0,
                        vocab_size: int | None = None, depth: int | None = None,
                        cost: Any = None, drafter: str | None = None) -> Distribution:
    """A regime's acceptance-length law for ``method`` at ``budget`` and ``temperature``.

    ``contexts`` fresh contexts split over ``worlds`` worlds (:class:`WorldSet`); under
    ``follow`` each context's law is exact (its exit mass by depth), under another rule it is
    the sampled outcome (one per context).

    Parameters
    ----------
    regime : str or RegimeSpec
        A name, a spec or a fitted regime's file (:func:`~treespec_sim.synth.resolve_regime`).
    method : str or callable
        A registered method or a builder callable (:func:`chain_prefix`).
    vocab_size, depth : int, optional
        Override ``V`` (a smaller world is faster) and ``L`` (to match a log's block depth).
    cost : latency model or name, optional
        For cost-aware methods (``caddtree``) and each round's modelled seconds.
    drafter : str, optional
        A drafter kind of :data:`DRAFTERS` whose knobs are applied to the regime.

    Returns
    -------
    Distribution
    """
    spec = resolve_regime(regime)
    if drafter is not None:
        spec = drafter_spec(spec, drafter)
    if isinstance(cost, str):
        cost = get_cost_model(cost)
    return WorldSet(spec, contexts=contexts, worlds=worlds, seed=seed, vocab_size=vocab_size,
                    depth=depth).law(method=method, budget=budget, temperature=temperature,
                                     rule=rule, cost=cost)


def trace_distribution(trace, *, method: str = "ddtree", budget: int | None = 64,
                       temperature: float = 0.0, rule: str = "follow", cost: Any = None,
                       rng: np.random.Generator | None = None) -> Distribution:
    """A trace's acceptance-length law: the exact law of every recorded round, averaged
    (units: the recorded prompts; ``docs/traces.md``)."""
    rng = np.random.default_rng(0) if rng is None else check_rng(rng)
    p, tau, secs = _contexts_law(trace, trace.contexts, method=method, budget=budget,
                                 temperature=check_temperature(temperature), rule=rule,
                                 rng=rng, cost=cost)
    units = np.array([c.prompt for c in trace.contexts], dtype=np.int64)
    name = f"trace {Path(str(trace.header.get('models', {}).get('target', '?'))).name}"
    return Distribution(f"{name} ({method}{'' if budget is None else f'@{budget}'}, "
                        f"T = {temperature:g})", p.mean(axis=0), tau, units, method, budget,
                        float(temperature), rule, None, secs)


# ----------------------------------------------------------------------------- comparison
def _pad(p: np.ndarray, m: int) -> np.ndarray:
    out = np.zeros(m)
    out[: p.size] = p
    return out


@dataclass(frozen=True)
class Comparison:
    """A log's law (or mean) beside a model's law.

    Attributes
    ----------
    log_label, model_label : str
    log_probs, model_probs : ndarray float64 (m,)
        Over ``tau = 1..m`` (``m`` the longer support); ``log_probs`` is ``nan`` for a log of
        means only.
    log_counts : ndarray float64 (m,)
        The log's rounds per ``tau`` (``nan`` where it holds means only).
    log_mean, model_mean : MeanCI
        Means with 95% t-intervals (over the log's units; over contexts or a trace's prompts).
    tv : float
        Total variation distance ``(1/2) sum |p - q|`` (``nan`` for a mean-only log).
    ks : float
        The largest gap between the two CDFs (``nan`` for a mean-only log).
    cvm : float
        ``sum_k (F_log(k) - F_model(k))^2`` (what :func:`fit_log` minimises); for a mean-only
        log the squared difference of the means.
    """

    log_label: str
    model_label: str
    log_probs: np.ndarray
    model_probs: np.ndarray
    log_counts: np.ndarray
    log_mean: MeanCI
    model_mean: MeanCI
    tv: float
    ks: float
    cvm: float

    @property
    def law(self) -> bool:
        """Whether the log's law was compared (not only its mean)."""
        return bool(np.all(np.isfinite(self.log_probs)))

    def warning(self) -> str | None:
        """A sentence when the model is far from the log (:data:`FIT_WARN_TV`,
        :data:`FIT_WARN_CDF_GAP`), else ``None``."""
        if not self.law:
            return None
        bad = []
        if self.tv > FIT_WARN_TV:
            bad.append(f"total variation {self.tv:.3f} > {FIT_WARN_TV:g}")
        if self.ks > FIT_WARN_CDF_GAP:
            bad.append(f"largest CDF gap {self.ks:.3f} > {FIT_WARN_CDF_GAP:g}")
        if not bad:
            return None
        return (f"the model does not reproduce the log's law ({', '.join(bad)}): its "
                "predictions rest on a poor fit")

    def to_dict(self) -> dict:
        def arr(a: np.ndarray) -> list:
            return [None if not math.isfinite(x) else float(x) for x in a]

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {"log": self.log_label, "model": self.model_label,
                "log_probs": arr(self.log_probs), "model_probs": arr(self.model_probs),
                "log_counts": arr(self.log_counts), "log_mean": self.log_mean.to_dict(),
                "model_mean": self.model_mean.to_dict(), "tv": num(self.tv),
                "cdf_gap": num(self.ks), "cvm": num(self.cvm), "warning": self.warning()}


def _distances(p: np.ndarray, q: np.ndarray) -> tuple[float, float, float]:
    m = max(p.size, q.size)
    p, q = _pad(p, m), _pad(q, m)
    gap = np.cumsum(p) - np.cumsum(q)
    return float(0.5 * np.abs(p - q).sum()), float(np.abs(gap).max()), float((gap ** 2).sum())


def _log_label(log: AcceptanceLog) -> str:
    rounds = "" if log.rounds is None else f"{log.rounds:.0f} rounds, "
    return (f"{Path(log.path).name}: {log.method} ({FORMATS[log.source]}; {rounds}"
            f"{log.responses} {log.unit_name}{'s' if log.responses != 1 else ''})")


def compare(log: AcceptanceLog | Distribution, model: Distribution) -> Comparison:
    """A log's (or a trace's) acceptance-length law beside a model's (a log of means only:
    its mean beside the model's)."""
    if isinstance(log, AcceptanceLog):
        label, lmean = _log_label(log), log.mean()
        if not log.determines_law:
            m = model.probs.size
            nan = np.full(m, np.nan)
            return Comparison(label, model.label, nan, model.probs, nan, lmean, model.mean(),
                              math.nan, math.nan, (lmean.mean - model.mean().mean) ** 2)
        lp, counts = log.probs(), log.histogram()
    else:
        lp, counts, label, lmean = log.probs, np.full(log.probs.size, np.nan), log.label, \
            log.mean()
    m = max(lp.size, model.probs.size)
    tv, ks, cvm = _distances(lp, model.probs)
    return Comparison(label, model.label, _pad(lp, m), _pad(model.probs, m), _pad(counts, m),
                      lmean, model.mean(), tv, ks, cvm)


def compare_markdown(c: Comparison, *, unit: str = "unit") -> str:
    """The comparison as a Markdown table: per ``tau``, the log's rounds and share beside the
    model's, then the means and the distances."""
    lines = [f"Log: {c.log_label}", f"Model: {c.model_label}", ""]
    if c.law:
        lines += ["| τ (tokens per round) | log rounds | log share | model share | difference |",
                  "|---:|---:|---:|---:|---:|"]
        for k in range(c.log_probs.size):
            n = c.log_counts[k]
            rounds = "" if not math.isfinite(n) else (f"{n:.0f}" if abs(n - round(n)) < 1e-9
                                                      else f"{n:.1f}")
            lines.append(f"| {k + 1} | {rounds} | {c.log_probs[k]:.3f} | "
                         f"{c.model_probs[k]:.3f} | {c.log_probs[k] - c.model_probs[k]:+.3f} |")
        dist = (f"Total variation {c.tv:.3f}, largest CDF gap {c.ks:.3f}, Σ (CDF gap)² "
                f"{c.cvm:.4f}.")
    else:
        dist = ("The log holds means only: no law to compare (total variation and CDF gap "
                "undefined).")
    lines += ["", f"Mean τ: log {c.log_mean.text(unit=unit)} (95% t-interval over its {unit}s), "
              f"model {c.model_mean.text(unit='context')} (95% t-interval over its contexts). "
              + dist, ""]
    w = c.warning()
    if w:
        lines += [f"WARNING: {w}.", ""]
    return "\n".join(lines)


def plot_comparison(c: Comparison, path: Path | str, *,
                    names: tuple[str, str] = ("log", "model")) -> None:
    """Two panels: the histogram (``names[0]``'s bars, ``names[1]``'s markers) and the two
    CDFs (``P(tau <= k)``, a step at each integer ``k``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = np.arange(1, c.model_probs.size + 1)
    lp = np.nan_to_num(c.log_probs)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    a.bar(k, lp, width=0.8, color="tab:blue", alpha=0.7,
          label=f"{names[0]}: mean {c.log_mean.mean:.2f}")
    a.plot(k, c.model_probs, "o-", color="tab:red", ms=4,
           label=f"{names[1]}: mean {c.model_mean.mean:.2f}")
    a.set_xlabel("τ: tokens committed per round (bonus counted)")
    a.set_ylabel("share of rounds")
    a.set_title("acceptance-length histogram", fontsize=10)
    a.legend(fontsize=8)
    a.grid(alpha=0.3, axis="y")
    kk = np.append(k, k[-1] + 1)
    if c.law:
        b.step(kk, np.append(np.cumsum(lp), 1.0), where="post", color="tab:blue",
               label=names[0])
    b.step(kk, np.append(np.cumsum(c.model_probs), 1.0), where="post", color="tab:red",
           label=names[1])
    b.set_xlim(0.8, k[-1] + 0.5)
    b.set_xlabel("τ")
    b.set_ylabel("P(τ ≤ k)")
    b.set_ylim(0, 1.02)
    b.set_title(f"CDFs: total variation {c.tv:.3f}, largest gap {c.ks:.3f}", fontsize=10)
    b.legend(fontsize=8)
    b.grid(alpha=0.3)
    fig.suptitle(f"{c.log_label}\nvs {c.model_label}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- targets
def tv_noise(probs: np.ndarray, n: float) -> float:
    r"""The total variation an empirical histogram of ``n`` independent rounds keeps from its
    own law ``probs``, to first order:
    :math:`\tfrac12 \sum_k \sqrt{2 p_k (1 - p_k) / (\pi n)}` (the mean absolute deviation of
    a binomial share). Rounds of one response are not independent, so a log's own noise is at
    least this."""
    p = np.asarray(probs, dtype=np.float64)
    return float(0.5 * np.sum(np.sqrt(2.0 * p * (1.0 - p) / (math.pi * max(float(n), 1.0)))))


@dataclass(frozen=True)
class _Target:
    """What a fit aims at: a law (with the rounds it was counted from), or a mean alone."""

    probs: np.ndarray | None
    mean: MeanCI
    label: str
    source: Any
    rounds: float | None = None

    @property
    def noise(self) -> float:
        """:func:`tv_noise` of the law (0 where the rounds are unknown)."""
        if self.probs is None or not self.rounds:
            return 0.0
        return tv_noise(self.probs, self.rounds)

    def objective(self, dist: Distribution) -> float:
        if self.probs is None:
            return (self.mean.mean - float(dist.taus.mean())) ** 2
        return _distances(self.probs, dist.probs)[2]


def _target(target: AcceptanceLog | Distribution | float) -> _Target:
    if isinstance(target, AcceptanceLog):
        return _Target(target.probs() if target.determines_law else None, target.mean(),
                       target.path, target, target.rounds)
    if isinstance(target, Distribution):
        return _Target(np.asarray(target.probs), target.mean(), target.label, target,
                       float(target.taus.size))
    x = float(target)
    if not (math.isfinite(x) and x >= 1):
        raise ValueError(f"target mean must be a number >= 1; got {target!r}")
    return _Target(None, MeanCI(x, math.nan, math.nan), f"mean {x:g}", x)


def _compare_target(t: _Target, dist: Distribution) -> Comparison:
    if isinstance(t.source, AcceptanceLog | Distribution):
        return compare(t.source, dist)
    nan = np.full(dist.probs.size, np.nan)
    return Comparison(t.label, dist.label, nan, dist.probs, nan, t.mean, dist.mean(),
                      math.nan, math.nan, t.objective(dist))


# ----------------------------------------------------------------------------- the fit
#: Knob -> kind: ``unit`` knobs live in ``[0, 1]`` (fitted on the logit scale), ``positive``
#: ones in ``(0, inf)`` (on the log scale).
FIT_KNOBS = {"hard_miss": "unit", "degradation": "unit", "mismatch": "unit", "junk": "unit",
             "variant_noise": "positive", "logit_scale": "positive", "calibration": "positive",
             "boost_noise": "positive", "sharpness": "positive"}

#: Values a knob at its boundary starts from (the logit and the log of 0 are not finite).
_START_FLOOR = 0.02


def _to_z(kind: str, x: float) -> float:
    x = float(x)
    if kind == "unit":
        x = min(max(x, _START_FLOOR), 1 - _START_FLOOR)
        return math.log(x / (1 - x))
    return math.log(max(x, _START_FLOOR))


def _from_z(kind: str, z: float) -> float:
    if kind == "unit":
        return 1.0 / (1.0 + math.exp(-z))
    return math.exp(z)


@dataclass(frozen=True)
class LogFit:
    """A regime fitted to an acceptance log's law (or mean) (:func:`fit_log`).

    Attributes
    ----------
    spec : RegimeSpec
        The fitted regime (its ``V`` and ``L`` those the fit ran at; its drafter knobs those of
        :attr:`drafted`'s drafter kind).
    knobs : dict
        The fitted knobs' values.
    start : dict
        Their starting values (the base regime's).
    target_probs : ndarray (m,) or None
        The law fitted to (``None``: a mean).
    comparison : Comparison
        The fitted regime's law beside the log (at the fit's contexts): its distance to it.
    start_cvm : float
        The objective at the start.
    evals : int
        Objective evaluations.
    drafted : Drafted
        What the regime runs to be compared with the log.
    temperature : float
    source : str
    """

    spec: RegimeSpec
    knobs: dict
    start: dict
    target_probs: np.ndarray | None
    comparison: Comparison
    start_cvm: float
    evals: int
    drafted: Drafted
    temperature: float
    source: str = ""

    @property
    def method(self) -> str:
        return self.drafted.method

    @property
    def budget(self) -> int | None:
        return self.drafted.budget

    @property
    def rule(self) -> str:
        return self.drafted.rule

    def warning(self) -> str | None:
        """:meth:`Comparison.warning` of the fit."""
        return self.comparison.warning()

    def to_dict(self) -> dict:
        return {"knobs": self.knobs, "start": self.start, "start_cvm": self.start_cvm,
                "evals": self.evals, "method": self.method, "budget": self.budget,
                "temperature": self.temperature, "rule": self.rule,
                "drafter": self.drafted.drafter, "source": self.source,
                "tv": self.comparison.to_dict()["tv"],
                "cdf_gap": self.comparison.to_dict()["cdf_gap"], "warning": self.warning(),
                "comparison": self.comparison.to_dict()}


def _log_depth(target: _Target, spec: RegimeSpec, depth: int | None) -> RegimeSpec:
    """The regime at the depth a log needs: its block depth where it says, at least the
    longest round's ``tau - 1``."""
    over = {}
    src = target.source
    if depth is not None:
        over["depth"] = check_positive_int(depth, "depth")
    elif isinstance(src, AcceptanceLog) and src.depth is not None:
        over["depth"] = src.depth
    need = (target.probs.size - 1) if target.probs is not None else \
        (math.ceil(target.mean.mean) - 1)
    d = over.get("depth", spec.depth)
    if need > d:
        if depth is not None:
            raise ValueError(f"the log has rounds of {need + 1} tokens, more than a regime of "
                             f"depth L = {d} commits (L + 1); pass depth >= {need}")
        over["depth"] = need
    try:
        return dataclasses.replace(spec, **over) if over else spec
    except ValueError as exc:
        raise ValueError(f"base regime {spec.name!r} at {over}: {exc}") from None


def fit_log(target: AcceptanceLog | Distribution | float, *, base: str | RegimeSpec,
            temperature: float, method: str = "chain", budget: int | None = None,
            rule: str = "follow", drafter: str = "block-diffusion",
            drafted: Drafted | None = None, knobs: Sequence[str] | None = None,
            contexts: int = 96, worlds: int = 2, seed: int = 0,
            vocab_size: int | None = None, depth: int | None = None, max_evals: int = 60,
            cost: Any = None, name: str | None = None) -> LogFit:
    r"""Fit a regime's knobs to a log's (or a trace's) whole acceptance-length law.

    The objective is :math:`\sum_k (F_{\log}(k) - F_{\mathrm{model}}(k))^2` over ``tau = 1..m``
    (a Cramér-von Mises distance between the two CDFs; its sum of gaps is the difference of
    the means, its squares weigh the shape) -- for a log of means only (or a number), the
    squared difference of the means. The model's law is that of the trial regime on the same
    worlds and contexts every time (:class:`WorldSet`: common random numbers), for what the log
    drafted (:class:`Drafted`, from ``method``/``budget``/``rule``/``drafter``). Nelder-Mead
    (:func:`scipy.optimize.minimize`) on unconstrained coordinates (:data:`FIT_KNOBS`), from
    the base regime's values.

    Parameters
    ----------
    target : AcceptanceLog, Distribution or float
    base : str or RegimeSpec
        The regime whose other knobs are kept.
    temperature : float
        The decode's temperature (required: a log does not always say it, and the worlds'
        target is tempered by it).
    method, budget, rule, drafter, drafted
        What the log's rounds drafted (``drafted`` wins when given; :func:`guess_method`).
    knobs : sequence of str, optional
        Knobs to fit (default ``hard_miss``, ``variant_noise``, ``degradation``, and
        ``logit_scale`` at ``T > 0``).
    contexts, worlds, seed
        Per evaluation (:class:`WorldSet`).
    vocab_size, depth : int, optional
        ``V`` and ``L`` of the fitted regime (default the base's; ``depth`` defaults to the
        log's block depth where it says).
    max_evals : int
        Objective evaluations at most.

    Returns
    -------
    LogFit
        With the distance it reached (:attr:`LogFit.comparison`) and :meth:`LogFit.warning`.

    Raises
    ------
    ValueError
        An unknown knob or drafter, a knob that changes the target on a shared world, a log
        longer than the regime's depth allows, a bad count.
    """
    from scipy.optimize import minimize

    tg = _target(target)
    drafted = drafted or Drafted(method, budget, rule, drafter)
    spec0 = drafter_spec(resolve_regime(base), drafted.drafter)
    t = check_temperature(temperature)
    knobs = tuple(knobs) if knobs else (("hard_miss", "variant_noise", "degradation")
                                         + (("logit_scale",) if t > 0 else ()))
    for kname in knobs:
        if kname not in FIT_KNOBS:
            raise ValueError(f"knobs: {kname!r} is not a fittable knob; known: "
                             f"{', '.join(FIT_KNOBS)}")
    max_evals = check_positive_int(max_evals, "max_evals")
    if vocab_size is not None:
        vocab_size = check_positive_int(vocab_size, "vocab_size")
    spec0 = _log_depth(tg, spec0, depth)
    run_method, run_budget = drafted.run_args()
    if isinstance(cost, str):
        cost = get_cost_model(cost)
    ws = WorldSet(spec0, contexts=contexts, worlds=worlds, seed=seed, vocab_size=vocab_size)
    kinds = [FIT_KNOBS[k] for k in knobs]
    start = {k: float(getattr(spec0, k)) for k in knobs}
    z0 = np.array([_to_z(kind, start[k]) for k, kind in zip(knobs, kinds, strict=True)])
    evals = {"n": 0}
    cache: dict[tuple, tuple[float, Distribution | None]] = {}

    def spec_at(z: np.ndarray) -> RegimeSpec:
        vals = {k: _from_z(kind, float(x)) for k, kind, x in zip(knobs, kinds, z, strict=True)}
        return dataclasses.replace(spec0, **vals)

    def objective(z: np.ndarray) -> float:
        key = tuple(np.round(z, 12))
        if key not in cache:
            evals["n"] += 1
            try:
                dist = ws.law(spec_at(z), method=run_method, budget=run_budget, temperature=t,
                              rule=drafted.rule, cost=cost)
            except ValueError:  # a knob value the regime refuses: outside the feasible set
                cache[key] = (math.inf, None)
            else:
                cache[key] = (tg.objective(dist), dist)
        return cache[key][0]

    f0 = objective(z0)
    res = minimize(objective, z0, method="Nelder-Mead",
                   options={"maxfev": max(1, max_evals - 1), "xatol": 1e-3, "fatol": 1e-7,
                            "initial_simplex": np.vstack([z0] + [z0 + 0.5 * np.eye(len(z0))[i]
                                                                  for i in range(len(z0))])})
    best = res.x if objective(res.x) <= f0 else z0
    spec = dataclasses.replace(spec_at(best), name=name or f"fit-{spec0.name}",
                               description=f"fitted to an acceptance log ({drafted.label}, "
                                           f"T = {t:g}) from {spec0.name}")
    dist = cache[tuple(np.round(best, 12))][1]
    dist = dataclasses.replace(dist, label=f"{spec.name} ({drafted.label}, T = {t:g})")
    return LogFit(spec, {k: float(getattr(spec, k)) for k in knobs}, start, tg.probs,
                  _compare_target(tg, dist), f0, evals["n"], drafted, t,
                  getattr(target, "path", getattr(target, "label", str(tg.label))))


def write_fit(path: Path | str, fit: LogFit) -> Path:
    """Write a fitted regime as a calibration-style file (``{"regimes": {name: {"knobs":
    ..., "fit": ...}}}``) that :func:`~treespec_sim.synth.resolve_regime`, ``--regime FILE``
    and the sweep's ``regimes = ["FILE"]`` read; atomically."""
    path = Path(path)
    data = {"regimes": {fit.spec.name: {"knobs": dataclasses.asdict(fit.spec),
                                        "fit": fit.to_dict()}}}
    atomic_write_text(path, json.dumps(data, indent=1, default=float))
    return path


# ----------------------------------------------------------------------------- prediction
@dataclass(frozen=True)
class Candidate:
    """One structure refitted to the log, and what it predicts.

    Attributes
    ----------
    base : str
        The structure (a calibrated regime, or the regime given).
    knob : str or None
        The knob moved to reproduce the log's mean (``None``: the regime as given).
    value : float or None
        Its value.
    spec : RegimeSpec or None
        The refitted regime (``None`` where the knob cannot reach the log's mean).
    comparison : Comparison or None
        Its law beside the log's (on the fit's contexts).
    consistent : bool
        Whether it reproduces the log (law: within :data:`FIT_WARN_TV` and
        :data:`FIT_WARN_CDF_GAP` plus twice the log's own sampling noise, :func:`tv_noise`;
        mean: within :data:`MEAN_TOLERANCE` or the log's interval).
    reason : str
        Why not, where not.
    gain : MeanCI or None
        The predicted method's ``tau`` over the log's method's, per world on fresh contexts of
        its worlds, paired (the mean of the per-world ratios with its between-world interval).
    tau : MeanCI or None
        The log's mean times :attr:`gain` (the structure matched the log's mean; the paired
        ratio leaves out the world-to-world spread both methods share).
    base_tau : MeanCI or None
        The log's method's ``tau`` in the structure's worlds (about the log's mean).
    speedup, tokens_per_s : MeanCI or None
        Under the latency model: the per-world ratio of tokens per second, and the log's
        tokens per second (its mean over the log's method's modelled seconds per round) times
        it.
    """

    base: str
    knob: str | None
    value: float | None
    spec: RegimeSpec | None
    comparison: Comparison | None
    consistent: bool
    reason: str = ""
    gain: MeanCI | None = None
    tau: MeanCI | None = None
    base_tau: MeanCI | None = None
    speedup: MeanCI | None = None
    tokens_per_s: MeanCI | None = None

    def to_dict(self) -> dict:
        def ci(m: MeanCI | None) -> dict | None:
            return None if m is None else m.to_dict()

        c = self.comparison
        return {"base": self.base, "knob": self.knob, "value": self.value,
                "consistent": self.consistent, "reason": self.reason,
                "model_mean": None if c is None else c.model_mean.mean,
                "tv": None if c is None else c.to_dict()["tv"],
                "cdf_gap": None if c is None else c.to_dict()["cdf_gap"],
                "gain": ci(self.gain), "tau": ci(self.tau), "base_tau": ci(self.base_tau),
                "speedup": ci(self.speedup), "tokens_per_s": ci(self.tokens_per_s)}


def _spread(values: Sequence[MeanCI], scale: tuple[float, float]) -> tuple[float, float, float]:
    """``(median of means, lowest low, highest high)``, each bound scaled by the log's own
    relative uncertainty ``scale = (low / mean, high / mean)``; a value without an interval
    contributes its mean."""
    means = [v.mean for v in values]
    lows = [(v.low if v.has_interval else v.mean) * scale[0] for v in values]
    highs = [(v.high if v.has_interval else v.mean) * scale[1] for v in values]
    return float(np.median(means)), float(min(lows)), float(max(highs))


@dataclass(frozen=True)
class Prediction:
    """What another method would give, from a log, with the uncertainty the log leaves
    (:func:`predict`).

    Attributes
    ----------
    method : str
        The predicted method (``ddtree``, ``caddtree``, ``chain``).
    budget : int or None
    drafter : str
    temperature : float
    drafted : Drafted
        What the log's rounds drafted (the baseline the gain is measured against).
    log_mean : MeanCI
    candidates : tuple of Candidate
    used : tuple of int
        The candidates the interval spans (the consistent ones; every one that reached the
        log's mean where none is consistent, then :attr:`warning` says so).
    tau, tau_low, tau_high : float
        Median over :attr:`used` of the candidates' ``tau``, the lowest lower and the highest
        upper bound of their between-world intervals, each bound scaled by the log's own
        relative interval where it has one.
    gain, gain_low, gain_high : float
        The same for ``tau / tau of the log's method`` (each candidate's ratio).
    tokens_per_s, tokens_per_s_low, tokens_per_s_high, speedup, speedup_low, speedup_high :
    float or None
        Under :attr:`cost_model`: the speedup over the log's method as the gain, and tokens/s
        as ``tau`` (the log's tokens/s, its mean over its method's modelled seconds per
        round, times each candidate's speedup).
    cost_model : str or None
    best : int
        The candidate closest to the log (smallest total variation; for a mean-only log the
        smallest mean gap): the fit the JSON's ``"fit"`` reports.
    warning : str or None
    notes : tuple of str
    """

    method: str
    budget: int | None
    drafter: str
    temperature: float
    drafted: Drafted
    log_mean: MeanCI
    candidates: tuple[Candidate, ...]
    used: tuple[int, ...]
    tau: float
    tau_low: float
    tau_high: float
    gain: float
    gain_low: float
    gain_high: float
    tokens_per_s: float | None = None
    tokens_per_s_low: float | None = None
    tokens_per_s_high: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    cost_model: str | None = None
    best: int = 0
    warning: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fit(self) -> Candidate:
        return self.candidates[self.best]

    def to_dict(self) -> dict:
        """The ``--json`` shape: ``{"fit": {...}, "prediction": {...}, "candidates": [...]}``."""
        c = self.fit.comparison
        fit = {"tv": None, "cdf_gap": None} if c is None else {
            "tv": c.to_dict()["tv"], "cdf_gap": c.to_dict()["cdf_gap"]}
        fit.update({"base": self.fit.base, "knob": self.fit.knob, "value": self.fit.value,
                    "model_mean": None if c is None else c.model_mean.mean,
                    "log_mean": self.log_mean.to_dict(),
                    "warning": None if c is None else c.warning()})
        pred = {"method": self.method, "budget": self.budget, "drafter": self.drafter,
                "temperature": self.temperature, "tau": self.tau, "tau_low": self.tau_low,
                "tau_high": self.tau_high, "baseline": self.drafted.label, "gain": self.gain,
                "gain_low": self.gain_low, "gain_high": self.gain_high,
                "structures": [self.candidates[i].base + "/" + str(self.candidates[i].knob)
                               for i in self.used],
                "warning": self.warning, "notes": list(self.notes)}
        if self.cost_model is not None:
            pred.update({"cost_model": self.cost_model, "tokens_per_s": self.tokens_per_s,
                         "tokens_per_s_low": self.tokens_per_s_low,
                         "tokens_per_s_high": self.tokens_per_s_high,
                         "speedup": self.speedup, "speedup_low": self.speedup_low,
                         "speedup_high": self.speedup_high})
        return {"fit": fit, "prediction": pred,
                "candidates": [c.to_dict() for c in self.candidates]}


def _match_mean(tg: _Target, ws: WorldSet, base: RegimeSpec, knob: str,
                bounds: tuple[float, float], *, run: tuple, temperature: float, rule: str,
                max_evals: int) -> tuple[float | None, Distribution | None, str]:
    """The knob value whose law on ``ws`` has the log's mean, its law, or ``None`` and why.

    Both knobs of :data:`PREDICT_KNOBS` add misses, so the mean falls as the knob grows; on
    fixed contexts it is a step function of it. From the structure's own value, secant steps
    (clamped to the bounds) until the root is bracketed, then the Illinois variant of regula
    falsi, within ``max_evals`` laws, stopping within a thousandth of the mean; the evaluated
    value with the smallest gap is returned.
    """
    cache: dict[float, Distribution] = {}

    def gap(x: float) -> float:
        x = float(x)
        if x not in cache:
            cache[x] = ws.law(dataclasses.replace(base, **{knob: x}), method=run[0],
                              budget=run[1], temperature=temperature, rule=rule)
        return float(cache[x].taus.mean()) - tg.mean.mean

    lo, hi = bounds
    tol = 1e-3 * tg.mean.mean
    x0 = min(max(float(getattr(base, knob)), lo), hi)
    try:
        dataclasses.replace(base, **{knob: hi})
    except ValueError as exc:
        return None, None, f"{base.name} has no {knob}: {exc}"
    f0 = gap(x0)
    pts = [(x0, f0)]
    bracket = None
    while len(cache) < max_evals and abs(pts[-1][1]) > tol and bracket is None:
        (xa, fa) = pts[-1]
        step = 0.1 * (hi - lo)
        if len(pts) >= 2 and pts[-2][1] != fa:
            xb, fb = pts[-2]
            x = xa - fa * (xa - xb) / (fa - fb)
            x = xa + np.sign(fa) * max(abs(x - xa), 0.02 * (hi - lo)) if np.sign(x - xa) == \
                np.sign(fa) else xa + np.sign(fa) * step
        else:
            x = xa + np.sign(fa) * step  # too high a mean: more misses
        x = float(min(max(x, lo), hi))
        if x == xa:  # at a bound, still on the same side: out of reach
            break
        fx = gap(x)
        pts.append((x, fx))
        if (fx > 0) != (fa > 0):
            bracket = ((xa, fa), (x, fx)) if xa < x else ((x, fx), (xa, fa))
    if bracket is not None:
        (a, fa), (b, fb) = bracket
        side = 0
        while len(cache) < max_evals and min(abs(fa), abs(fb)) > tol and \
                b - a > 1e-4 * (hi - lo):
            x = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
            x = min(max(x, a + 1e-3 * (b - a)), b - 1e-3 * (b - a))
            fx = gap(x)
            if (fx > 0) == (fb > 0):
                b, fb = x, fx
                if side == -1:
                    fa /= 2
                side = -1
            else:
                a, fa = x, fx
                if side == 1:
                    fb /= 2
                side = 1
    best = min(cache, key=lambda x: abs(float(cache[x].taus.mean()) - tg.mean.mean))
    reached = bracket is not None or abs(float(cache[best].taus.mean()) - tg.mean.mean) <= tol
    if not reached:
        means = sorted(float(d.taus.mean()) for d in cache.values())
        return None, cache[best], (f"{knob} in [{lo:g}, {hi:g}] reaches mean tau "
                                   f"{means[0]:.3f} to {means[-1]:.3f}, not the log's "
                                   f"{tg.mean.mean:.3f}")
    return best, cache[best], ""


def predict(target: AcceptanceLog | Distribution | float, *, temperature: float,
            drafter: str = "block-diffusion", drafted: Drafted | None = None,
            method: str = "ddtree", budget: int | None = 64, cost: Any = None,
            regime: str | RegimeSpec | None = None, prior: Sequence[str | RegimeSpec] | None = None,
            knobs: Sequence[str] | None = None, contexts: int = 128, worlds: int = 4,
            seed: int = 0, vocab_size: int | None = None, max_evals: int = 12,
            progress: Callable[[str], None] | None = None) -> Prediction:
    r"""``tau`` (and tokens/s) of ``method`` at ``budget``, predicted from an acceptance log,
    with an interval that includes what the log cannot identify.

    Each *structure* of ``prior`` (default: every calibrated regime) is refitted to the log
    through each knob of ``knobs`` (default :data:`PREDICT_KNOBS`: ``variant_noise``, near
    misses a tree recovers; ``hard_miss``, misses no tree recovers) -- the knob's value at which
    the structure's law of what the log drafted has the log's mean (:class:`WorldSet`: the same
    worlds and contexts for every trial). A candidate is *consistent* when its whole law is
    within :data:`FIT_WARN_TV` and :data:`FIT_WARN_CDF_GAP` of the log's (a mean-only log:
    within :data:`MEAN_TOLERANCE`). Each consistent candidate then runs ``method`` and the
    log's own method on fresh contexts of its worlds (context stream 18): its gain over the
    log's method, paired per world (the mean of the per-world ratios with a between-world
    interval, :func:`~treespec_sim.stats.world_ci`), and its ``tau`` as the log's mean times
    that gain; under ``cost`` the same for tokens per second (``sum tau / sum seconds`` per
    world).

    The prediction is the median over the consistent candidates; its interval runs from the
    lowest lower bound to the highest upper bound among them, each scaled by the log's own
    relative interval (``low / mean``, ``high / mean``: the structures' gains hold roughly
    under a small change of the log's mean; a log without an interval, one response, adds
    none). With ``regime`` the prediction is that regime's alone (no refit): its interval is
    its worlds' only, and says nothing of what the log leaves open.

    Parameters
    ----------
    target : AcceptanceLog, Distribution or float
        The log (or a law, or a mean: the leave-one-out validation predicts from Table 1's
        chain ``tau`` alone).
    temperature : float
    drafter : str
        ``"block-diffusion"`` or ``"autoregressive"`` (:data:`DRAFTERS`).
    drafted : Drafted, optional
        What the log's rounds drafted (default :func:`guess_method`, or a chain).
    method, budget : str, int
        The predicted method: ``"ddtree"`` (an autoregressive drafter: DDTree's best-first rule
        on its conditional path scores, ``ar-ddtree``), ``"caddtree"`` (budget: its maximum;
        needs ``cost``) or ``"chain"``.
    cost : latency model or name, optional
    regime : str or RegimeSpec, optional
    prior : sequence of str or RegimeSpec, optional
    knobs : sequence of str, optional
    contexts, worlds, seed, vocab_size, max_evals
        Per structure (:class:`WorldSet`; evaluations of the mean-matching root search).
    progress : callable, optional
        Called with a line per candidate.

    Returns
    -------
    Prediction

    Raises
    ------
    ValueError
        An unknown drafter, method, structure or knob; ``caddtree`` without ``cost`` or with an
        autoregressive drafter; no structure reaching the log's mean.
    """
    tg = _target(target)
    t = check_temperature(temperature)
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter: {drafter!r} is not one of {', '.join(DRAFTERS)}")
    if drafted is None:
        drafted = guess_method(target, drafter) if isinstance(target, AcceptanceLog) \
            else Drafted("chain", None, "follow", drafter)
    drafted = dataclasses.replace(drafted, drafter=drafter)
    if method not in ("ddtree", "caddtree", "chain"):
        raise ValueError(f"predict: method {method!r} is not ddtree, caddtree or chain")
    if method == "caddtree" and cost is None:
        raise ValueError("predict caddtree needs a latency model (--cost-model): its budget is "
                         "chosen by the cost")
    pred = Drafted(method, budget if method != "chain" else None, "follow", drafter)
    pred_run = pred.run_args()
    log_run = drafted.run_args()
    cost_name = None if cost is None else (cost if isinstance(cost, str) else
                                           type(cost).__name__)
    if isinstance(cost, str):
        cost = get_cost_model(cost)
    for k in knobs or ():
        if k not in PREDICT_KNOBS:
            raise ValueError(f"knobs: {k!r} is not one of {', '.join(PREDICT_KNOBS)}")
    knob_ranges = {k: PREDICT_KNOBS[k] for k in (knobs or PREDICT_KNOBS)}
    notes = []
    if regime is not None:
        structures = [(resolve_regime(regime), None)]
        notes.append("one regime as given: the interval is its worlds' only and does not "
                     "include what the log cannot identify")
    else:
        names = list(prior) if prior is not None else _calibrated()
        if not names:
            raise ValueError("predict: no structures (no calibrated regime is installed; give "
                             "--regime or --prior)")
        structures = [(resolve_regime(n), k) for n in names for k in knob_ranges]
    scale = (1.0, 1.0)
    if tg.mean.has_interval and tg.mean.mean > 0:
        scale = (tg.mean.low / tg.mean.mean, tg.mean.high / tg.mean.mean)
    cands: list[Candidate] = []
    sets: dict[str, tuple[WorldSet, WorldSet]] = {}
    for spec, knob in structures:
        base = _log_depth(tg, drafter_spec(spec, drafter), None)
        if base.name not in sets:
            sets[base.name] = (
                WorldSet(base, contexts=contexts, worlds=worlds, seed=seed,
                         vocab_size=vocab_size),
                WorldSet(base, contexts=contexts, worlds=worlds, seed=seed,
                         vocab_size=vocab_size, stream=18))
        fit_ws, new_ws = sets[base.name]
        if knob is None:
            value, dist, why = None, fit_ws.law(method=log_run[0], budget=log_run[1],
                                                temperature=t, rule=drafted.rule), ""
            fitted = base
        else:
            value, dist, why = _match_mean(tg, fit_ws, base, knob, knob_ranges[knob],
                                           run=log_run, temperature=t, rule=drafted.rule,
                                           max_evals=max_evals)
            fitted = None if value is None else dataclasses.replace(
                base, **{knob: value}, name=f"{base.name}+{knob}",
                description=f"{base.name} with {knob} refitted to {Path(str(tg.label)).name}")
        comp = None if dist is None else _compare_target(tg, dist)
        cand = Candidate(spec.name, knob, value, fitted, comp, False, why)
        if fitted is not None:
            cand = _assess(cand, tg)
        if fitted is not None:
            cand = _predicted(cand, new_ws, fitted, pred_run, log_run, t, drafted.rule, cost,
                              tg.mean.mean)
        cands.append(cand)
        if progress is not None:
            progress(_candidate_line(cand))
    reached = [i for i, c in enumerate(cands) if c.spec is not None]
    if not reached:
        raise ValueError("predict: no structure reaches the log's mean tau "
                         f"{tg.mean.mean:.3f} with {', '.join(knob_ranges)} in range: "
                         + "; ".join(c.reason for c in cands[:3]))
    used = [i for i in reached if cands[i].consistent] or reached
    warning = None
    if not any(cands[i].consistent for i in reached):
        warning = ("no structure reproduces the log's law within total variation "
                   f"{FIT_WARN_TV:g} and CDF gap {FIT_WARN_CDF_GAP:g} (plus "
                   f"{2 * tg.noise:.3f}, twice the log's own sampling noise): the interval "
                   "spans every structure that matches its mean, and rests on poor fits")
    best = min(reached, key=lambda i: (cands[i].comparison.tv if cands[i].comparison.law
                                       else abs(cands[i].comparison.model_mean.mean
                                                - tg.mean.mean)))
    tau = _spread([cands[i].tau for i in used], scale)
    gain = _spread([cands[i].gain for i in used], (1.0, 1.0))
    extra = {}
    if cost is not None:
        tps = _spread([cands[i].tokens_per_s for i in used], scale)
        sp = _spread([cands[i].speedup for i in used], (1.0, 1.0))
        extra = {"tokens_per_s": tps[0], "tokens_per_s_low": tps[1],
                 "tokens_per_s_high": tps[2], "speedup": sp[0], "speedup_low": sp[1],
                 "speedup_high": sp[2], "cost_model": cost_name}
    if not tg.mean.has_interval:
        notes.append("the log's mean has no interval (a single unit): the prediction's "
                     "interval does not include the log's own sampling error")
    if drafter == "autoregressive" and method == "ddtree":
        notes.append("an autoregressive drafter: 'ddtree' is DDTree's best-first rule on its "
                     "conditional path scores (ar-ddtree, an EAGLE-2-style tree)")
    return Prediction(method, pred.budget, drafter, t, drafted, tg.mean, tuple(cands),
                      tuple(used), *tau, *gain, **extra, best=best, warning=warning,
                      notes=tuple(notes))


def _calibrated() -> list[str]:
    return [n for n in load_calibrated(CALIBRATION_FILE) if n in REGIMES]


def _assess(c: Candidate, tg: _Target) -> Candidate:
    comp = c.comparison
    if comp.law:
        noise = 2.0 * tg.noise
        ok = comp.tv <= FIT_WARN_TV + noise and comp.ks <= FIT_WARN_CDF_GAP + noise
        why = "" if ok else (f"its law is {comp.tv:.3f} (total variation) and {comp.ks:.3f} "
                             f"(CDF gap) from the log's, above {FIT_WARN_TV:g} + {noise:.3f} "
                             "(twice the log's own sampling noise)")
    else:
        tol = max(MEAN_TOLERANCE * tg.mean.mean,
                  tg.mean.half_width if tg.mean.has_interval else 0.0)
        ok = abs(comp.model_mean.mean - tg.mean.mean) <= tol
        why = "" if ok else f"its mean {comp.model_mean.mean:.3f} misses the log's"
    return dataclasses.replace(c, consistent=ok, reason=why)


def _scaled(m: MeanCI, x: float) -> MeanCI:
    return MeanCI(m.mean * x, m.low * x, m.high * x)


def _predicted(c: Candidate, ws: WorldSet, spec: RegimeSpec, pred_run: tuple, log_run: tuple,
               t: float, rule: str, cost: Any, log_mean: float) -> Candidate:
    new = ws.law(spec, method=pred_run[0], budget=pred_run[1], temperature=t, rule="follow",
                 cost=cost)
    old = ws.law(spec, method=log_run[0], budget=log_run[1], temperature=t, rule=rule,
                 cost=cost)
    gain = world_ci(new.world_means() / old.world_means())
    extra = {}
    if cost is not None:
        speedup = world_ci(new.world_throughputs() / old.world_throughputs())
        base_tps = log_mean / float(old.seconds.mean())
        extra = {"speedup": speedup, "tokens_per_s": _scaled(speedup, base_tps)}
    return dataclasses.replace(c, gain=gain, tau=_scaled(gain, log_mean),
                               base_tau=world_ci(old.world_means()), **extra)


def _candidate_line(c: Candidate) -> str:
    if c.spec is None:
        return f"  {c.base} via {c.knob}: cannot reach the log's mean ({c.reason})"
    comp = c.comparison
    dist = (f"TV {comp.tv:.3f}, CDF gap {comp.ks:.3f}" if comp.law
            else f"mean {comp.model_mean.mean:.3f}")
    knob = "as given" if c.knob is None else f"{c.knob} = {c.value:.4g}"
    return (f"  {c.base} ({knob}): {dist}; {'consistent' if c.consistent else 'not consistent'}"
            f"; predicted tau {c.tau.text()}")


def prediction_markdown(p: Prediction, *, unit: str = "unit") -> str:
    """The prediction as text: the fit, the prediction with its interval, the candidates."""
    f = p.fit
    comp = f.comparison
    lines = []
    if comp.law:
        lines.append(f"Fit: the closest structure is {f.base}"
                     f"{'' if f.knob is None else f' with {f.knob} = {f.value:.4g}'}: total "
                     f"variation {comp.tv:.3f}, largest CDF gap {comp.ks:.3f} from the log's law "
                     f"(model mean {comp.model_mean.mean:.3f}, log {p.log_mean.text(unit=unit)}).")
        if comp.warning():
            lines.append(f"WARNING: {comp.warning()}.")
    else:
        lines.append(f"Fit: the log holds a mean only ({p.log_mean.text(unit=unit)}): every "
                     "structure is matched to it; nothing checks the shape of the law.")
    what = f"{p.method}" + ("" if p.budget is None else f"@{p.budget}")
    lines.append(f"Prediction ({p.drafter} drafter, T = {p.temperature:g}): {what} tau "
                 f"{p.tau:.2f} [{p.tau_low:.2f}, {p.tau_high:.2f}]; over the log's "
                 f"{p.drafted.label}: x{p.gain:.2f} [{p.gain_low:.2f}, {p.gain_high:.2f}] "
                 f"({len(p.used)} of {len(p.candidates)} structures).")
    if p.cost_model is not None:
        lines.append(f"Under {p.cost_model}: {p.tokens_per_s:.0f} tokens/s "
                     f"[{p.tokens_per_s_low:.0f}, {p.tokens_per_s_high:.0f}], x{p.speedup:.2f} "
                     f"[{p.speedup_low:.2f}, {p.speedup_high:.2f}] over the log's "
                     f"{p.drafted.label}.")
    if p.warning:
        lines.append(f"WARNING: {p.warning}.")
    lines += [f"Note: {n}." for n in p.notes]
    lines += ["", "| structure | knob | value | distance to the log | consistent | predicted τ "
              "| log's method τ |", "|---|---|---:|---|---|---|---|"]
    for c in p.candidates:
        if c.spec is None:
            lines.append(f"| {c.base} | {c.knob} | — | {c.reason} | no | — | — |")
            continue
        comp = c.comparison
        dist = (f"TV {comp.tv:.3f}, gap {comp.ks:.3f}" if comp.law
                else f"mean {comp.model_mean.mean:.3f}")
        lines.append(f"| {c.base} | {c.knob or 'as given'} | "
                     f"{'' if c.value is None else f'{c.value:.4g}'} | {dist} | "
                     f"{'yes' if c.consistent else 'no'} | {c.tau.text()} | "
                     f"{c.base_tau.text()} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI
def add_from_log_arguments(ap: argparse.ArgumentParser, *, file_option: bool = True) -> None:
    """The options of a fit to a log (``python -m treespec_sim.calibrate --from-log FILE`` and,
    the file positional, ``python -m treespec_sim.acceptance fit FILE``)."""
    if file_option:
        ap.add_argument("--from-log", metavar="FILE", default=None,
                        help="fit a regime to an acceptance log (an engine's metrics, "
                             "Spec-Bench, AIPerf, benchmark.py --save-path .pt, CaDDTree "
                             "traces, JetSpec .jsonl; docs/traces.md, 'Public logs') instead of "
                             "the published cells (default: none, the published cells)")
    ap.add_argument("--log-method", metavar="KEY", default=None,
                    help="with --from-log: the log's method key (default: its largest DDTree "
                         "budget, else caddtree, else dflash)")
    ap.add_argument("--log-temperature", type=temperature, default=None, metavar="T",
                    help="with --from-log: the decode's temperature (required where the log "
                         "does not say it; default: the log's)")
    _add_drafter(ap, "with --from-log: ")
    ap.add_argument("--base", metavar="REGIME", default=None,
                    help="with --from-log: the regime whose other knobs are kept (default: "
                         "math500 if calibrated, else mid-entropy)")
    ap.add_argument("--fit-out", metavar="FILE.json", default=None,
                    help="with --from-log: where to write the fitted regime (default: "
                         "fit-<log stem>.json)")
    ap.add_argument("--fit-knobs", nargs="+", metavar="KNOB", default=None,
                    help=f"with --from-log: knobs to fit, of {', '.join(FIT_KNOBS)} (default: "
                         "hard_miss variant_noise degradation, and logit_scale at T > 0)")
    ap.add_argument("--max-evals", type=positive_int, default=60, metavar="N",
                    help="with --from-log: objective evaluations at most (default: %(default)s)")
    ap.add_argument("--vocab", type=positive_int, default=4096, metavar="V",
                    help="with --from-log: the fitted regime's vocabulary (default: "
                         "%(default)s, a fast world)")


def _add_drafter(ap: argparse.ArgumentParser, prefix: str = "") -> None:
    ap.add_argument("--drafter", choices=list(DRAFTERS), default=None,
                    help=f"{prefix}the drafter that wrote the log: block-diffusion (DFlash) or "
                         "autoregressive (EAGLE, MTP, a draft model); required for an engine's "
                         "log (default: block-diffusion for the DDTree/TEV/CaDDTree/JetSpec "
                         "logs, which come from DFlash)")
    ap.add_argument("--width", type=positive_int, default=None, metavar="K",
                    help=f"{prefix}drafted positions per step where the log does not say it "
                         f"(tau <= K + 1; default: the log's, else {DEFAULT_WIDTH})")
    ap.add_argument("--drafted", default=None, metavar="SPEC",
                    help=f"{prefix}what the engine drafted per step where the log does not say "
                         "it: chain, chain@K, ddtree@B or caddtree@B (default: the log's method "
                         "key, else a chain of the log's width)")


_RESEARCH = ("benchmark", "caddtree-traces", "jetspec")


def _log_setting(log: AcceptanceLog, temp: float | None, drafter: str | None
                 ) -> tuple[float, str]:
    """The temperature and drafter a fit runs at: the log's where it says them, else the
    options; refused where neither says."""
    if log.temperature is not None:
        if temp is not None and abs(temp - log.temperature) > 1e-12:
            raise ValueError(f"--temperature {temp:g}: the log says T = {log.temperature:g}")
        temp = log.temperature
    if temp is None:
        raise ValueError(f"{log.path}: the log does not say its temperature, and the worlds' "
                         "target is tempered by it: pass --temperature T")
    if drafter is None:
        if log.source not in _RESEARCH:
            raise ValueError(f"{log.path}: the log does not say which drafter wrote it: pass "
                             "--drafter block-diffusion (DFlash) or --drafter autoregressive "
                             "(EAGLE, MTP, a draft model): the worlds model a block-diffusion "
                             "drafter's marginals, and an autoregressive one is modelled by its "
                             "conditionals")
        drafter = "block-diffusion"
    return float(temp), drafter


def _drafted_of(log: AcceptanceLog, drafter: str, spec: str | None) -> Drafted:
    return Drafted.parse(spec, drafter) if spec else guess_method(log, drafter)


def _default_base() -> str:
    return "math500" if "math500" in REGIMES else "mid-entropy"


def from_log_main(args: argparse.Namespace, *, contexts: int | None = None,
                  seed: int = 0) -> int:
    """Fit a regime to ``args.from_log`` and write it (the ``--from-log`` dispatch)."""
    log = read_log(args.from_log, args.log_method, width=args.width)
    t, drafter = _log_setting(log, args.log_temperature, args.drafter)
    drafted = _drafted_of(log, drafter, args.drafted)
    base = resolve_regime(args.base or _default_base())
    fit = fit_log(log, base=base, drafted=drafted, temperature=t, knobs=args.fit_knobs,
                  contexts=contexts or 96, seed=seed, vocab_size=args.vocab,
                  max_evals=args.max_evals,
                  cost="h200-qwen3-8b" if drafted.method == "caddtree" else None,
                  name=f"fit-{Path(args.from_log).stem}")
    out = Path(args.fit_out or f"fit-{Path(args.from_log).stem}.json")
    write_fit(out, fit)
    print(compare_markdown(fit.comparison, unit=log.unit_name))
    print(f"fitted {', '.join(f'{k} = {v:.4g}' for k, v in fit.knobs.items())} (from "
          f"{', '.join(f'{k} = {v:.4g}' for k, v in fit.start.items())}); objective "
          f"{fit.start_cvm:.4f} -> {fit.comparison.cvm:.4f} in {fit.evals} evaluations; "
          f"wrote {out}")
    return 0


def build_parser() -> OneLineParser:
    """The parser of ``python -m treespec_sim.acceptance``."""
    ap = OneLineParser(prog="python -m treespec_sim.acceptance",
                       description="Read acceptance logs (vLLM, SGLang, Spec-Bench, AIPerf, "
                                   "DDTree/TEV/CaDDTree benchmark.py --save-path, JetSpec), hold "
                                   "them against a regime, fit one, predict another tree's "
                                   "gain (docs/engine_logs.md).")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", title="commands", required=True)
    s = sub.add_parser("show", help="what a log holds: rounds, units, mean tau, its law, and "
                                    "what it does not say")
    s.add_argument("file")
    s.add_argument("--width", type=positive_int, default=None, metavar="K",
                   help=f"drafted positions per step where the log does not say it (tau <= K + "
                        f"1; default: the log's, else {DEFAULT_WIDTH})")
    c = sub.add_parser("compare", help="a log beside a regime, or (--predict) the fit over the "
                                       "calibrated structures and another method's tau")
    c.add_argument("file")
    c.add_argument("--regime", default=None,
                   help="a regime name or a fitted regime's .json file (default: none; with "
                        "--predict, every calibrated structure refitted to the log)")
    c.add_argument("--method", default=None, help="the log's method key (default: see show)")
    c.add_argument("--temperature", type=temperature, default=None, metavar="T",
                   help="the decode's temperature (required where the log does not say it; "
                        "default: the log's)")
    _add_drafter(c)
    c.add_argument("--predict", choices=("ddtree", "caddtree", "chain"), default=None,
                   help="predict this method's tau from the log (default: none, compare only)")
    c.add_argument("--budget", type=positive_int, default=64,
                   help="with --predict: the predicted method's budget (CaDDTree: its maximum; "
                        "default: %(default)s)")
    c.add_argument("--cost-model", default=None, metavar="M",
                   help="a latency preset or file (treespec_sim.cost): tokens/s and the gain in "
                        "them (default: none, tokens per round only)")
    c.add_argument("--prior", nargs="+", default=None, metavar="REGIME",
                   help="with --predict: the structures refitted to the log (default: every "
                        "calibrated regime)")
    c.add_argument("--contexts", type=positive_int, default=128,
                   help="contexts per structure (default: %(default)s)")
    c.add_argument("--worlds", type=positive_int, default=4,
                   help="worlds per structure (default: %(default)s)")
    c.add_argument("--vocab", type=positive_int, default=None,
                   help="cap the regimes' vocabulary (faster; default: their own)")
    add_seed(c, "world and context seed (default 0)")
    add_json_flag(c, "print the result as JSON only (default: text)")
    c.add_argument("--out", type=Path, default=None,
                   help="folder for compare.md, compare.json and compare.png (default: none, "
                        "print only)")
    f = sub.add_parser("fit", help="fit a regime to a log (as calibrate --from-log)")
    f.add_argument("from_log", metavar="file")
    add_from_log_arguments(f, file_option=False)
    f.add_argument("--contexts", type=positive_int, default=96,
                   help="contexts per evaluation (default: %(default)s)")
    add_seed(f, "world and context seed (default 0)")
    for p in (s, c, f):
        add_debug(p)
    return ap


def _show(path: str, width: int | None) -> None:
    for log in read_logs(path, width=width):
        m = log.mean()
        try:
            what = guess_method(log).label
        except ValueError:
            what = "autoregressive decoding"
        rounds = "rounds not logged" if log.rounds is None else f"{log.rounds:.0f} rounds"
        print(f"{log.method}: {FORMATS[log.source]}; {rounds}, {log.responses} "
              f"{log.unit_name}{'s' if log.responses != 1 else ''}; mean tau "
              f"{m.text(unit=log.unit_name)}; T = "
              f"{'?' if log.temperature is None else f'{log.temperature:g}'}, width = "
              f"{'?' if log.width is None else log.width}; modelled as {what}")
        if log.determines_law:
            hist = " ".join(f"{p:.3f}" for p in log.probs())
            print(f"  shares of tau = 1..{log.max_tau}: {hist}")
        if log.accept_rate is not None:
            print(f"  the engine's accept rate {log.accept_rate:.3f} (accepted drafts over its "
                  "configured width; not a per-node rate)")
        for note in log.notes:
            print(f"  - {note}")


def _compare(args: argparse.Namespace) -> None:
    log = read_log(args.file, args.method, width=args.width)
    t, drafter = _log_setting(log, args.temperature, args.drafter)
    drafted = _drafted_of(log, drafter, args.drafted)
    if args.predict is None:
        if args.regime is None:
            raise ValueError("compare needs --regime R (a log beside a regime) or --predict "
                             "METHOD (a fit and another method's tau)")
        spec = drafter_spec(resolve_regime(args.regime), drafter)
        spec = _log_depth(_target(log), spec, None)
        run = drafted.run_args()
        cost = get_cost_model(args.cost_model or "h200-qwen3-8b") \
            if drafted.method == "caddtree" else None
        dist = WorldSet(spec, contexts=args.contexts, worlds=2, seed=args.seed,
                        vocab_size=args.vocab).law(method=run[0], budget=run[1],
                                                   temperature=t, rule=drafted.rule, cost=cost)
        c = compare(log, dist)
        if args.json:
            print(json.dumps(c.to_dict(), indent=1))
        else:
            print(compare_markdown(c, unit=log.unit_name))
        if args.out is not None:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / "compare.md", compare_markdown(c, unit=log.unit_name))
            atomic_write_text(out / "compare.json", json.dumps(c.to_dict(), indent=1))
            plot_comparison(c, out / "compare.png")
            if not args.json:
                print(f"wrote {out / 'compare.md'}, compare.json and compare.png")
        return

    def progress(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr, flush=True)

    p = predict(log, temperature=t, drafter=drafter, drafted=drafted, method=args.predict,
                budget=args.budget, cost=args.cost_model, regime=args.regime, prior=args.prior,
                contexts=args.contexts, worlds=args.worlds, seed=args.seed,
                vocab_size=args.vocab, progress=progress)
    data = p.to_dict()
    data["log"] = {"path": log.path, "format": log.source, "method": log.method,
                   "mean": log.mean().to_dict(), "rounds": log.rounds,
                   "units": log.responses, "unit": log.unit_name, "width": log.width,
                   "determines_law": log.determines_law, "notes": list(log.notes)}
    text = prediction_markdown(p, unit=log.unit_name)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(f"Log: {_log_label(log)}")
        print(f"  mean tau {log.mean().text(unit=log.unit_name)}; "
              + "; ".join(log.notes[:1]))
        print(text)
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "compare.md", text)
        atomic_write_text(out / "compare.json", json.dumps(data, indent=1))
        plot_comparison(p.fit.comparison, out / "compare.png", names=("log", "closest fit"))


def _body(args: argparse.Namespace) -> int:
    if args.cmd == "show":
        _show(args.file, args.width)
    elif args.cmd == "compare":
        _compare(args)
    else:
        return from_log_main(args, contexts=args.contexts, seed=args.seed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m treespec_sim.acceptance show|compare|fit``."""
    return run_subcommand(build_parser(), argv, _body)


if __name__ == "__main__":
    sys.exit(main())
