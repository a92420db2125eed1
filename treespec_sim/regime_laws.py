r"""A regime's acceptance-length law for what a log drafted, beside the log's.

What a log's rounds drafted (:class:`Drafted`: a chain of the log's width, DDTree at a budget,
CaDDTree; from a block-diffusion drafter's marginals or an autoregressive drafter's
conditionals, :data:`DRAFTERS`), a regime's exact law of it (:class:`WorldSet`,
:func:`regime_distribution`: under rule ``follow`` a round's accepted path ends at depth ``d``
with the exit mass at depth ``d``, :attr:`treespec_sim.engine.Round.exits`, so each context's
law is exact and the regime's is their mean), and the comparison of the two
(:class:`Comparison`: total variation, the largest CDF gap, the means with their intervals,
and a warning above :data:`FIT_WARN_TV` / :data:`FIT_WARN_CDF_GAP`). The fit
(:mod:`treespec_sim.acceptance`) and the prediction (:mod:`treespec_sim.prediction`) are built
on these.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .acceptance_readers import FORMATS, AcceptanceLog
from .cost import get_cost_model
from .engine import run_round
from .seeds import cell_rng
from .stats import MeanCI, mean_ci
from .synth import RegimeSpec, make_world, resolve_regime
from .validation import check_positive_int, check_rng, check_temperature

__all__ = ["DRAFTERS", "FIT_WARN_CDF_GAP", "FIT_WARN_TV", "Comparison", "Distribution",
           "Drafted", "LogTarget", "WorldSet", "compare", "compare_markdown",
           "compare_target", "drafter_spec", "guess_method", "log_label", "log_target",
           "plot_comparison", "regime_distribution", "regime_for_log", "trace_distribution",
           "tv_noise"]

#: The drafters a log can come from, and the knobs that make a regime's drafter of that kind.
DRAFTERS = {"block-diffusion": {}, "autoregressive": {"correction_quality": 1.0}}
#: A fit farther from the log than this total variation, or ...
FIT_WARN_TV = 0.05
#: ... than this largest gap between the two CDFs, is flagged (and, in :func:`predict`, a
#: structure that cannot come this close is not consistent with the log).
FIT_WARN_CDF_GAP = 0.05


def drafter_spec(spec: RegimeSpec, drafter: str) -> RegimeSpec:
    """``spec`` with the drafter knobs of ``drafter`` (:data:`DRAFTERS`)."""
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter: {drafter!r} is not one of {', '.join(DRAFTERS)}")
    return dataclasses.replace(spec, **DRAFTERS[drafter]) if DRAFTERS[drafter] else spec


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

    def run_args(self) -> tuple[str, int | None]:
        """``(method, budget)`` for :func:`~treespec_sim.engine.run_round` (a chain of
        ``k < L`` tokens from a block-diffusion drafter: ``chain-prefix`` at ``k``)."""
        ar = self.drafter == "autoregressive"
        if self.method == "chain":
            if ar:
                return "ar-chain", self.budget
            return ("chain", None) if self.budget is None else ("chain-prefix", self.budget)
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


def _samelog_target(a: RegimeSpec, b: RegimeSpec) -> bool:
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
            rng = cell_rng(self.seed + i, stream)
            m = n // k + (i < n % k)
            self.contexts.append([w.sample_context(rng) for _ in range(m)])
            self.states.append(rng.bit_generator.state)
            self.ref.append(w)

    def with_stream(self, stream: int) -> WorldSet:
        """The same worlds (their target tables already built) with fresh contexts from
        context stream ``stream``."""
        other = object.__new__(WorldSet)
        other.spec, other.seed = self.spec, self.seed
        other.vocab_size, other.depth, other.stream = self.vocab_size, self.depth, stream
        other.ref, other.contexts, other.states = list(self.ref), [], []
        for i, (w, cs) in enumerate(zip(self.ref, self.contexts, strict=True)):
            rng = cell_rng(self.seed + i, stream)
            other.contexts.append([w.sample_context(rng) for _ in cs])
            other.states.append(rng.bit_generator.state)
        return other

    def law(self, trial: RegimeSpec | None = None, *, method: str = "ddtree",
            budget: int | None = 64, temperature: float = 0.0, rule: str = "follow",
            cost: Any = None, label: str | None = None) -> Distribution:
        """The law of ``trial`` (default the regime itself) on these worlds' contexts."""
        spec = self.spec if trial is None else trial
        t = check_temperature(temperature)
        probs, taus, secs, world = [], [], [], []
        shared = _samelog_target(spec, self.spec)
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
                    rng = cell_rng(self.seed + i, self.stream)
                    ctxs = [w.sample_context(rng) for _ in ctxs]
            p, tau, sec = _contexts_law(w, ctxs, method=method, budget=budget, temperature=t,
                                        rule=rule, rng=rng, cost=cost)
            probs.append(p)
            taus.append(tau)
            secs.append(sec)
            world.append(np.full(tau.size, i, dtype=np.int64))
        probs_all = np.concatenate(probs)
        return Distribution(label or f"{spec.name} ({method}"
                            f"{'' if budget is None else f'@{budget}'}, T = {t:g})",
                            probs_all.mean(axis=0), np.concatenate(taus),
                            np.arange(probs_all.shape[0]), method, budget, t, rule,
                            np.concatenate(world),
                            None if cost is None else np.concatenate(secs))


def regime_distribution(regime: str | RegimeSpec, *, method: str = "ddtree",
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
    method : str
        A registered method (``chain-prefix``: a chain of ``budget`` tokens).
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
    rng = cell_rng(0) if rng is None else check_rng(rng)
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


def log_label(log: AcceptanceLog) -> str:
    rounds = "" if log.rounds is None else f"{log.rounds:.0f} rounds, "
    return (f"{Path(log.path).name}: {log.method} ({FORMATS[log.source]}; {rounds}"
            f"{log.responses} {log.unit_name}{'s' if log.responses != 1 else ''})")


def compare(log: AcceptanceLog | Distribution, model: Distribution) -> Comparison:
    """A log's (or a trace's) acceptance-length law beside a model's (a log of means only:
    its mean beside the model's)."""
    if isinstance(log, AcceptanceLog):
        label, lmean = log_label(log), log.mean()
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

    # up to the longest round either law has (a chain of 3 in a regime of depth 15: 4, not 16)
    seen = np.flatnonzero((np.nan_to_num(c.log_probs) > 0) | (c.model_probs > 0))
    m = min(int(seen[-1]) + 1 if seen.size else 1, c.model_probs.size)
    k = np.arange(1, m + 1)
    lp = np.nan_to_num(c.log_probs)[:m]
    mp = c.model_probs[:m]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    a.bar(k, lp, width=0.8, color="tab:blue", alpha=0.7,
          label=f"{names[0]}: mean {c.log_mean.mean:.2f}")
    a.plot(k, mp, "o-", color="tab:red", ms=4,
           label=f"{names[1]}: mean {c.model_mean.mean:.2f}")
    a.set_xlabel("τ: tokens committed per round (bonus counted)")
    a.set_ylabel("share of rounds")
    a.set_title("acceptance-length histogram", fontsize=10)
    a.legend(fontsize=8)
    a.grid(alpha=0.3, axis="y")
    if m <= 20:
        a.set_xticks(k)
        b.set_xticks(k)
    kk = np.append(k, k[-1] + 1)
    if c.law:
        b.step(kk, np.append(np.cumsum(lp), 1.0), where="post", color="tab:blue",
               label=names[0])
    b.step(kk, np.append(np.cumsum(mp), 1.0), where="post", color="tab:red",
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
class LogTarget:
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


def log_target(target: AcceptanceLog | Distribution | float) -> LogTarget:
    if isinstance(target, AcceptanceLog):
        return LogTarget(target.probs() if target.determines_law else None, target.mean(),
                       target.path, target, target.rounds)
    if isinstance(target, Distribution):
        return LogTarget(np.asarray(target.probs), target.mean(), target.label, target,
                       float(target.taus.size))
    x = float(target)
    if not (math.isfinite(x) and x >= 1):
        raise ValueError(f"target mean must be a number >= 1; got {target!r}")
    return LogTarget(None, MeanCI(x, math.nan, math.nan), f"mean {x:g}", x)


def compare_target(t: LogTarget, dist: Distribution) -> Comparison:
    if isinstance(t.source, AcceptanceLog | Distribution):
        return compare(t.source, dist)
    nan = np.full(dist.probs.size, np.nan)
    return Comparison(t.label, dist.label, nan, dist.probs, nan, t.mean, dist.mean(),
                      math.nan, math.nan, t.objective(dist))


def regime_for_log(target: LogTarget, spec: RegimeSpec, depth: int | None) -> RegimeSpec:
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
