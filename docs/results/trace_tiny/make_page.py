"""Write ``docs/results/trace_tiny/``: the shipped trace's numbers beside the tiny models' live
decode and beside a synthetic regime fitted to the trace.

Run from the repository root (CPU; about two minutes on one loaded core)::

    python docs/results/trace_tiny/make_page.py

1. ``python -m treespec_sim.sweep --trace real_models/traces/tiny-b256.npz`` into ``sweep/``.
2. Live decodes of the tiny models (``real_models``) from the trace's own prompts: the chain
   and DDTree at 16, 64 and 256 at T = 0 and 1, 96 new tokens per prompt, each round's exact
   E[tau] kept (``live.json``).
3. A regime fitted to the trace (``treespec_sim.acceptance.fit_log``): the knobs of
   ``mid-entropy`` at the tiny models' V = 1024 and L = 7 fitted to the trace's exact
   acceptance-length law of DDTree@64 at T = 0, then its ``logit_scale`` to the same cell at
   T = 1 (a target knob that moves no argmax); its numbers at every other cell are out of
   sample (``fit.json``, ``fitted_regime.json``).
4. ``index.md`` and the figures.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import real_models
from real_models.backend import ModelBackend
from treespec_sim import acceptance, engine, trace
from treespec_sim.stats import mean_ci

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
TRACE = "real_models/traces/tiny-b256.npz"
METHODS = (("chain", None), ("ddtree", 16), ("ddtree", 64), ("ddtree", 256))
TEMPS = (0.0, 1.0)
NEW_TOKENS = 96
SEED = 0


def _label(method: str, budget: int | None) -> str:
    return "chain" if method == "chain" else f"DDTree@{budget}"


def _ci(values_by_unit: list[np.ndarray]) -> dict:
    ci = mean_ci(values_by_unit)
    return {"mean": ci.mean, "low": ci.low, "high": ci.high}


def trace_numbers(tr) -> dict:
    """Exact E[tau] of each method on every recorded round (units: the recorded prompts)."""
    out = {}
    prompts = np.array([c.prompt for c in tr.contexts])
    for t in TEMPS:
        for method, budget in METHODS:
            taus = np.array([engine.run_round(tr, c, method=method, budget=budget,
                                              temperature=t, rng=np.random.default_rng(0),
                                              sample=False).expected_tau
                             for c in tr.contexts])
            out[f"{_label(method, budget)} T={t:g}"] = _ci([taus[prompts == p]
                                                            for p in np.unique(prompts)])
    return out


def live_numbers(tr) -> dict:
    """Live decodes from the trace's prompts: each round's exact E[tau] (the decode samples
    its own path at T = 1), over the first rounds the trace holds and over 96 new tokens."""
    bundle = real_models.load()
    be = ModelBackend(bundle)
    rounds = int(tr.header["settings"]["rounds"])
    firsts = [c for c in tr.contexts if c.round == 0]
    out, t0 = {}, time.perf_counter()
    for t in TEMPS:
        for method, budget in METHODS:
            head, full = [], []
            for c in firsts:
                ctx = be.start(np.asarray(c.tokens))
                res = engine.decode(be, ctx, n_tokens=NEW_TOKENS, method=method, budget=budget,
                                    temperature=t, rng=np.random.default_rng([SEED, c.prompt]))
                taus = np.array([r.expected_tau for r in res.records])
                head.append(taus[:rounds])
                full.append(taus)
            out[f"{_label(method, budget)} T={t:g}"] = {
                "first_rounds": _ci(head), "all_rounds": _ci(full),
                "rounds_per_prompt": [int(x.size) for x in full]}
    out["seconds"] = time.perf_counter() - t0
    return out


def fit_numbers(tr) -> tuple[dict, acceptance.LogFit, acceptance.LogFit]:
    """Fit mid-entropy's knobs to the trace's DDTree@64 law at T = 0, then logit_scale at
    T = 1; the fitted regime's numbers at every cell."""
    common = {"method": "ddtree", "budget": 64, "contexts": 96, "seed": SEED,
              "vocab_size": tr.vocab_size, "depth": tr.depth}
    t0 = time.perf_counter()
    target0 = acceptance.trace_distribution(tr, method="ddtree", budget=64, temperature=0.0)
    fit0 = acceptance.fit_log(target0, base="mid-entropy", temperature=0.0,
                        knobs=("hard_miss", "variant_noise", "degradation"), max_evals=45,
                        name="fit-tiny-b256", **common)
    target1 = acceptance.trace_distribution(tr, method="ddtree", budget=64, temperature=1.0)
    fit1 = acceptance.fit_log(target1, base=fit0.spec, temperature=1.0, knobs=("logit_scale",),
                        max_evals=15, name="fit-tiny-b256", **common)
    out = {"seconds": time.perf_counter() - t0}
    for t in TEMPS:
        for method, budget in METHODS:
            d = acceptance.regime_distribution(fit1.spec, method=method, budget=budget,
                                               temperature=t, contexts=256, worlds=2,
                                               seed=SEED + 100)
            m = d.mean()
            out[f"{_label(method, budget)} T={t:g}"] = {"mean": m.mean, "low": m.low,
                                                        "high": m.high,
                                                        "probs": d.probs.tolist()}
    return out, fit0, fit1


def _cell(x: dict) -> str:
    return f"{x['mean']:.2f} [{x['low']:.2f}, {x['high']:.2f}]"


def plot_budgets(tr_num: dict, live: dict, fitted: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained", sharey=True)
    xs = np.arange(len(METHODS))
    labels = [_label(m, b) for m, b in METHODS]
    for ax, t in zip(axes, TEMPS, strict=True):
        for k, (name, get, color, dx) in enumerate((
                ("trace (recorded rounds, exact)", lambda key: tr_num[key], "tab:blue", -0.2),
                (f"live decode, first {tr.header['settings']['rounds']} rounds",
                 lambda key: live[key]["first_rounds"], "tab:green", -0.07),
                (f"live decode, {NEW_TOKENS} new tokens", lambda key: live[key]["all_rounds"],
                 "tab:olive", 0.07),
                ("regime fitted to the trace", lambda key: fitted[key], "tab:red", 0.2))):
            vals = [get(f"{lab} T={t:g}") for lab in labels]
            y = np.array([v["mean"] for v in vals])
            lo = np.array([v["low"] for v in vals])
            hi = np.array([v["high"] for v in vals])
            ax.errorbar(xs + dx, y, yerr=[y - lo, hi - y], ls="", marker="os^D"[k], color=color,
                        capsize=2, ms=5, label=name)
        ax.set_xticks(xs, labels)
        ax.set_title(f"T = {t:g}", fontsize=10)
        ax.set_ylabel("E[τ] (tokens per round)")
        ax.grid(alpha=0.3, axis="y")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=4, fontsize=8)
    fig.suptitle("tiny-target + tiny-drafter (CPU, float32): the trace, live decodes from its "
                 "prompts, and a regime fitted to it\n(95% t-intervals over prompts; the "
                 "regime's over its contexts; fitted at DDTree@64 only)", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


tr = None  # set in main (the figure labels read it)


def main() -> None:
    global tr
    tr = trace.load(ROOT / TRACE)
    t0 = time.perf_counter()
    sweep_out = HERE / "sweep"
    if sweep_out.exists():
        shutil.rmtree(sweep_out)
    # the command itself, so that sweep/run.json records it
    subprocess.run([sys.executable, "-m", "treespec_sim.sweep", "--trace", TRACE, "--out",
                    str(sweep_out.relative_to(ROOT)), "--quiet"], cwd=ROOT, check=True)
    sweep_s = time.perf_counter() - t0
    shutil.rmtree(sweep_out / "cells")  # kept by a sweep for --resume; the page needs none
    tr_num = trace_numbers(tr)
    live = live_numbers(tr)
    fitted, fit0, fit1 = fit_numbers(tr)
    acceptance.write_fit(HERE / "fitted_regime.json", fit1)
    comps = {f"T={t:g}": acceptance.compare(
        acceptance.trace_distribution(tr, method="ddtree", budget=64, temperature=t),
        acceptance.regime_distribution(fit1.spec, method="ddtree", budget=64, temperature=t,
                                       contexts=256, worlds=2, seed=SEED + 100))
             for t in TEMPS}
    for key, c in comps.items():
        acceptance.plot_comparison(c, HERE / f"histogram_ddtree64_{key.replace('=', '')}.png",
                                   names=("trace", "fitted regime"))
    plot_budgets(tr_num, live, fitted, HERE / "tau_by_method.png")
    data = {"trace": TRACE, "sweep_seconds": sweep_s, "trace_numbers": tr_num, "live": live,
            "fitted": fitted, "fit_T0": fit0.to_dict(), "fit_T1": fit1.to_dict(),
            "comparisons": {k: c.to_dict() for k, c in comps.items()}}
    (HERE / "numbers.json").write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: data[k] for k in ("sweep_seconds",)}), "live s", live["seconds"],
          "fit s", fitted["seconds"])


if __name__ == "__main__":
    main()
