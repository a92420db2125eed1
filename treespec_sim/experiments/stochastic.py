r"""Sampled trees at T > 0: deterministic trees, sampled chains and Tsubame on the same contexts.

For every cell ``(regime, drafter, T, budget)`` the same fresh contexts (drawn from the target's
own process) are drafted by every method; each drafted tree's :math:`E[\tau]` is exact over the
verifier's coins (only contexts and drafted tokens are sampled). Throughput uses a latency
preset: :math:`\tau / (C_d + C_v(n + 1))` with ``n`` the tree's actual size; the correction head's
own cost (a lookup per node) is not modelled.

Drafters (knobs of the synthetic drafter, :mod:`treespec_sim.synth.drafter`):

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

This module is the ``stochastic`` family of the sweep (``python -m treespec_sim.sweep --preset
stochastic``); every round is one :func:`treespec_sim.engine.run_round`.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..cost import get_cost_model
from ..engine import run_rounds
from ..methods import uses_budget
from ..plot import figure_legend
from ..stats import mean_ci, throughput, world_ci, world_columns
from ..synth import get_regime

__all__ = ["CLAIMS", "DEFAULT_METHODS", "DRAFTERS", "claims_table", "drafter_spec",
           "plot_tau_vs_temperature", "run_cell", "table"]

#: Drafter variants: name -> knob overrides of the regime.
DRAFTERS = {
    "none": {"correction_quality": 0.0},
    "corrected": {"correction_quality": 0.8},
    "strong": {"correction_quality": 0.95, "_halve": ("mismatch", "degradation", "junk")},
}

def drafter_spec(regime: str, drafter: str):
    """The regime's :class:`~treespec_sim.synth.RegimeSpec` with the drafter's knobs."""
    if drafter not in DRAFTERS:
        raise ValueError(f"unknown drafter {drafter!r}; known drafters: {', '.join(DRAFTERS)}")
    spec = get_regime(regime)
    knobs = dict(DRAFTERS[drafter])
    halve = knobs.pop("_halve", ())
    for name in halve:
        knobs[name] = getattr(spec, name) / 2
    return dataclasses.replace(spec, name=f"{regime}+{drafter}", **knobs)


#: The family's default methods (names of :data:`treespec_sim.methods.METHODS`).
DEFAULT_METHODS = ("chain", "ddtree", "sampled-chain", "sampled-chain-corrected", "tsubame-rrs",
                   "tsubame-rrsw", "tsubame-univer")


def run_cell(worlds: Sequence, *, seeds: Sequence[int], rounds: Sequence[int], regime: str,
             drafter: str, temperature: float, budget: int, methods: tuple[str, ...],
             cost_name: str) -> list[dict]:
    """Every method on the same contexts, one :func:`run_round` each; one row per method.

    World ``i`` (``worlds[i]``, seed ``seeds[i]``) gives ``rounds[i]`` contexts; the row pools
    them (``tau_mean`` and its t-interval over every context, throughput over every round) and
    adds the between-world columns (:func:`treespec_sim.stats.world_columns`). ``taus`` holds
    the per-context exact E[tau], world after world, for paired comparisons.
    """
    if not (len(worlds) == len(seeds) == len(rounds) >= 1):
        raise ValueError(f"worlds, seeds and rounds must have the same length >= 1; got "
                         f"{len(worlds)}, {len(seeds)}, {len(rounds)}")
    cost = get_cost_model(cost_name)
    # contexts depend on (regime, drafter, T) and the world's seed only: every method and
    # budget sees the same ones, so differences between methods are paired
    ctx_key = f"{regime}|{drafter}|{temperature!r}"
    key = f"{ctx_key}|{budget}"
    contexts = []
    for world, seed, n in zip(worlds, seeds, rounds, strict=True):
        rng_ctx = np.random.default_rng([seed, zlib.crc32(ctx_key.encode()), 0])
        contexts.append([world.sample_context(rng_ctx) for _ in range(n)])
    ar_seconds = float(cost.verify_cost(1))
    depth = worlds[0].depth
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        sized = uses_budget(method)
        per_world = []
        for world, seed, cs in zip(worlds, seeds, contexts, strict=True):
            rng = np.random.default_rng([seed, zlib.crc32(f"{key}|{method}".encode())])
            per_world.append([seq[0] for seq in run_rounds(
                world, contexts=cs, rng=rng, method=method,
                budget=budget if sized else None, temperature=temperature, sample=False,
                cost=cost, record=lambda r: (r.expected_tau, r.tree_size, r.cost_s, r.rule))])
        per = [p for part in per_world for p in part]
        taus = np.array([p[0] for p in per])
        sizes = np.array([p[1] for p in per], dtype=np.float64)
        seconds = np.array([p[2] for p in per])
        ci = mean_ci(taus)
        thr = throughput(taus, seconds)
        rows.append({
            "regime": regime, "drafter": drafter, "method": method, "verifier": per[0][3],
            "temperature": temperature, "budget": budget if sized else depth,
            "cost_model": cost_name, "rounds": int(sum(rounds)), "seed": seeds[0],
            "tau_mean": ci.mean, "tau_ci_low": ci.low, "tau_ci_high": ci.high,
            **world_columns([float(np.mean([p[0] for p in part])) for part in per_world]),
            "tree_size_mean": float(sizes.mean()), "round_time_s": float(seconds.mean()),
            "throughput_tok_s": thr, "speedup_vs_ar": thr * ar_seconds,
            "wall_s": time.perf_counter() - t0, "taus": taus.tolist(),
        })
    return rows


def _at_budget(row: dict, budget: int) -> bool:
    """A row at ``budget`` (chains, whatever their budget, stand beside every budget)."""
    return row["budget"] == budget or not uses_budget(row["method"])


def table(rows: list[dict], budget: int) -> str:
    """Markdown: tau and throughput per method at one budget (chains at their own length)."""
    lines = ["| regime | drafter | T | method | verifier | τ [95% t-CI, contexts pooled] | "
             "nodes | tok/s | speedup |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not _at_budget(r, budget):
            continue
        lines.append(f"| {r['regime']} | {r['drafter']} | {r['temperature']:g} | {r['method']} | "
                     f"{r['verifier']} | {r['tau_mean']:.2f} [{r['tau_ci_low']:.2f}, "
                     f"{r['tau_ci_high']:.2f}] | {r['tree_size_mean']:.0f} | "
                     f"{r['throughput_tok_s']:.0f} | {r['speedup_vs_ar']:.2f}× |")
    return "\n".join(lines)


#: Claims compared in :func:`claims_table`: (label, method a, method b); a - b is reported.
CLAIMS = (
    ("Tsubame ≈ DDTree at T = 0", "tsubame-rrsw", "ddtree"),
    ("deterministic tree vs corrected sampled chain", "ddtree", "sampled-chain-corrected"),
    ("Tsubame-RRSw vs deterministic tree", "tsubame-rrsw", "ddtree"),
    ("Tsubame-RRSw vs corrected sampled chain", "tsubame-rrsw", "sampled-chain-corrected"),
    ("Tsubame-RRSw vs Tsubame-RRS", "tsubame-rrsw", "tsubame-rrs"),
    ("Tsubame-UniVer vs Tsubame-RRSw", "tsubame-univer", "tsubame-rrsw"),
    ("tempered plan vs DDTree plan (Tsubame-RRSw)", "tsubame-rrsw-tempered-plan",
     "tsubame-rrsw"),
)


def claims_table(rows: list[dict], budget: int) -> str:
    """Paired differences in E[tau] (same contexts) at ``budget``: the mean and 95% t-interval
    over the contexts pooled over the cell's worlds, then the t-interval over the per-world
    differences (``k - 1`` degrees of freedom; only with ``tau_world_means`` in the rows)."""
    index = {(r["regime"], r["drafter"], r["temperature"], r["method"]): r for r in rows
             if _at_budget(r, budget)}
    lines = ["| claim | regime | drafter | T | Δτ = a − b [95% CI, contexts pooled] | relative | "
             "Δτ between worlds [95% t, k − 1 dof] |",
             "|---|---|---|---|---|---|---|"]
    cells = sorted({k[:3] for k in index})
    for label, a, b in CLAIMS:
        for regime, drafter, t in cells:
            if label.endswith("T = 0") != (t == 0.0):
                continue
            ra, rb = index.get((regime, drafter, t, a)), index.get((regime, drafter, t, b))
            if ra is None or rb is None or len(ra["taus"]) != len(rb["taus"]):
                continue
            d = mean_ci(np.asarray(ra["taus"]) - np.asarray(rb["taus"]))
            lines.append(f"| {label} | {regime} | {drafter} | {t:g} | {d.mean:+.2f} "
                         f"[{d.low:+.2f}, {d.high:+.2f}] | "
                         f"{100 * d.mean / rb['tau_mean']:+.1f}% | {_world_diff(ra, rb)} |")
    return "\n".join(lines)


def _world_diff(ra: dict, rb: dict) -> str:
    """``a - b`` between worlds: the t-interval over per-world differences, then each world's."""
    wa, wb = ra.get("tau_world_means"), rb.get("tau_world_means")
    if not wa or not wb or len(wa) != len(wb):
        return "—"
    diff = np.asarray(wa) - np.asarray(wb)
    each = " / ".join(f"{x:+.2f}" for x in diff)
    if diff.size < 2:
        return f"one world ({each})"
    ci = world_ci(diff)
    return f"{ci.mean:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}] ({each})"


def plot_tau_vs_temperature(rows: list[dict], path: Path, budget: int) -> None:
    """E[tau] vs T per method, one panel per (regime, drafter), at ``budget``.

    Error bars are each method's 95% t-interval over the cell's contexts, pooled over its
    worlds (:func:`treespec_sim.stats.mean_ci`); the methods are drawn on the same contexts, so
    differences are better read from the paired claims table than from overlapping bars.
    One legend for the figure, below the panels and inside the canvas (constrained layout).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["regime"], r["drafter"]) for r in rows))
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows + 1.0),
                             squeeze=False, layout="constrained")
    styles = {"chain": ("k", ":"), "ddtree": ("tab:blue", "-"), "dynamic": ("tab:cyan", "--"),
              "sampled-chain": ("tab:gray", ":"), "sampled-chain-corrected": ("tab:brown", "-."),
              "tsubame-rrs": ("tab:orange", "--"), "tsubame-rrsw": ("tab:red", "-"),
              "tsubame-univer": ("tab:purple", "-"),
              "tsubame-rrsw-tempered-plan": ("tab:pink", "--")}
    handles: dict[str, object] = {}
    for ax, (regime, drafter) in zip(axes.flat, panels, strict=False):
        for method, (color, ls) in styles.items():
            sub = sorted((r for r in rows if r["regime"] == regime and r["drafter"] == drafter
                          and r["method"] == method and _at_budget(r, budget)),
                         key=lambda r: r["temperature"])
            if not sub:
                continue
            t = [r["temperature"] for r in sub]
            art = ax.errorbar(t, [r["tau_mean"] for r in sub],
                              yerr=[[r["tau_mean"] - r["tau_ci_low"] for r in sub],
                                    [r["tau_ci_high"] - r["tau_mean"] for r in sub]],
                              color=color, ls=ls, marker="o", ms=3, capsize=2)
            verifiers = "/".join(dict.fromkeys(r["verifier"] for r in sub))
            handles.setdefault(f"{method} ({verifiers})", art)
        ax.set_title(f"{regime} · drafter {drafter} · B = {budget}", fontsize=10)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("E[τ] (tokens per round)")
        ax.set_xticks(sorted({r["temperature"] for r in rows}))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    counts = "/".join(sorted({str(r["rounds"]) for r in rows if "rounds" in r})) or "the"
    worlds = "/".join(sorted({str(r["worlds"]) for r in rows if r.get("worlds")}))
    pooled = f" pooled over {worlds} worlds" if worlds else ""
    figure_legend(fig, list(handles.values()), list(handles), max_cols=4,
                  title=f"method (verifier at T = 0 / T > 0); bars: 95% t-interval over "
                  f"{counts} contexts{pooled} (the same contexts for every method); chains "
                  "have L nodes")
    fig.savefig(path, dpi=120)
    plt.close(fig)
