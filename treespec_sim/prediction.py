r"""What another tree would give, predicted from an acceptance log, with the uncertainty the
log leaves (:func:`predict`).

A chain's log fixes the chain's law, not how much mass the drafter's second and third candidates
hold -- the part a tree recovers. Each calibrated regime is one *structure* of drafter and
target; refitted to the log through a near-miss knob (``variant_noise``: misses whose right token
is a sibling, which a tree recovers) or a hard-miss knob (``hard_miss``: misses no tree
recovers), each structure consistent with the log gives one prediction of another method's
``tau`` (and tokens per second, under a latency model), and the interval spans them: the log's
silence, made visible. ``docs/engine_logs.md`` runs it end to end; the leave-one-out validation
against DDTree's Table 1 is ``docs/results/leave_one_out/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .acceptance_readers import AcceptanceLog
from .cost import get_cost_model
from .regime_laws import (
    DRAFTERS,
    FIT_WARN_CDF_GAP,
    FIT_WARN_TV,
    Comparison,
    Distribution,
    Drafted,
    LogTarget,
    WorldSet,
    compare_target,
    drafter_spec,
    guess_method,
    log_target,
    regime_for_log,
    tv_noise,
)
from .stats import MeanCI, world_ci
from .synth import REGIMES, RegimeSpec, resolve_regime
from .synth.regimes import CALIBRATION_FILE, load_calibrated
from .validation import check_temperature

__all__ = ["MEAN_TOLERANCE", "PREDICT_KNOBS", "Candidate", "Prediction", "predict",
           "prediction_markdown"]

#: A mean-only log: a structure is consistent when its mean is this close (relative), or
#: within the log's interval.
MEAN_TOLERANCE = 0.02
#: The knobs :func:`predict` moves to make each structure reproduce the log: near misses (a
#: tree recovers them) and hard misses (no tree does), with their search ranges.
PREDICT_KNOBS = {"variant_noise": (0.0, 3.0), "hard_miss": (0.0, 0.5)}


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
        :data:`FIT_WARN_CDF_GAP` plus twice the log's and the model's own sampling noise
        (:func:`tv_noise` of the log's rounds and of the model's contexts);
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


def _spread(values: Sequence[MeanCI], scale: tuple[float, float], *, floor: float
            ) -> tuple[float, float, float]:
    """``(median of means, lowest low, highest high)``, each bound scaled by the log's own
    relative uncertainty ``scale = (low / mean, high / mean)``, the low one at least ``floor``
    (the smallest value possible); a value without an interval contributes its mean."""
    means = [v.mean for v in values]
    lows = [(v.low if v.has_interval else v.mean) * scale[0] for v in values]
    highs = [(v.high if v.has_interval else v.mean) * scale[1] for v in values]
    return float(np.median(means)), max(float(min(lows)), floor), float(max(highs))


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
        relative interval where it has one (the lower at least 1, the bonus token).
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


def _match_mean(tg: LogTarget, ws: WorldSet, base: RegimeSpec, knob: str,
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
    within :data:`FIT_WARN_TV` and :data:`FIT_WARN_CDF_GAP` of the log's, plus twice the
    two laws' own sampling noise (:func:`tv_noise` of the log's rounds and of the model's
    contexts: exact at T = 0, where a context's law is a point, an upper bound above; a
    mean-only log: within :data:`MEAN_TOLERANCE`). Each consistent candidate then runs
    ``method`` and the log's own method on fresh contexts of its worlds (context stream 18):
    its gain over the log's method, paired per world (the mean of the per-world ratios with a
    between-world interval, :func:`~treespec_sim.stats.world_ci`), and its ``tau`` as the log's
    mean times that gain; under ``cost`` the same for tokens per second (``sum tau / sum
    seconds`` per world).

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
    tg = log_target(target)
    t = check_temperature(temperature)
    drafted = _log_drafted(target, drafted, drafter)
    _check_method(method, cost)
    pred = Drafted(method, budget if method != "chain" else None, "follow", drafter)
    pred_run, log_run = pred.run_args(), drafted.run_args()
    cost_name = None if cost is None else (cost if isinstance(cost, str) else
                                           type(cost).__name__)
    cost = get_cost_model(cost) if isinstance(cost, str) else cost
    knob_ranges = _knob_ranges(knobs)
    structures, notes = _structures(regime, prior, knob_ranges)
    task = _Task(log_run, pred_run, t, drafted.rule, cost)
    worlds_of = _StructureWorlds(contexts, worlds, seed, vocab_size)
    cands: list[Candidate] = []
    for spec, knob in structures:
        base = regime_for_log(tg, drafter_spec(spec, drafter), None)
        cands.append(_candidate(tg, spec.name, base, knob, knob_ranges.get(knob),
                                *worlds_of(base), task, max_evals))
        if progress is not None:
            progress(_candidate_line(cands[-1]))
    used, best, warning = _used(cands, tg, knob_ranges)
    tau, gain, extra = _intervals(cands, used, tg, cost_name)
    notes += _notes(tg, drafter, method)
    return Prediction(method, pred.budget, drafter, t, drafted, tg.mean, tuple(cands),
                      tuple(used), *tau, *gain, **extra, best=best, warning=warning,
                      notes=tuple(notes))


def _log_drafted(target: AcceptanceLog | Distribution | float, drafted: Drafted | None,
                 drafter: str) -> Drafted:
    """What the log's rounds drafted, by ``drafter`` (default :func:`guess_method`, or a
    chain)."""
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter: {drafter!r} is not one of {', '.join(DRAFTERS)}")
    if drafted is None:
        drafted = guess_method(target, drafter) if isinstance(target, AcceptanceLog) \
            else Drafted("chain", None, "follow", drafter)
    return dataclasses.replace(drafted, drafter=drafter)


def _check_method(method: str, cost: Any) -> None:
    """The predicted method: ``ddtree``, ``chain``, or ``caddtree`` under a latency model."""
    if method not in ("ddtree", "caddtree", "chain"):
        raise ValueError(f"predict: method {method!r} is not ddtree, caddtree or chain")
    if method == "caddtree" and cost is None:
        raise ValueError("predict caddtree needs a latency model (--cost-model): its budget is "
                         "chosen by the cost")


def _knob_ranges(knobs: Sequence[str] | None) -> dict[str, tuple[float, float]]:
    """The knobs to refit through (default :data:`PREDICT_KNOBS`) with their ranges."""
    for k in knobs or ():
        if k not in PREDICT_KNOBS:
            raise ValueError(f"knobs: {k!r} is not one of {', '.join(PREDICT_KNOBS)}")
    return {k: PREDICT_KNOBS[k] for k in (knobs or PREDICT_KNOBS)}


def _structures(regime: str | RegimeSpec | None, prior: Sequence[str | RegimeSpec] | None,
                knob_ranges: dict[str, tuple[float, float]]
                ) -> tuple[list[tuple[RegimeSpec, str | None]], list[str]]:
    """The ``(structure, knob)`` pairs to refit (``regime`` alone, as given: knob ``None``;
    else every structure of ``prior``, default the calibrated regimes, with every knob), and
    the notes they call for."""
    if regime is not None:
        return [(resolve_regime(regime), None)], [
            "one regime as given: the interval is its worlds' only and does not include what "
            "the log cannot identify"]
    names = list(prior) if prior is not None else _calibrated()
    if not names:
        raise ValueError("predict: no structures (no calibrated regime is installed; give "
                         "--regime or --prior)")
    return [(resolve_regime(n), k) for n in names for k in knob_ranges], []


@dataclass(frozen=True)
class _Task:
    """What each candidate runs: the log's method (``log_run``, to match the log; under its
    ``rule``) and the predicted one (``pred_run``), as ``(method, budget)`` of
    :meth:`Drafted.run_args`, at temperature ``t``, under latency model ``cost``."""

    log_run: tuple[Any, int | None]
    pred_run: tuple[Any, int | None]
    t: float
    rule: str
    cost: Any


class _StructureWorlds:
    """A structure's world sets: the fit's, and fresh contexts of its worlds (stream 18) for
    the prediction; one structure's at a time (~0.3 GB each at ``V = 32768``)."""

    def __init__(self, contexts: int, worlds: int, seed: int, vocab_size: int | None) -> None:
        self.contexts, self.worlds, self.seed, self.vocab_size = contexts, worlds, seed, vocab_size
        self.sets: dict[str, tuple[WorldSet, WorldSet]] = {}

    def __call__(self, base: RegimeSpec) -> tuple[WorldSet, WorldSet]:
        if base.name not in self.sets:
            self.sets.clear()
            fit_set = WorldSet(base, contexts=self.contexts, worlds=self.worlds, seed=self.seed,
                               vocab_size=self.vocab_size)
            self.sets[base.name] = (fit_set, fit_set.with_stream(18))
        return self.sets[base.name]


def _candidate(tg: LogTarget, name: str, base: RegimeSpec, knob: str | None,
               bounds: tuple[float, float] | None, fit_ws: WorldSet, new_ws: WorldSet,
               task: _Task, max_evals: int) -> Candidate:
    """Structure ``base`` refitted to the log's mean through ``knob`` (``None``: as given) on
    ``fit_ws``, assessed against the log's law and, where it reached the mean, what it
    predicts on ``new_ws``."""
    if knob is None:
        value, dist, why = None, fit_ws.law(method=task.log_run[0], budget=task.log_run[1],
                                            temperature=task.t, rule=task.rule), ""
        fitted = base
    else:
        value, dist, why = _match_mean(tg, fit_ws, base, knob, bounds, run=task.log_run,
                                       temperature=task.t, rule=task.rule,
                                       max_evals=max_evals)
        fitted = None if value is None else dataclasses.replace(
            base, **{knob: value}, name=f"{base.name}+{knob}",
            description=f"{base.name} with {knob} refitted to {Path(str(tg.label)).name}")
    comp = None if dist is None else compare_target(tg, dist)
    cand = Candidate(name, knob, value, fitted, comp, False, why)
    if fitted is None:
        return cand
    cand = _assess(cand, tg, dist)
    return _predicted(cand, new_ws, fitted, task.pred_run, task.log_run, task.t, task.rule,
                      task.cost, tg.mean.mean)


def _used(cands: list[Candidate], tg: LogTarget, knob_ranges: dict[str, tuple[float, float]]
          ) -> tuple[list[int], int, str | None]:
    """The candidates the interval spans (the consistent ones, else every one that reached
    the log's mean, with a warning), and the one closest to the log."""
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
                   "twice the log's and the model's own sampling noise): the interval "
                   "spans every structure that matches its mean, and rests on poor fits")
    best = min(reached, key=lambda i: (cands[i].comparison.tv if cands[i].comparison.law
                                       else abs(cands[i].comparison.model_mean.mean
                                                - tg.mean.mean)))
    return used, best, warning


def _intervals(cands: list[Candidate], used: list[int], tg: LogTarget, cost_name: str | None
               ) -> tuple[tuple[float, float, float], tuple[float, float, float], dict]:
    """The prediction's ``tau`` and gain (median, low, high: :func:`_spread` over ``used``,
    scaled by the log's own relative interval where it has one) and, under a latency model
    (``cost_name``), its tokens/s and speedup as :class:`Prediction`'s fields."""
    scale = (1.0, 1.0)
    if tg.mean.has_interval and tg.mean.mean > 0:
        scale = (tg.mean.low / tg.mean.mean, tg.mean.high / tg.mean.mean)
    # a round commits at least its bonus token, and nothing runs at negative speed: a bound
    # of a few worlds' t-interval past those says nothing more than the bound itself
    tau = _spread([cands[i].tau for i in used], scale, floor=1.0)
    gain = _spread([cands[i].gain for i in used], (1.0, 1.0), floor=0.0)
    if cost_name is None:
        return tau, gain, {}
    tps = _spread([cands[i].tokens_per_s for i in used], scale, floor=0.0)
    sp = _spread([cands[i].speedup for i in used], (1.0, 1.0), floor=0.0)
    return tau, gain, {"tokens_per_s": tps[0], "tokens_per_s_low": tps[1],
                       "tokens_per_s_high": tps[2], "speedup": sp[0], "speedup_low": sp[1],
                       "speedup_high": sp[2], "cost_model": cost_name}


def _notes(tg: LogTarget, drafter: str, method: str) -> list[str]:
    """What the reader of the prediction should know about the log and the method."""
    notes = []
    if not tg.mean.has_interval:
        notes.append("the log's mean has no interval (a single unit): the prediction's "
                     "interval does not include the log's own sampling error")
    if drafter == "autoregressive" and method == "ddtree":
        notes.append("an autoregressive drafter: 'ddtree' is DDTree's best-first rule on its "
                     "conditional path scores (ar-ddtree, an EAGLE-2-style tree)")
    return notes


def _calibrated() -> list[str]:
    return [n for n in load_calibrated(CALIBRATION_FILE) if n in REGIMES]


def _noise(tg: LogTarget, dist: Distribution) -> float:
    """Twice the sampling noise of the two laws compared: the log's rounds, and the model's
    contexts (its law is their mean: to first order exact at T = 0, where each context's law
    is a point, and an upper bound above)."""
    return 2.0 * (tg.noise + tv_noise(dist.probs, dist.taus.size))


def _assess(c: Candidate, tg: LogTarget, dist: Distribution) -> Candidate:
    comp = c.comparison
    if comp.law:
        noise = _noise(tg, dist)
        ok = comp.tv <= FIT_WARN_TV + noise and comp.ks <= FIT_WARN_CDF_GAP + noise
        why = "" if ok else (f"its law is {comp.tv:.3f} (total variation) and {comp.ks:.3f} "
                             f"(CDF gap) from the log's, above {FIT_WARN_TV:g} + {noise:.3f} "
                             "(twice the log's and the model's own sampling noise)")
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
