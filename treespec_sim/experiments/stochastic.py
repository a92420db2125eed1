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

Methods (verifier): ``chain`` (argmax chain, follow), ``ddtree`` (follow), ``dynamic``
(EAGLE-2-like, follow), ``sampled-chain`` (marginal draws, rrs), ``sampled-chain-corrected``
(draws given the sampled parent, rrs), ``tsubame-rrs`` (i.i.d. fill, rrs), ``tsubame-rrsw``
(without replacement, rrsw), ``tsubame-univer`` (without replacement, univer),
``tsubame-rrsw-tempered-plan`` (pass 1 on the marginals tempered to T). Tsubame fills with
the drafter's correction (the marginal for ``none``). At ``T = 0`` sampled methods take the
top-``k`` of their proposals and are verified with ``follow`` (the ``T -> 0`` limit).

``python -m treespec_sim.experiments.stochastic [--rounds N] [--vocab V] [--out DIR]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from ..cost import get_cost_model
from ..policies import chain, ddtree
from ..policies.dynamic import dynamic_tree
from ..policies.sampled import marginal_proposal, sampled_chain
from ..policies.tsubame import tsubame
from ..verify import expected_length

__all__ = ["DRAFTERS", "METHODS", "drafter_spec", "main", "plot_tau_vs_temperature", "run",
           "run_cell"]

#: Drafter variants: name -> knob overrides of the regime.
DRAFTERS = {
    "none": {"correction_quality": 0.0},
    "corrected": {"correction_quality": 0.8},
    "strong": {"correction_quality": 0.95, "_halve": ("mismatch", "degradation", "junk")},
}

#: method -> (verifier at T > 0, uses the budget)
METHODS = {
    "chain": ("follow", False),
    "ddtree": ("follow", True),
    "dynamic": ("follow", True),
    "sampled-chain": ("rrs", False),
    "sampled-chain-corrected": ("rrs", False),
    "tsubame-rrs": ("rrs", True),
    "tsubame-rrsw": ("rrsw", True),
    "tsubame-univer": ("univer", True),
    "tsubame-rrsw-tempered-plan": ("rrsw", True),
}

_SCHEME = {"tsubame-rrs": "iid", "tsubame-rrsw": "without_replacement",
           "tsubame-univer": "without_replacement",
           "tsubame-rrsw-tempered-plan": "without_replacement"}


def drafter_spec(regime: str, drafter: str):
    """The regime's :class:`~treespec_sim.synth.RegimeSpec` with the drafter's knobs."""
    from ..synth import get_regime

    if drafter not in DRAFTERS:
        raise ValueError(f"unknown drafter {drafter!r}; known drafters: {', '.join(DRAFTERS)}")
    spec = get_regime(regime)
    knobs = dict(DRAFTERS[drafter])
    halve = knobs.pop("_halve", ())
    for name in halve:
        knobs[name] = getattr(spec, name) / 2
    return dataclasses.replace(spec, name=f"{regime}+{drafter}", **knobs)


def _draft(method: str, world, ctx, log_q, budget: int, temperature: float,
           rng: np.random.Generator):
    """(tree, proposal or None, verifier rule) for one method on one context."""
    root = int(ctx.last_token)

    def corrected(depth: int, parent_token: int) -> np.ndarray:
        return world.draft_conditional(ctx, depth, parent_token)

    deterministic = temperature == 0.0
    if method == "chain":
        return chain(log_q, root_token=root), None, "follow"
    if method == "ddtree":
        return ddtree(log_q, budget, root_token=root), None, "follow"
    if method == "dynamic":
        return dynamic_tree(log_q, budget, root_token=root), None, "follow"
    if method in ("sampled-chain", "sampled-chain-corrected"):
        prop = marginal_proposal(log_q) if method == "sampled-chain" else corrected
        d = sampled_chain(prop, world.depth, rng=rng, temperature=temperature, root_token=root)
    else:
        planner = "tempered" if method.endswith("tempered-plan") else "ddtree"
        d = tsubame(log_q, budget, rng=rng, scheme=_SCHEME[method], temperature=temperature,
                    proposal=corrected, root_token=root, planner=planner)
    rule = "follow" if deterministic else METHODS[method][0]
    d.check_rule(rule, target_temperature=temperature)
    return d.tree, d.proposal, rule


def run_cell(world, *, regime: str, drafter: str, temperature: float, budget: int,
             methods: tuple[str, ...], rounds: int, seed: int, cost_name: str) -> list[dict]:
    """Every method on the same ``rounds`` contexts; one row per method."""
    cost = get_cost_model(cost_name)
    # contexts depend on (regime, drafter, T) only: every method and budget sees the same ones,
    # so differences between methods are paired
    ctx_key = f"{regime}|{drafter}|{temperature!r}"
    key = f"{ctx_key}|{budget}"
    rng_ctx = np.random.default_rng([seed, zlib.crc32(ctx_key.encode()), 0])
    contexts = [world.sample_context(rng_ctx) for _ in range(rounds)]
    rows = []
    for method in methods:
        rng = np.random.default_rng([seed, zlib.crc32(f"{key}|{method}".encode())])
        taus, sizes = np.empty(rounds), np.empty(rounds)
        t0 = time.perf_counter()
        rule = METHODS[method][0]
        for i, ctx in enumerate(contexts):
            log_q = world.draft(ctx)
            tree, proposal, rule = _draft(method, world, ctx, log_q, budget, temperature, rng)
            oracle = world.target_oracle(ctx, tree, temperature)
            taus[i] = expected_length(tree, oracle, rule=rule, proposal=proposal)
            sizes[i] = tree.size
        seconds = cost.draft_cost() + np.asarray(cost.verify_cost(sizes + 1), dtype=np.float64)
        half = 1.96 * taus.std(ddof=1) / np.sqrt(rounds)
        ar = 1.0 / float(cost.verify_cost(1))
        throughput = taus.sum() / seconds.sum()
        rows.append({
            "regime": regime, "drafter": drafter, "method": method, "verifier": rule,
            "temperature": temperature, "budget": budget if METHODS[method][1] else 0,
            "cost_model": cost_name, "rounds": rounds, "seed": seed,
            "tau_mean": float(taus.mean()), "tau_ci_low": float(taus.mean() - half),
            "tau_ci_high": float(taus.mean() + half), "tree_size_mean": float(sizes.mean()),
            "round_time_s": float(seconds.mean()), "throughput_tok_s": float(throughput),
            "speedup_vs_ar": float(throughput / ar), "wall_s": time.perf_counter() - t0,
            "taus": taus.tolist(),
        })
    return rows


def run(*, regimes, drafters, temperatures, budgets, methods=tuple(METHODS), rounds: int,
        seed: int = 0, cost_name: str = "h200-qwen3-8b", vocab: int | None = None,
        out: Path | None = None, resume: bool = False, progress: bool = True) -> list[dict]:
    """The grid; with ``out``, each cell is written atomically and reused by ``resume``.

    ``vocab`` caps each regime's vocabulary (``make_world(..., vocab_size=vocab)``) where it is
    larger: the sampled fills cost ``O(V)`` per inner node.
    """
    from ..synth import make_world

    for m in methods:
        if m not in METHODS:
            raise ValueError(f"methods: unknown method {m!r}; known: {', '.join(METHODS)}")
    get_cost_model(cost_name)
    all_rows: list[dict] = []
    for regime in regimes:
        for drafter in drafters:
            spec = drafter_spec(regime, drafter)
            cap = vocab if vocab is not None and vocab < spec.vocab_size else None
            world = make_world(spec, seed=seed, vocab_size=cap)
            for t in temperatures:
                fixed = tuple(m for m in methods if not METHODS[m][1])
                grid = [(0, fixed)] if fixed else []
                grid += [(b, tuple(m for m in methods if METHODS[m][1])) for b in budgets]
                for budget, ms in grid:
                    if not ms:
                        continue
                    path = None if out is None else (
                        out / "cells" / f"{regime}__{drafter}__T{t!r}__B{budget}__s{seed}.json")
                    if resume and path is not None and path.exists():
                        all_rows.extend(json.loads(path.read_text()))
                        continue
                    if progress:
                        print(f"  {regime} {drafter} T={t} B={budget}", flush=True)
                    rows = run_cell(world, regime=regime, drafter=drafter, temperature=float(t),
                                    budget=int(budget), methods=ms, rounds=rounds, seed=seed,
                                    cost_name=cost_name)
                    if path is not None:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        tmp = path.with_suffix(".tmp")
                        tmp.write_text(json.dumps(rows))
                        tmp.replace(path)
                    all_rows.extend(rows)
    return all_rows


def table(rows: list[dict], budget: int) -> str:
    """Markdown: tau and throughput per method at one budget (chains at their own length)."""
    lines = ["| regime | drafter | T | method | verifier | τ [95% CI] | nodes | tok/s | "
             "speedup |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["budget"] not in (0, budget):
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
    """Paired differences in E[tau] (same contexts), mean and 95% t-interval, at ``budget``."""
    from scipy import stats

    index = {(r["regime"], r["drafter"], r["temperature"], r["method"]): r for r in rows
             if r["budget"] in (0, budget)}
    lines = ["| claim | regime | drafter | T | Δτ = a − b [95% CI] | relative |",
             "|---|---|---|---|---|---|"]
    cells = sorted({k[:3] for k in index})
    for label, a, b in CLAIMS:
        for regime, drafter, t in cells:
            if label.endswith("T = 0") != (t == 0.0):
                continue
            ra, rb = index.get((regime, drafter, t, a)), index.get((regime, drafter, t, b))
            if ra is None or rb is None or len(ra["taus"]) != len(rb["taus"]):
                continue
            d = np.asarray(ra["taus"]) - np.asarray(rb["taus"])
            half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
            lines.append(f"| {label} | {regime} | {drafter} | {t:g} | {d.mean():+.2f} "
                         f"[{d.mean() - half:+.2f}, {d.mean() + half:+.2f}] | "
                         f"{100 * d.mean() / rb['tau_mean']:+.1f}% |")
    return "\n".join(lines)


def plot_tau_vs_temperature(rows: list[dict], path: Path, budget: int) -> None:
    """tau vs T per method, one panel per (regime, drafter), at ``budget``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["regime"], r["drafter"]) for r in rows))
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    styles = {"chain": ("k", ":"), "ddtree": ("tab:blue", "-"), "dynamic": ("tab:cyan", "--"),
              "sampled-chain": ("tab:gray", ":"), "sampled-chain-corrected": ("tab:brown", "-."),
              "tsubame-rrs": ("tab:orange", "--"), "tsubame-rrsw": ("tab:red", "-"),
              "tsubame-univer": ("tab:purple", "-")}
    for ax, (regime, drafter) in zip(axes.flat, panels, strict=False):
        for method, (color, ls) in styles.items():
            sub = sorted((r for r in rows if r["regime"] == regime and r["drafter"] == drafter
                          and r["method"] == method and r["budget"] in (0, budget)),
                         key=lambda r: r["temperature"])
            if not sub:
                continue
            t = [r["temperature"] for r in sub]
            ax.errorbar(t, [r["tau_mean"] for r in sub],
                        yerr=[[r["tau_mean"] - r["tau_ci_low"] for r in sub],
                              [r["tau_ci_high"] - r["tau_mean"] for r in sub]],
                        color=color, ls=ls, marker="o", ms=3, capsize=2, label=method)
        ax.set_title(f"{regime} · drafter {drafter} · B = {budget}", fontsize=10)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("E[τ] (tokens per round)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(rows: list[dict], out: Path, record: dict, budget: int) -> None:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    cols = [k for k in rows[0] if k != "taus"]
    with open(out / "stochastic.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()
                        if k != "taus"})
    (out / "stochastic.md").write_text(table(rows, budget) + "\n")
    (out / "stochastic_claims.md").write_text(
        f"Paired differences of exact E[τ] per context, B = {budget} (chains: L nodes)\n\n"
        + claims_table(rows, budget) + "\n")
    (out / "stochastic_record.json").write_text(json.dumps(record, indent=1))
    plot_tau_vs_temperature(rows, out / "tau_vs_temperature.png", budget)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m treespec_sim.experiments.stochastic",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", nargs="+", default=["mid-entropy", "high-entropy"])
    ap.add_argument("--drafters", nargs="+", default=list(DRAFTERS))
    ap.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 0.6, 1.0])
    ap.add_argument("--budgets", nargs="+", type=int, default=[16, 64, 256])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--rounds", type=int, default=48)
    ap.add_argument("--vocab", type=int, default=4096,
                    help="cap the regimes' vocabulary (default 4096, for speed; 0 = no cap)")
    ap.add_argument("--cost", default="h200-qwen3-8b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--plot-budget", type=int, default=64)
    args = ap.parse_args(argv)
    if args.resume and args.out is None:
        ap.error("--resume needs --out")
    if args.rounds < 2:
        ap.error("--rounds must be >= 2")
    started = time.time()
    try:
        rows = run(regimes=args.regimes, drafters=args.drafters,
                   temperatures=args.temperatures, budgets=args.budgets,
                   methods=tuple(args.methods), rounds=args.rounds, seed=args.seed,
                   cost_name=args.cost, vocab=args.vocab or None, out=args.out,
                   resume=args.resume)
    except ValueError as exc:
        ap.error(str(exc))
    if args.out is not None:
        record = {"args": {k: (str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items()},
                  "elapsed_s": time.time() - started,
                  "cost_model": get_cost_model(args.cost).to_dict()}
        write_outputs(rows, args.out, record, args.plot_budget)
    print(table(rows, args.plot_budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
