"""The sweep's report: ``summary.md`` (per-claim tables with intervals) and the figures.

Every function takes the list of result rows (dicts with :data:`treespec_sim.families.COLUMNS`
keys plus per-family extras) and ignores families that are absent.
``python -m treespec_sim.report RUN_DIR --page docs/results.md`` turns a finished sweep into a
documentation page (:func:`results_page`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .calibrate import TOLERANCE, calibration_rows
from .experiments.stochastic import CLAIMS, claims_table
from .experiments.stochastic import plot_tau_vs_temperature as plot
from .families import FAMILIES

__all__ = ["FIGURES", "results_page", "summary_markdown", "write_figures"]


def _fam(rows: Sequence[dict], family: str) -> list[dict]:
    return [r for r in rows if r.get("family") == family]


def _pct(x: float) -> str:
    return f"{100 * (x - 1):+.1f}%"


# ----------------------------------------------------------------------------- tables
def _calibration_section(rows: Sequence[dict]) -> list[str]:
    """Target vs achieved of the sweep's calibrated regimes (empty if it has none)."""

    cal = calibration_rows(regimes={r.get("regime") for r in rows})
    if not cal:
        return []
    tol = f"±{TOLERANCE:.0%}"
    out = ["## Calibration", "",
           "The regimes below are synthetic worlds fitted so that at T = 0 the argmax-chain τ "
           "(L = 15) and DDTree's τ at B = 64 match published Qwen3-8B values. Achieved = mean "
           "± s.e. over contexts on fresh seeds (not the fit's); `*` marks a target derived from "
           "published ratios rather than published. Only T = 0 is calibrated. Derivations and "
           "limitations: `docs/results/calibration.md`; re-check with "
           "`python -m treespec_sim.calibrate --check` (stored table: `--table`).", "",
           f"| regime | chain τ target | chain τ achieved ± se | DDTree@64 τ target | "
           f"achieved ± se | within {tol} |", "|---|---|---|---|---|---|"]
    for r in cal:
        cells = []
        for q in ("chain", "ddtree64"):
            star = "" if r[f"{q}_published"] else "*"
            cells += [f"{r[f'{q}_target']:.2f}{star}",
                      f"{r[f'{q}_mean']:.2f} ± {r[f'{q}_se']:.2f}"]
        off = [label for q, label in (("chain", "chain"), ("ddtree64", "DDTree@64"))
               if not r[f"{q}_within"]]
        ok = "yes" if not off else "no (" + ", ".join(off) + ")"
        out.append(f"| {r['regime']} | " + " | ".join(cells) + f" | {ok} |")
    return [*out, ""]


def _ddtree_tables(rows: list[dict]) -> list[str]:
    out = ["## DDTree across budgets (exact E[τ], 95% CI over contexts)", ""]
    temps = sorted({r["temperature"] for r in rows})
    budgets = sorted({r["budget"] for r in rows if r["method"] != "chain"})
    for t in temps:
        sub = [r for r in rows if r["temperature"] == t]
        out.append(f"T = {t:g}:")
        out.append("")
        out.append("| regime | chain (L) | " + " | ".join(f"DDTree B={b}" for b in budgets)
                   + " | best B (tok/s) |")
        out.append("|---|---|" + "---|" * len(budgets) + "---|")
        for regime in dict.fromkeys(r["regime"] for r in sub):
            rr = [r for r in sub if r["regime"] == regime]
            chain = next((r for r in rr if r["method"] == "chain"), None)
            cells = [f"{chain['tau_mean']:.2f}" if chain else "—"]
            dd = {r["budget"]: r for r in rr if r["method"] == "ddtree"}
            for b in budgets:
                r = dd.get(b)
                cells.append(f"{r['tau_mean']:.2f} [{r['tau_ci_low']:.2f}, "
                             f"{r['tau_ci_high']:.2f}]" if r else "—")
            best = max(dd.values(), key=lambda r: r["throughput_tok_s"], default=None)
            cells.append(f"{best['budget']} ({best['throughput_tok_s']:.0f}, "
                         f"{best['cost_model']})" if best else "—")
            out.append(f"| {regime} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["Where target mass is lost (exit law, DDTree; fractions of a round's target "
            "continuations that leave the tree at an inner node = uncovered, at a leaf below "
            "the depth cap = budget, at the depth cap):", "",
            "| regime | T | B | uncovered | budget | depth cap | coverage C_p |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["method"] == "ddtree" and r["budget"] in (min(budgets), 64, max(budgets)):
            out.append(f"| {r['regime']} | {r['temperature']:g} | {r['budget']} | "
                       f"{r['lost_uncovered']:.3f} | {r['lost_budget']:.3f} | "
                       f"{r['lost_depth_cap']:.3f} | {r['coverage_mean']:.2f} |")
    return [*out, ""]


def _caddtree_tables(rows: list[dict]) -> list[str]:
    out = ["## Does CaDDTree match DDTree at the oracle budget?", "",
           "Throughput relative to DDTree at the best fixed budget of the grid, chosen after the "
           "fact on the same rounds (paired bootstrap 95% CI over decoded sequences):", "",
           "| regime | T | cost model | oracle B | CaDDTree mean B | CaDDTree vs oracle | "
           "exhaustive vs oracle | long-run vs oracle |", "|---|---|---|---|---|---|---|---|"]
    keys = dict.fromkeys((r["regime"], r["temperature"], r["cost_model"]) for r in rows)
    wins = total = 0
    for regime, t, cm in keys:
        rr = {r["method"]: r for r in rows if (r["regime"], r["temperature"], r["cost_model"])
              == (regime, t, cm) and r["method"] != "ddtree"}
        cad, exh, lr, orc = (rr.get(m) for m in ("caddtree", "exhaustive", "longrun",
                                                 "ddtree-oracle"))
        if not (cad and orc):
            continue
        total += 1
        wins += cad["rel_ci_high"] >= 1.0
        out.append(
            f"| {regime} | {t:g} | {cm} | {orc['tree_size_mean']:.0f} | "
            f"{cad['tree_size_mean']:.0f} | {_pct(cad['rel_to_baseline'])} "
            f"[{_pct(cad['rel_ci_low'])}, {_pct(cad['rel_ci_high'])}] | "
            + (f"{_pct(exh['rel_to_baseline'])} | " if exh else "— | ")
            + (f"{_pct(lr['rel_to_baseline'])} |" if lr else "— |"))
    out += ["", f"CaDDTree matches (CI reaches 0%) or beats the oracle budget in {wins} of "
                f"{total} (regime, T, cost model) cells.", ""]
    return out


def _stochastic_tables(rows: list[dict]) -> list[str]:

    budgets = sorted({r["budget"] for r in rows if r["budget"]})
    b = 64 if 64 in budgets else (budgets[0] if budgets else 0)
    have = {r["method"] for r in rows}
    claims = [c for c in CLAIMS if c[1] in have and c[2] in have]
    out = ["## Sampled trees at T > 0: does Tsubame reverse the sampled-chain advantage?", "",
           f"Paired differences of exact E[τ] on shared contexts, B = {b} (chains: L nodes); "
           "95% t-intervals:", ""]
    table = claims_table([r for r in rows if "taus" in r], b).splitlines()
    keep = [ln for ln in table[2:] if any(ln.startswith(f"| {c[0]} |") for c in claims)]
    return out + table[:2] + keep + [""]


def _verifier_tables(rows: list[dict]) -> list[str]:
    out = ["## UniVer's and Traversal's gain over RRSw (same sampled trees)", "",
           "UniVer reports +4.2–8.5%. Percentile-bootstrap 95% CI over contexts:", "",
           "| regime | T | tree | verifier | E[τ] | vs RRSw |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["verifier"] == "rrsw" and "greedy" not in r["method"]:
            continue
        out.append(f"| {r['regime']} | {r['temperature']:g} | {r['method']} | {r['verifier']} "
                   f"| {r['tau_mean']:.3f} | {_pct(r['rel_to_baseline'])} "
                   f"[{_pct(r['rel_ci_low'])}, {_pct(r['rel_ci_high'])}] |")
    return [*out, ""]


def _run_size(record: dict, *, calibrated: bool) -> list[str]:
    """How much data stands behind every interval: rounds per cell, one world per regime."""
    plan = record.get("plan") or {}
    parts = [f"{plan[f]['rounds']} {grid.unit} per {f} cell" for f, grid in FAMILIES.items()
             if isinstance(plan.get(f), dict) and "rounds" in plan[f]]
    if not parts:
        return []
    text = (f"Run size: {', '.join(parts)}. Each regime is one synthetic world (world seed "
            f"{record.get('seed')}); the intervals are over contexts or sequences of that world "
            "only, not over worlds.")
    if calibrated:
        text += (" A calibrated regime's numbers therefore scatter around its calibrated means "
                 "(which average three other worlds) by more than the intervals show.")
    return [text, ""]


def summary_markdown(rows: Sequence[dict], record: dict) -> str:
    """The human-readable summary of a sweep.

    Starts with a calibration table (target vs achieved) when any of the rows' regimes is a
    calibrated one (:func:`treespec_sim.calibrate.calibration_rows`), then the tables of every
    family present.
    """
    lines = [f"# treespec sweep: preset {record.get('preset')!r}", "",
             f"{len(rows)} result rows from {record.get('cells')} cells "
             f"({record.get('cells_skipped_on_resume', 0)} reused on resume), "
             f"{record.get('elapsed_s', 0):.0f} s, seed {record.get('seed')}, git "
             f"{record.get('git_commit', '?')[:10]}. Throughput columns use "
             f"`{record.get('cost_model')}` unless a table names another. Figures: "
             + ", ".join(f"`{f}`" for f in record.get("figures", [])) + ".", ""]
    calibration = _calibration_section(rows)
    lines += _run_size(record, calibrated=bool(calibration))
    lines += calibration
    sections = (("ddtree", _ddtree_tables), ("caddtree", _caddtree_tables),
                ("stochastic", _stochastic_tables), ("verifiers", _verifier_tables))
    for fam, fn in sections:
        sub = _fam(rows, fam)
        if sub:
            lines += fn(sub)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- figures
def _grid(n: int, w: float = 4.4, h: float = 3.4):
    import matplotlib.pyplot as plt

    cols = min(4, n)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)


def plot_tau_vs_budget(rows: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    fig, axes = _grid(len(regimes))
    for ax, regime in zip(axes, regimes, strict=False):
        for t in sorted({r["temperature"] for r in rows}):
            for m, style in (("ddtree", "-"), ("dynamic", "--")):
                pts = sorted((r for r in rows if r["regime"] == regime and r["method"] == m
                              and r["temperature"] == t), key=lambda r: r["budget"])
                if not pts:
                    continue
                x = [r["budget"] for r in pts]
                line, = ax.plot(x, [r["tau_mean"] for r in pts], style, marker="o", ms=3,
                                label=f"{m}, T={t:g}")
                ax.fill_between(x, [r["tau_ci_low"] for r in pts],
                                [r["tau_ci_high"] for r in pts], color=line.get_color(),
                                alpha=0.2)
            for r in rows:
                if r["regime"] == regime and r["method"] == "chain" and r["temperature"] == t:
                    ax.axhline(r["tau_mean"], ls=":", color=line.get_color(),
                               label=f"chain, T={t:g}")
        ax.set_xscale("log", base=2)
        ax.set_title(regime, fontsize=10)
        ax.set_xlabel("budget B")
        ax.set_ylabel("E[τ]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_lost_mass(rows: list[dict], path: Path) -> None:
    """Exit law of DDTree by depth (stacked by budget) at T = 0 (or the lowest T)."""
    import matplotlib.pyplot as plt

    t0 = min(r["temperature"] for r in rows)
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    fig, axes = _grid(len(regimes))
    for ax, regime in zip(axes, regimes, strict=False):
        pts = sorted((r for r in rows if r["regime"] == regime and r["method"] == "ddtree"
                      and r["temperature"] == t0 and "exit_by_depth" in r),
                     key=lambda r: r["budget"])
        if len(pts) > 3:  # the smallest, a middle and the largest budget stay readable
            pts = [pts[0], pts[len(pts) // 2], pts[-1]]
        for r in pts:
            d = np.asarray(r["exit_by_depth"])
            ax.plot(np.arange(d.size), d, marker=".", label=f"B={r['budget']} (unc "
                    f"{r['lost_uncovered']:.2f}, bud {r['lost_budget']:.2f}, cap "
                    f"{r['lost_depth_cap']:.2f})")
        chain = [r for r in rows if r["regime"] == regime and r["method"] == "chain"
                 and r["temperature"] == t0 and "exit_by_depth" in r]
        for r in chain:
            ax.plot(np.arange(len(r["exit_by_depth"])), r["exit_by_depth"], "k:",
                    label="chain")
        ax.set_title(f"{regime}, T={t0:g}: where the target leaves the tree", fontsize=9)
        ax.set_xlabel("depth of the exit node")
        ax.set_ylabel("exit mass")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(rows: list[dict], path: Path) -> None:
    """CaDDTree family: throughput vs fixed budget, each adaptive rule's choice marked."""
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["regime"], r["temperature"], r["cost_model"]) for r in rows))
    fig, axes = _grid(len(panels))
    marks = {"ddtree-oracle": ("*", "tab:orange", 13), "caddtree": ("o", "tab:red", 10),
             "longrun": ("s", "tab:green", 7), "exhaustive": ("x", "black", 7)}
    for ax, (regime, t, cm) in zip(axes, panels, strict=False):
        sub = [r for r in rows if (r["regime"], r["temperature"], r["cost_model"])
               == (regime, t, cm)]
        fixed = sorted((r for r in sub if r["method"] == "ddtree"), key=lambda r: r["budget"])
        x = [r["budget"] for r in fixed]
        ax.plot(x, [r["throughput_tok_s"] for r in fixed], color="tab:blue", label="DDTree")
        ax.fill_between(x, [r["throughput_ci"][0] for r in fixed],
                        [r["throughput_ci"][1] for r in fixed], color="tab:blue", alpha=0.2)
        for r in sub:
            if r["method"] in marks:
                m, c, s = marks[r["method"]]
                ax.plot([r["tree_size_mean"]], [r["throughput_tok_s"]], m, color=c, ms=s,
                        mfc="none" if m in "os" else c,
                        label=f"{r['method']} (B {r['tree_size_mean']:.0f})")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{regime} · T={t:g} · {cm}", fontsize=9)
        ax.set_xlabel("budget B")
        ax.set_ylabel("tokens / s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_verifier_gains(rows: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    sub = [r for r in rows if not (r["verifier"] == "rrsw" and "greedy" not in r["method"])]
    labels = [f"{r['regime']}\n{r['method'].split('[')[1].split(']')[0]}"
              for r in sub if r["verifier"] == "traversal"]
    arms = [("traversal", False), ("univer", False), ("univer", True)]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(labels)), 3.8))
    width = 0.25
    for j, (verifier, greedy) in enumerate(arms):
        pts = [r for r in sub if r["verifier"] == verifier and ("greedy" in r["method"]) == greedy]
        y = np.array([100 * (r["rel_to_baseline"] - 1) for r in pts])
        lo = y - np.array([100 * (r["rel_ci_low"] - 1) for r in pts])
        hi = np.array([100 * (r["rel_ci_high"] - 1) for r in pts]) - y
        ax.bar(np.arange(len(pts)) + (j - 1) * width, y, width, yerr=[lo, hi], capsize=2,
               label=verifier + (" on Greedy drafts" if greedy else ""))
    ax.axhspan(4.2, 8.5, color="gray", alpha=0.15, label="UniVer's reported +4.2–8.5%")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(labels)), labels, fontsize=7)
    ax.set_ylabel("E[τ] gain over RRSw (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tau_vs_temperature(rows: list[dict], path: Path) -> None:

    budgets = sorted({r["budget"] for r in rows if r["budget"]})
    plot(rows, path, 64 if 64 in budgets else (budgets[0] if budgets else 0))


#: figure file -> (family, plotting function)
FIGURES = {
    "tau_vs_budget.png": ("ddtree", plot_tau_vs_budget),
    "lost_mass_by_depth.png": ("ddtree", plot_lost_mass),
    "throughput_vs_budget.png": ("caddtree", plot_throughput),
    "tau_vs_temperature.png": ("stochastic", plot_tau_vs_temperature),
    "verifier_gains.png": ("verifiers", plot_verifier_gains),
}


def write_figures(rows: Sequence[dict], out: Path) -> list[str]:
    """Draw every figure whose family has rows; return the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    for name, (fam, fn) in FIGURES.items():
        sub = _fam(rows, fam)
        if sub:
            fn(sub, out / name)
            written.append(name)
    return written


# ----------------------------------------------------------------------------- results page
_FIGURE_TITLES = {
    "tau_vs_budget.png": "τ vs budget",
    "lost_mass_by_depth.png": "where target mass is lost (by depth and cause)",
    "throughput_vs_budget.png": "throughput vs budget, adaptive choices marked",
    "tau_vs_temperature.png": "τ vs temperature per method",
    "verifier_gains.png": "verifier gains over RRSw",
}


def results_page(run_dir: Path, page: Path) -> str:
    """Write a documentation page (e.g. ``docs/results.md``) from a finished sweep directory.

    The page is the run's ``summary.md`` with a header naming the command, the commit, the
    wall clock and the workers (all read from ``run.json``), and every figure embedded with a
    path relative to the page. Returns the text written.
    """
    import os

    run_dir, page = Path(run_dir), Path(page)
    record = json.loads((run_dir / "run.json").read_text())
    summary = (run_dir / "summary.md").read_text().splitlines()
    rel = Path(os.path.relpath(run_dir, page.parent)).as_posix()
    argv = [str(a) for a in record.get("command") or []]
    if argv and Path(argv[0]).name == "sweep.py":
        command = " ".join(["python -m treespec_sim.sweep", *argv[1:]])
    else:  # run_plan called from code
        command = f"run_plan (preset {record.get('preset')!r}) from {' '.join(argv) or '?'}"
    head = [
        f"# Results: the `{record.get('preset')}` sweep",
        "",
        f"Generated by `python -m treespec_sim.report {run_dir.as_posix()} --page "
        f"{page.as_posix()}` from the sweep `{command}`: {record.get('cells')} cells, "
        f"{record.get('elapsed_s', 0):.0f} s with {record.get('workers')} worker(s), git "
        f"{str(record.get('git_commit', '?'))[:10]}, seed {record.get('seed')}. The tables are "
        f"the run's `summary.md`; every row is in `{rel}/results.csv`, the configuration, "
        f"versions and cost-model provenance in `{rel}/run.json`.",
        "",
    ]
    figures = [f for f in record.get("figures", []) if (run_dir / f).exists()]
    for f in figures:
        head += [f"![{_FIGURE_TITLES.get(f, f)}]({rel}/{f})", ""]
    # Drop the summary's own title line; keep the rest verbatim.
    body = summary[1:] if summary and summary[0].startswith("# ") else summary
    text = "\n".join(head + body).rstrip() + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m treespec_sim.report RUN_DIR --page PAGE.md``: a results page from a sweep."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m treespec_sim.report",
                                 description="Write a results page from a finished sweep.")
    ap.add_argument("run_dir", type=Path, help="the sweep's --out directory")
    ap.add_argument("--page", type=Path, required=True, help="the Markdown page to write")
    args = ap.parse_args(argv)
    for name in ("run.json", "summary.md"):
        if not (args.run_dir / name).exists():
            ap.error(f"run_dir: {args.run_dir / name} does not exist (run the sweep first)")
    results_page(args.run_dir, args.page)
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
