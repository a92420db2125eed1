r"""Acceptance logs: hold them against a regime, fit one, and predict another tree's gain.

An engine or a research tool keeps, per decoded round (or per request, or per logging window),
how many tokens the rounds committed; :mod:`treespec_sim.acceptance_readers` reads them in the
formats people have (vLLM's and SGLang's metrics, Spec-Bench, AIPerf, the DDTree/TEV/CaDDTree
and JetSpec logs) into :class:`AcceptanceLog` values that say what the log determines and what
it does not. This module (with :mod:`treespec_sim.regime_laws`, a regime's law beside a log's,
and :mod:`treespec_sim.prediction`, another tree's gain) answers the questions a log is read
for, and is their command line:

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
import sys
from collections.abc import Sequence
from dataclasses import dataclass
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
from .files import atomic_write_text
from .prediction import (
    MEAN_TOLERANCE,
    PREDICT_KNOBS,
    Candidate,
    Prediction,
    predict,
    prediction_markdown,
)
from .regime_laws import (
    DRAFTERS,
    FIT_WARN_CDF_GAP,
    FIT_WARN_TV,
    Comparison,
    Distribution,
    Drafted,
    LogTarget,
    WorldSet,
    compare,
    compare_markdown,
    compare_target,
    drafter_spec,
    guess_method,
    log_label,
    log_target,
    plot_comparison,
    regime_distribution,
    regime_for_log,
    trace_distribution,
    tv_noise,
)
from .synth import REGIMES, RegimeSpec, resolve_regime
from .torch_save import Record, load_torch_save
from .validation import check_positive_int, check_temperature

__all__ = ["DEFAULT_WIDTH", "DRAFTERS", "FIT_KNOBS", "FIT_WARN_CDF_GAP", "FIT_WARN_TV",
           "FORMATS", "MEAN_TOLERANCE", "PREDICT_KNOBS", "AcceptanceLog", "Candidate",
           "Comparison", "Distribution", "Drafted", "LogFit", "Prediction", "Record",
           "WorldSet", "compare", "compare_markdown", "drafter_spec", "fit_log",
           "guess_method", "load_torch_save", "main", "plot_comparison", "predict",
           "prediction_markdown", "read_log", "read_logs", "regime_distribution",
           "resolve_regime", "trace_distribution", "tv_noise", "write_fit", "write_regime"]


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
    tg = log_target(target)
    drafted = drafted or Drafted(method, budget, rule, drafter)
    spec0 = drafter_spec(resolve_regime(base), drafted.drafter)
    t = check_temperature(temperature)
    knobs = _fit_knobs(knobs, t)
    max_evals = check_positive_int(max_evals, "max_evals")
    if vocab_size is not None:
        vocab_size = check_positive_int(vocab_size, "vocab_size")
    spec0 = regime_for_log(tg, spec0, depth)
    run_args = drafted.run_args()
    cost = get_cost_model(cost) if isinstance(cost, str) else cost
    ws = WorldSet(spec0, contexts=contexts, worlds=worlds, seed=seed, vocab_size=vocab_size)
    objective = _FitObjective(tg, ws, spec0, knobs, run_args, drafted.rule, t, cost)
    start = {k: float(getattr(spec0, k)) for k in knobs}
    z0 = np.array([_to_z(FIT_KNOBS[k], start[k]) for k in knobs])
    f0 = objective(z0)
    best = _nelder_mead(objective, z0, f0, max_evals)
    spec = dataclasses.replace(objective.spec_at(best), name=name or f"fit-{spec0.name}",
                               description=f"fitted to an acceptance log ({drafted.label}, "
                                           f"T = {t:g}) from {spec0.name}")
    dist = dataclasses.replace(objective.law_at(best),
                               label=f"{spec.name} ({drafted.label}, T = {t:g})")
    return LogFit(spec, {k: float(getattr(spec, k)) for k in knobs}, start, tg.probs,
                  compare_target(tg, dist), f0, objective.evals, drafted, t,
                  getattr(target, "path", getattr(target, "label", str(tg.label))))


def _fit_knobs(knobs: Sequence[str] | None, t: float) -> tuple[str, ...]:
    """The knobs to fit: ``knobs`` (each of :data:`FIT_KNOBS`), or by default ``hard_miss``,
    ``variant_noise``, ``degradation`` and, at ``T > 0``, ``logit_scale``."""
    knobs = tuple(knobs) if knobs else (("hard_miss", "variant_noise", "degradation")
                                         + (("logit_scale",) if t > 0 else ()))
    for kname in knobs:
        if kname not in FIT_KNOBS:
            raise ValueError(f"knobs: {kname!r} is not a fittable knob; known: "
                             f"{', '.join(FIT_KNOBS)}")
    return knobs


class _FitObjective:
    """:func:`fit_log`'s objective on unconstrained coordinates ``z`` (one per knob,
    :data:`FIT_KNOBS`): the log's distance to the regime at ``z`` on the same worlds and
    contexts every time; each point's law computed once (:meth:`law_at` reads it back)."""

    def __init__(self, tg: LogTarget, ws: WorldSet, spec0: RegimeSpec, knobs: tuple[str, ...],
                 run_args: tuple[Any, int | None], rule: str, t: float, cost: Any) -> None:
        self.tg, self.ws, self.spec0, self.knobs = tg, ws, spec0, knobs
        (self.run_method, self.run_budget), self.rule = run_args, rule
        self.t, self.cost = t, cost
        self.kinds = [FIT_KNOBS[k] for k in knobs]
        self.evals = 0
        self.cache: dict[tuple, tuple[float, Distribution | None]] = {}

    def spec_at(self, z: np.ndarray) -> RegimeSpec:
        """The base regime with the knobs at ``z``."""
        vals = {k: _from_z(kind, float(x))
                for k, kind, x in zip(self.knobs, self.kinds, z, strict=True)}
        return dataclasses.replace(self.spec0, **vals)

    def __call__(self, z: np.ndarray) -> float:
        key = tuple(np.round(z, 12))
        if key not in self.cache:
            self.evals += 1
            try:
                dist = self.ws.law(self.spec_at(z), method=self.run_method,
                                   budget=self.run_budget,
                                   temperature=self.t, rule=self.rule, cost=self.cost)
            except ValueError:  # a knob value the regime refuses: outside the feasible set
                self.cache[key] = (math.inf, None)
            else:
                self.cache[key] = (self.tg.objective(dist), dist)
        return self.cache[key][0]

    def law_at(self, z: np.ndarray) -> Distribution:
        """The regime's law at an evaluated point ``z``."""
        return self.cache[tuple(np.round(z, 12))][1]


def _nelder_mead(objective: _FitObjective, z0: np.ndarray, f0: float, max_evals: int
                 ) -> np.ndarray:
    """Nelder-Mead (:func:`scipy.optimize.minimize`) from ``z0`` (objective ``f0``), a simplex
    of steps 0.5 along each coordinate, ``max_evals`` evaluations in all: the best point, or
    ``z0`` if nothing beat it."""
    from scipy.optimize import minimize

    res = minimize(objective, z0, method="Nelder-Mead",
                   options={"maxfev": max(1, max_evals - 1), "xatol": 1e-3, "fatol": 1e-7,
                            "initial_simplex": np.vstack([z0] + [z0 + 0.5 * np.eye(len(z0))[i]
                                                                  for i in range(len(z0))])})
    return res.x if objective(res.x) <= f0 else z0


def write_fit(path: Path | str, fit: LogFit) -> Path:
    """Write a fitted regime as a calibration-style file (``{"regimes": {name: {"knobs":
    ..., "fit": ...}}}``) that :func:`~treespec_sim.synth.resolve_regime`, ``--regime FILE``
    and the sweep's ``regimes = ["FILE"]`` read; atomically."""
    return write_regime(path, fit.spec, fit.to_dict())


def write_regime(path: Path | str, spec: RegimeSpec, fit: dict) -> Path:
    """Write one regime and what it was fitted to (``fit``: its ``drafter``, ``temperature``,
    distances, ...) as a calibration-style file; atomically."""
    path = Path(path)
    data = {"regimes": {spec.name: {"knobs": dataclasses.asdict(spec), "fit": fit}}}
    atomic_write_text(path, json.dumps(data, indent=1, default=float))
    return path


# ----------------------------------------------------------------------------- CLI
def add_log_arguments(ap: argparse.ArgumentParser, *, short: bool, what: str) -> None:
    """``--log-method KEY`` and ``--log-temperature T`` (with ``short``, also spelled
    ``--method`` and ``--temperature``): the same names in every command that reads a log;
    ``what`` starts their help (``"with --from-log: "``)."""
    ap.add_argument("--log-method", *(["--method"] if short else []), dest="log_method",
                    metavar="KEY", default=None,
                    help=f"{what}the log's method key (default: its largest DDTree budget, "
                         "else caddtree, else dflash; `show` lists them)")
    ap.add_argument("--log-temperature", *(["--temperature"] if short else []),
                    dest="log_temperature", type=temperature, default=None, metavar="T",
                    help=f"{what}the decode's temperature (required where the log does not "
                         "say it; default: the log's)")


def add_from_log_arguments(ap: argparse.ArgumentParser, *, file_option: bool = True) -> None:
    """The options of a fit to a log (``python -m treespec_sim.calibrate --from-log FILE`` and,
    the file positional, ``python -m treespec_sim.acceptance fit FILE``)."""
    if file_option:
        ap.add_argument("--from-log", metavar="FILE", default=None,
                        help="fit a regime to an acceptance log (an engine's metrics, "
                             "Spec-Bench, AIPerf, benchmark.py --save-path .pt, CaDDTree "
                             "traces, JetSpec .jsonl; docs/traces.md, 'Public logs') instead of "
                             "the published cells (default: none, the published cells)")
    prefix = "with --from-log: " if file_option else ""
    add_log_arguments(ap, short=not file_option, what=prefix)
    _add_drafter(ap, prefix)
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
            raise ValueError(f"--log-temperature {temp:g}: the log records T = "
                             f"{log.temperature:g} (give none, or that one)")
        temp = log.temperature
    if temp is None:
        raise ValueError(f"{log.path}: the log does not say its temperature, and the worlds' "
                         "target is tempered by it: pass --log-temperature T (or "
                         "--temperature T)")
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
    add_log_arguments(c, short=True, what="")
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
                   help="folder for compare.md, compare.json, compare.png and, with --predict, "
                        "regime.json (the closest structure refitted; default: none, print "
                        "only)")
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
    log = read_log(args.file, args.log_method, width=args.width)
    t, drafter = _log_setting(log, args.log_temperature, args.drafter)
    drafted = _drafted_of(log, drafter, args.drafted)
    if args.predict is None:
        if args.regime is None:
            raise ValueError("compare needs --regime R (a log beside a regime) or --predict "
                             "METHOD (a fit and another method's tau)")
        spec = drafter_spec(resolve_regime(args.regime), drafter)
        spec = regime_for_log(log_target(log), spec, None)
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
        print(f"Log: {log_label(log)}")
        print(f"  mean tau {log.mean().text(unit=log.unit_name)}; "
              + "; ".join(log.notes[:1]))
        print(text)
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "compare.md", text)
        atomic_write_text(out / "compare.json", json.dumps(data, indent=1))
        plot_comparison(p.fit.comparison, out / "compare.png", names=("log", "closest fit"))
        best = p.fit
        name = f"fit-{Path(log.path).stem}"
        spec = dataclasses.replace(best.spec, name=name,
                                   description=f"{best.spec.description} (the closest of "
                                               f"{len(p.candidates)} structures)")
        write_regime(out / "regime.json", spec, {
            "drafter": drafter, "temperature": t, "source": log.path,
            "method": drafted.method, "budget": drafted.budget, "base": best.base,
            "knob": best.knob, "value": best.value, **data["fit"]})
        if not args.json:
            print(f"wrote {out / 'compare.md'}, compare.json, compare.png and regime.json (the "
                  "closest structure, refitted: --regime / the sweep's regimes / export)")


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
