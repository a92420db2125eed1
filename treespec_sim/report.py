"""The sweep's report: ``summary.md`` (per-claim tables with intervals) and the figures.

Every function takes the list of result rows (dicts with :data:`treespec_sim.families.COLUMNS`
keys plus per-family extras) and ignores families that are absent.
``python -m treespec_sim.report RUN_DIR --page docs/results.md`` turns a finished sweep into a
documentation page (:func:`results_page`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .calibrate import QUANTITIES, QUANTITY_LABELS, TOLERANCE, calibration_rows
from .experiments.stochastic import CLAIMS, claims_table
from .experiments.stochastic import plot_tau_vs_temperature as plot
from .families import FAMILIES
from .methods import uses_budget
from .plot import figure_legend
from .stats import t_quantile

__all__ = ["FIGURES", "results_page", "summary_markdown", "write_figures"]


def _fam(rows: Sequence[dict], family: str) -> list[dict]:
    return [r for r in rows if r.get("family") == family]


def _pct(x: float) -> str:
    return f"{100 * (x - 1):+.1f}%"


# Pages that explain a result which does not go the way a paper (or our own theory) says.
# Paths are from the repository root; summary_markdown rewrites them relative to the run
# folder (where summary.md lies), results_page relative to its page.
UNIVER_PAGE = "[univer.md §3–4](docs/theory/univer.md#4-synthetic-results-at-t--1)"
TSUBAME_PAGE = "[tsubame.md §4](docs/theory/tsubame.md#4-results-synthetic-docsresultsstochastic)"
#: What a table says under itself when one of its rows links a page.
PAGE_NOTES = {
    UNIVER_PAGE: "`univer` (safe step choice) is ≥ Traversal in expectation on every tree, but "
                 "neither it nor Traversal is ≥ RRSw on every shape (witness: a deep subtree under "
                 "the second-drawn child); `univer-fixed` (the fixed-order reconstruction) loses "
                 "to RRSw when the first-drawn child carries the deep subtree, as on "
                 "DDTree-planned shapes; `univer-guided` has no guarantee. The safe rule's "
                 "guarantee is in expectation over the draws: on a drawn tree it often loses a "
                 "little to Traversal and rarely wins by more, so a few dozen contexts can put "
                 "its interval against Traversal below 0 (150 contexts per cell: "
                 "`docs/results/verifiers/`, all six T = 1 intervals contain 0). What each rule "
                 "guarantees and where each claim was checked: [`docs/theory/univer.md` "
                 "§3–4](docs/theory/univer.md#4-synthetic-results-at-t--1) and the issue "
                 "“UniVer that never falls below Traversal”.",
    TSUBAME_PAGE: "What the Tsubame / sampled-chain claims are, where they hold on the "
                  "worlds calibrated at T = 0 and T = 1, how they moved from the older worlds "
                  "(the sampled-chain advantage at high T flips: the drafter's own T > 0 law is "
                  "not calibrated) and their caveats: [`docs/theory/tsubame.md` §4]"
                  "(docs/theory/tsubame.md#4-results-synthetic-docsresultsstochastic).",
}
#: Claims of the stochastic table with a published direction: label -> (sign of a - b
#: claimed, lowest T it is claimed at, page that discusses it).
CLAIM_DIRECTIONS = {
    "Tsubame-RRSw vs deterministic tree": (+1, 0.0, TSUBAME_PAGE),
    "Tsubame-RRSw vs corrected sampled chain": (+1, 0.0, TSUBAME_PAGE),
    "Tsubame-RRSw vs Tsubame-RRS": (+1, 0.0, TSUBAME_PAGE),
    "Tsubame-UniVer vs Tsubame-RRSw": (+1, 0.0, UNIVER_PAGE),
    # DFlash PR #169: at high T a deterministic tree falls behind a sampled chain.
    "deterministic tree vs corrected sampled chain": (-1, 1.0, TSUBAME_PAGE),
}
_CI = re.compile(r"\[([+-]?[\d.]+)%?, ([+-]?[\d.]+)%?\]")


def _verdict(sign: int, low: float, high: float, page: str, n: int | None = None) -> str:
    """Does an interval of ``a - b`` show the claimed sign? Link the page when it does not.

    An interval that spans 0 says so, and, given the ``n`` contexts it rests on, about how many
    would decide a difference of the size observed: the half-width shrinks as ``1/sqrt(n)``,
    so ``n (half-width / |mid|)^2``.
    """
    if (low > 0 if sign > 0 else high < 0):
        return "holds"
    if (high < 0 if sign > 0 else low > 0):
        return f"**reversed**, see {page}"
    mid, half = (low + high) / 2, (high - low) / 2
    if n and mid != 0:
        need = math.ceil(n * (half / abs(mid)) ** 2)
        return (f"undecided: CI spans 0 on {n} contexts; ≈ {need:,} would decide a difference "
                f"this size, see {page}")
    return f"undecided: CI spans 0, see {page}"


def _notes(lines: Sequence[str]) -> list[str]:
    """The notes of the pages that ``lines`` link, one paragraph each (empty if none)."""
    text = "\n".join(lines)
    return [x for page, note in PAGE_NOTES.items() if page in text for x in ("", note)]


# ----------------------------------------------------------------------------- tables
#: Published token entropy of Qwen3-8B at T = 1 (Wang et al. 2025, arXiv 2506.01939): more
#: than half of the tokens near zero (median ~ 0 nats), 80th percentile 0.672 nats.
QWEN3_ENTROPY = {"median": "≈ 0", "p80": "0.672", "share_below_0.05": "> 50%"}


def _calibration_section(rows: Sequence[dict], data: dict | None = None) -> list[str]:
    """Target vs achieved of the sweep's calibrated regimes (empty if it has none).

    ``data`` is a parsed calibration file (default: the package's); rows of a file from
    before the ``T = 1`` fit show a dash for the quantities it lacks.
    """
    cal = calibration_rows(data, regimes={r.get("regime") for r in rows})
    if not cal:
        return []
    tol = f"±{TOLERANCE:.0%}"
    pub = QWEN3_ENTROPY
    n = sorted({len(r.get("world_seeds") or []) for r in cal} - {0})
    worlds = "/".join(map(str, n)) if n else "several"
    out = ["## Calibration", "",
           "The regimes below are synthetic worlds fitted so that the argmax-chain τ (L = 15) and "
           "DDTree's τ at B = 64 at T = 0, and DDTree's τ at B = 64 at T = 1, match published "
           "Qwen3-8B values: T = 0 and T = 1 are both calibrated. Achieved = mean ± s.e. over "
           f"the contexts of {worlds} fresh worlds pooled (not the fit's worlds), with each "
           "world's mean in parentheses; `*` marks a target derived from published ratios "
           "rather than published. The last columns set the target's token entropy at T = 1 "
           "(along sampled "
           "continuations) beside Qwen3-8B's as published by Wang et al. 2025 "
           "(arXiv 2506.01939): more than half of the tokens near zero (median ≈ 0 nats) and an "
           "80th percentile of 0.672 nats. Derivations and limitations: "
           "`docs/results/calibration.md`; re-check with "
           "`python -m treespec_sim.calibrate --check` (stored table: `--table`).", "",
           "| regime | " + " | ".join(f"{QUANTITY_LABELS[q]} target | achieved ± se (per world)"
                                     for q in QUANTITIES)
           + f" | within {tol} | T = 1 token entropy median / p80, nats (Qwen3-8B: "
           f"{pub['median']} / {pub['p80']}) | share < 0.05 nats (Qwen3-8B: "
           f"{pub['share_below_0.05']}) |",
           "|---|" + "---|---|" * len(QUANTITIES) + "---|---|---|"]
    for r in cal:
        cells, off, missing = [], [], []
        for q in QUANTITIES:
            if f"{q}_target" not in r:
                cells += ["—", "—"]
                missing.append(QUANTITY_LABELS[q])
                continue
            star = "" if r[f"{q}_published"] else "*"
            worlds = " / ".join(f"{x:.2f}" for x in r.get(f"{q}_worlds") or [])
            cells += [f"{r[f'{q}_target']:.2f}{star}",
                      f"{r[f'{q}_mean']:.2f} ± {r[f'{q}_se']:.2f}"
                      + (f" ({worlds})" if worlds else "")]
            if not r[f"{q}_within"]:
                off.append(QUANTITY_LABELS[q])
        ok = "yes" if not off else "no (" + ", ".join(off) + ")"
        if missing:
            ok += "; not in the data file: " + ", ".join(missing)
        h = r.get("entropy_t1") or {}
        entropy = (f"{h['median']:.3f} / {h['p80']:.3f}" if "median" in h and "p80" in h
                   else "—")
        share = f"{h['share_below_0.05']:.0%}" if "share_below_0.05" in h else "—"
        out.append(f"| {r['regime']} | " + " | ".join(cells) + f" | {ok} | {entropy} | "
                   f"{share} |")
    return [*out, ""]


def _finite(*xs: object) -> bool:
    return all(isinstance(x, int | float) and np.isfinite(x) for x in xs)


def _between_worlds(r: dict, *, prefix: str = "tau", pct: bool = False) -> str:
    """A row's between-world interval and per-world values, e.g. ``[7.10, 7.80] (7.35 / 7.49 /
    7.51)``; ``pct`` writes ratios as signed percentages. A dash without per-world values."""
    means = r.get(f"{prefix}_world_means")
    if not means:
        return "—"
    fmt = (lambda x: f"{100 * (x - 1):+.1f}%") if pct else (lambda x: f"{x:.2f}")
    each = "(" + " / ".join(fmt(x) for x in means) + ")"
    lo, hi = r.get(f"{prefix}_world_ci_low"), r.get(f"{prefix}_world_ci_high")
    if not _finite(lo, hi):
        return f"one world {each}"
    head = f"{fmt(float(np.mean(means)))} " if pct else ""
    return f"{head}[{fmt(lo)}, {fmt(hi)}] {each}"


def _worlds(rows: Sequence[dict]) -> str:
    """The rows' worlds per regime, e.g. ``"3"`` (``"?"`` for rows from before worlds)."""
    return "/".join(sorted({str(r["worlds"]) for r in rows if r.get("worlds")})) or "?"


def _pooled(rows: Sequence[dict]) -> str:
    """``" pooled over 3 worlds"`` (empty for rows from before worlds)."""
    k = _worlds(rows)
    return "" if k == "?" else f" pooled over {k} worlds"


def _counts(rows: Sequence[dict]) -> str:
    """The rows' context counts: ``"63"``, ``"33/36"``, or their range when a precision
    target gave each cell its own (``"642 to 7,596 (each row's rounds)"``)."""
    counts = sorted({int(r["rounds"]) for r in rows if r.get("rounds")})
    if len(counts) > 3:
        return f"{counts[0]:,} to {counts[-1]:,} (each row's `rounds`)"
    return "/".join(map(str, counts)) if counts else "the"


def _ddtree_tables(rows: list[dict]) -> list[str]:
    k = _worlds(rows)
    counts = _counts(rows)
    out = ["## DDTree across budgets (exact E[τ])", "",
           f"Per regime, two rows. The first: the mean and its 95% t-interval over the {counts} "
           f"contexts of its {k} worlds pooled. The second (↳ {k} worlds): the 95% t-interval "
           f"over the {k} per-world means (k − 1 degrees of freedom), then those means in "
           "parentheses; the chain shows its means only.", ""]
    temps = sorted({r["temperature"] for r in rows})
    budgets = sorted({r["budget"] for r in rows if r["method"] != "chain"})
    for t in temps:
        sub = [r for r in rows if r["temperature"] == t]
        out.append(f"T = {t:g}:")
        out.append("")
        out.append("| regime | chain (L) | " + " | ".join(f"DDTree B={b}" for b in budgets)
                   + " | best B (tok/s, cost model) |")
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
            if any(r.get("tau_world_means") for r in rr):
                means = (chain or {}).get("tau_world_means")
                worlds = ["(" + " / ".join(f"{x:.2f}" for x in means) + ")" if means else "—"]
                worlds += [_between_worlds(dd[b]) if b in dd else "—" for b in budgets]
                n = len(next(r["tau_world_means"] for r in rr if r.get("tau_world_means")))
                out.append(f"| ↳ {n} world{'s' * (n > 1)} | " + " | ".join(worlds) + " | |")
        out.append("")
    out += ["Where target mass is lost (exit law, DDTree; fractions of a round's target "
            "continuations that leave the tree at an inner node = uncovered, at a leaf below "
            f"the depth cap = budget, at the depth cap; means over the contexts of {k} worlds "
            "pooled):", "",
            "| regime | T | B | uncovered | budget | depth cap | coverage C_p |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["method"] == "ddtree" and r["budget"] in (min(budgets), 64, max(budgets)):
            out.append(f"| {r['regime']} | {r['temperature']:g} | {r['budget']} | "
                       f"{r['lost_uncovered']:.3f} | {r['lost_budget']:.3f} | "
                       f"{r['lost_depth_cap']:.3f} | {r['coverage_mean']:.2f} |")
    return [*out, ""]


def _caddtree_tables(rows: list[dict]) -> list[str]:
    k = _worlds(rows)
    out = ["## Does CaDDTree match DDTree at the oracle budget?", "",
           "Throughput relative to DDTree at the best fixed budget of the grid, chosen after the "
           f"fact on the same rounds pooled over {k} worlds. *CaDDTree vs oracle*: the pooled "
           "ratio with its paired percentile-bootstrap 95% interval (decoded sequences of all "
           f"worlds resampled); *between worlds*: the mean of the {k} per-world ratios with their "
           "95% t-interval (k − 1 degrees of freedom), then each world's ratio:", "",
           "| regime | T | cost model | oracle B | CaDDTree mean B | CaDDTree vs oracle "
           "(pooled, bootstrap) | CaDDTree vs oracle between worlds (t) | "
           "exhaustive vs oracle | long-run vs oracle |",
           "|---|---|---|---|---|---|---|---|---|"]
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
            f"{_between_worlds(cad, prefix='rel', pct=True)} | "
            + (f"{_pct(exh['rel_to_baseline'])} | " if exh else "— | ")
            + (f"{_pct(lr['rel_to_baseline'])} |" if lr else "— |"))
    out += ["", f"CaDDTree matches (pooled CI reaches 0%) or beats the oracle budget in {wins} "
                f"of {total} (regime, T, cost model) cells.", ""]
    return out


def _stochastic_tables(rows: list[dict]) -> list[str]:

    budgets = sorted({r["budget"] for r in rows if uses_budget(r["method"])})
    b = 64 if 64 in budgets else (budgets[0] if budgets else 0)
    have = {r["method"] for r in rows}
    claims = [c for c in CLAIMS if c[1] in have and c[2] in have]
    k = _worlds(rows)
    out = ["## Sampled trees at T > 0: does Tsubame reverse the sampled-chain advantage?", "",
           f"Paired differences of exact E[τ] on shared contexts, B = {b} (chains: L nodes). "
           f"First the 95% t-interval over the contexts of {k} worlds pooled (the verdict in the "
           f"last column reads this one, and says when a claim that holds on it also holds on "
           f"the next); then the 95% t-interval over the {k} per-world differences (k − 1 "
           "degrees of freedom) and each world's difference:", ""]
    table = claims_table([r for r in rows if "taus" in r], b).splitlines()
    keep = [ln for ln in table[2:] if any(ln.startswith(f"| {c[0]} |") for c in claims)]
    # A last column says whether each published direction holds; the rows that do not link
    # the page that explains why.
    head = [table[0] + " claimed | holds? |", table[1] + "---|---|"]
    for i, ln in enumerate(keep):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        claim = CLAIM_DIRECTIONS.get(cells[0])
        ci = _CI.search(cells[4]) if len(cells) > 4 else None
        if claim is None or ci is None or float(cells[3]) < claim[1]:
            keep[i] = ln + " — | — |"
            continue
        sign, _, page = claim
        contexts = [int(r["rounds"]) for r in rows if r.get("regime") == cells[1]
                    and float(r.get("temperature", "nan")) == float(cells[3])
                    and r.get("rounds")]
        verdict = _verdict(sign, float(ci[1]), float(ci[2]), page,
                           max(contexts) if contexts else None)
        world = _CI.search(cells[6]) if len(cells) > 6 else None
        if verdict == "holds" and world is not None:
            # the pooled interval ignores world-to-world variation: say whether it survives it
            verdict = ("holds, also between worlds"
                       if _verdict(sign, float(world[1]), float(world[2]), page) == "holds"
                       else "holds pooled; not shown between worlds")
        keep[i] = ln + f" {'a > b' if sign > 0 else 'a < b'} | {verdict} |"
    return out + head + keep + _notes(keep) + [""]


def _missing(value: object) -> bool:
    """An empty cell: absent, empty (a CSV round trip) or NaN."""
    if value is None or value == "":
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def _verifier_tables(rows: list[dict]) -> list[str]:
    out = ["## UniVer's and Traversal's gain over RRSw (same sampled trees)", "",
           "UniVer reports +4.2–8.5% over RRSw. Here `univer` is the safe per-node step choice "
           "(≥ Traversal in expectation), `univer-guided` the value-guided one (no guarantee), "
           "`univer-fixed` the earlier fixed-order reconstruction (the rule for Greedy drafts); "
           "Traversal ≥ RRSw holds on balanced and deep-first shapes, not on every shape "
           "(`python -m proofs_check`). *vs RRSw*: the ratio of pooled means with the "
           f"{interval_label(rows, 'verifiers')} (paired); *between worlds*: the mean of the "
           f"per-world gains with their 95% t-interval ({_worlds(rows)} worlds, k − 1 degrees "
           "of freedom), then each world's gain; *vs Traversal*: a UniVer rule against "
           "Traversal on the same trees (pooled, paired bootstrap). Trees: `sampled-tree[WxD]` "
           "full W-ary trees of depth D (the UniVer paper's balanced trees), "
           "`tsubame-rrsw[B=..]` Tsubame's DDTree-shaped trees. The last column reads the "
           "pooled interval.", "",
           "| regime | T | tree | verifier | E[τ] | vs RRSw (pooled, bootstrap) | "
           "vs RRSw between worlds (t) | vs Traversal (pooled) | against the claim |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["verifier"] == "rrsw" and "greedy" not in r["method"]:
            continue
        lo, hi = 100 * (r["rel_ci_low"] - 1), 100 * (r["rel_ci_high"] - 1)
        if r["verifier"].startswith("univer"):
            note = ("**behind RRSw**" if hi < 0 else "below +4.2–8.5%" if hi < 4.2
                    else "above +4.2–8.5%" if lo > 8.5 else "consistent (CI meets the range)")
            if hi < 4.2:
                note += f", see {UNIVER_PAGE}"
        elif r["verifier"] == "traversal":
            note = (f"**behind RRSw**, see {UNIVER_PAGE}" if hi < 0
                    else "consistent (not behind)")
        else:
            note = "—"
        trav = ("—" if _missing(r.get("rel_traversal")) else
                f"{_pct(float(r['rel_traversal']))} [{_pct(float(r['rel_traversal_ci_low']))}, "
                f"{_pct(float(r['rel_traversal_ci_high']))}]")
        out.append(f"| {r['regime']} | {r['temperature']:g} | {r['method']} | {r['verifier']} "
                   f"| {r['tau_mean']:.3f} | {_pct(r['rel_to_baseline'])} "
                   f"[{_pct(r['rel_ci_low'])}, {_pct(r['rel_ci_high'])}] | "
                   f"{_between_worlds(r, prefix='rel', pct=True)} | {trav} | {note} |")
    return [*out, *_notes(out), ""]


def _family_size(family: str, plan: dict, rows: Sequence[dict]) -> str:
    """``"63 contexts per ddtree cell"``, or, for a precision target, the range the cells used."""
    unit = FAMILIES[family].unit
    if not plan.get("precision"):
        return f"{plan['rounds']} {unit} per {family} cell"
    used = sorted({int(r["rounds"]) for r in rows if r.get("family") == family})
    span = (f"{used[0]}" if len(used) == 1 else f"{used[0]} to {used[-1]}") if used else "?"
    cap = plan.get("max_rounds") or 64 * int(plan["rounds"])
    return (f"{span} {unit} per {family} cell (a pilot of {plan['rounds']}, then more until "
            f"every chain and DDTree τ interval is within ±{100 * plan['precision']:g}% of its "
            f"mean, at most {cap}; each row's `rounds` says how many)")


def _run_size(record: dict, rows: Sequence[dict], *, calibrated: bool) -> list[str]:
    """How much data stands behind every interval (rounds per cell, worlds per regime), and
    what the two kinds of interval mean."""
    plan = record.get("plan") or {}
    fams = {f: plan[f] for f in FAMILIES if isinstance(plan.get(f), dict) and "rounds" in plan[f]}
    worlds = sorted({int(p.get("worlds", 1)) for p in fams.values()}
                    or {int(r["worlds"]) for r in rows if r.get("worlds")})
    if not worlds:
        return []
    k = "/".join(map(str, worlds))
    out = []
    if fams:
        parts = [_family_size(f, p, rows) for f, p in fams.items()]
        seed = record.get("seed")
        seeds = (f"world seed {seed}" if worlds == [1] else
                 f"world seeds {seed} to {seed + max(worlds) - 1}" if isinstance(seed, int)
                 else "")
        text = (f"Run size: {', '.join(parts)}; each regime is {k} synthetic "
                f"world{'s' * (worlds != [1])} ({seeds}), every cell's rounds split evenly over "
                "them.")
        if calibrated:
            text += (" A calibrated regime's numbers scatter around its calibrated means "
                     "(measured on three other worlds) as any world's do; the between-world "
                     "intervals below show by how much.")
        out += [text, ""]
    if max(worlds) < 2:
        note = ("**Intervals.** One world per regime: every interval is over that world's "
                "contexts (or decoded sequences) only, not over worlds; another world would give "
                "other numbers by more than the intervals show.")
    else:
        note = ("**Two kinds of interval.** *Pooled*: over every context (or decoded sequence) "
                f"of the {k} worlds of a regime together, a t-interval or a paired percentile "
                "bootstrap (`treespec_sim.stats`); it says how precisely these worlds' mean is "
                "known, not how far another draw of worlds would move it, so it is narrow. "
                f"*Between worlds*: the t-interval over the {k} per-world means (or per-world "
                f"ratios and differences), with k − 1 degrees of freedom "
                f"({_dof_note(max(worlds))}); it is wide, and honest about world-to-world "
                "variation: a claim about a regime, rather than about these worlds, should hold "
                "on it. Each table names the interval it shows.")
    return [*out, note, ""]


def _dof_note(k: int) -> str:
    """``"2 with 3 worlds: the 97.5% t quantile is 4.30"``: why the between-world interval is
    wide."""
    if k < 2:
        return "none with one world"
    return f"{k - 1} with {k} worlds: the 97.5% t quantile is {t_quantile(k - 1):.2f}"


#: The repository's documentation folder, which the summary's links point into.
DOCS = Path(__file__).resolve().parent.parent / "docs"
# A Markdown link's target: ](target) up to a closing parenthesis or a space.
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_target(target: str, base: Path, to: Path) -> str:
    """``target`` (relative to the folder ``base``) as a link from the folder ``to``.

    Absolute URLs, anchors and absolute paths are left alone. A ``docs/...`` target that does
    not exist under ``base`` is read from the repository root (summaries written before their
    links were relative to the run folder).
    """
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return target
    path, sep, anchor = target.partition("#")
    src = base / path
    if not src.exists() and path.startswith("docs/"):
        src = DOCS.parent / path
    rel = Path(os.path.relpath(src.resolve(), to.resolve())).as_posix()
    return rel + sep + anchor


def _rebase_links(lines: Sequence[str], base: Path, to: Path) -> list[str]:
    """Every relative link of ``lines``, written from ``base``, rewritten to work from ``to``."""
    fix = lambda m: f"]({_relative_target(m.group(1), base, to)})"  # noqa: E731
    return [_LINK.sub(fix, line) for line in lines]


def _extrapolation_section(record: dict) -> list[str]:
    """The cells whose throughput priced latency outside a model's measured range (empty if
    none; ``record["extrapolated"]``, see :func:`treespec_sim.sweep.run_plan`)."""
    notes = record.get("extrapolated") or []
    if not notes:
        return []
    cells = sorted({n["cell"] for n in notes})
    out = ["## Latency priced outside its measured range", "",
           f"{len(cells)} cell(s) asked a latency model for costs outside the range it was "
           "measured on (`treespec_sim.cost.ExtrapolationWarning`); their modelled round "
           "times and throughputs there rest on the model's extension, not on a measurement.",
           "", "| cell | model | axis | requested | measured | outside the range |",
           "|---|---|---|---|---|---|"]
    for n in notes:
        req, got = n.get("requested") or ["?", "?"], n.get("measured") or ["?", "?"]
        unit = " tokens" if n.get("axis") == "tokens" else ""
        out.append(f"| `{n['cell']}` | `{n.get('model')}` | {n.get('axis')} | "
                   f"{req[0]}..{req[1]}{unit} | {got[0]}..{got[1]}{unit} | "
                   f"{n.get('action', '')} |")
    return [*out, ""]


def summary_markdown(rows: Sequence[dict], record: dict, *, folder: Path | None = None) -> str:
    """The human-readable summary of a sweep.

    Starts with a calibration table (target vs achieved) when any of the rows' regimes is a
    calibrated one (:func:`treespec_sim.calibrate.calibration_rows`), then the cells that
    priced latency outside a model's measured range (``record["extrapolated"]``), then the
    tables of every family present.

    Parameters
    ----------
    rows : sequence of dict
        The sweep's result rows.
    record : dict
        Its run record (``run.json``).
    folder : Path, optional
        Where the summary will be written: its links into ``docs/`` are made relative to it,
        so they work where the file lies. Without it they are relative to the repository root.
    """
    lines = [f"# treespec sweep: preset {record.get('preset')!r}", "",
             f"{len(rows)} result rows from {record.get('cells')} cells "
             f"({record.get('cells_skipped_on_resume', 0)} reused on resume), "
             f"{record.get('elapsed_s', 0):.0f} s, seed {record.get('seed')}, git "
             f"{record.get('git_commit', '?')[:10]}. Every throughput (tok/s) is modelled, "
             "not measured: E[τ] / (C_d + C_v(B + 1)), drafting plus one verification pass "
             "over B + 1 tokens, timed by a latency preset of `treespec_sim.cost`; each table "
             "names its preset (this run's default: "
             f"`{record.get('cost_model')}`). Figures: "
             + ", ".join(f"`{f}`" for f in record.get("figures", [])) + ".", ""]
    calibration = _calibration_section(rows)
    lines += _run_size(record, rows, calibrated=bool(calibration))
    lines += calibration
    lines += _extrapolation_section(record)
    sections = (("ddtree", _ddtree_tables), ("caddtree", _caddtree_tables),
                ("stochastic", _stochastic_tables), ("verifiers", _verifier_tables))
    for fam, fn in sections:
        sub = _fam(rows, fam)
        if sub:
            lines += fn(sub)
    if folder is not None:
        lines = _rebase_links(lines, DOCS.parent, Path(folder))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- figures
#: Exit causes as the figures spell them out (keys: the row columns ``lost_<cause>``).
CAUSES = {
    "uncovered": ("uncovered", "the target chose a token none of the node's children carry",
                  "tab:red"),
    "budget": ("budget", "exit at a leaf above the depth limit (the budget ran out)",
               "tab:orange"),
    "depth_cap": ("depth cap", "exit at a leaf at the drafter's depth L", "tab:gray"),
}
#: Figure-wide colours and line styles of the methods (one per method across figures).
_STYLES = {"chain": ("black", ":"), "ddtree": ("tab:blue", "-"), "dynamic": ("tab:cyan", "--"),
           "sampled-chain": ("tab:gray", ":"),
           "sampled-chain-corrected": ("tab:brown", "-."),
           "tsubame-rrs": ("tab:orange", "--"), "tsubame-rrsw": ("tab:red", "-"),
           "tsubame-univer": ("tab:purple", "-"),
           "tsubame-rrsw-tempered-plan": ("tab:pink", "--")}


def interval_label(rows: Sequence[dict], family: str) -> str:
    """What an interval of ``family``'s rows is: the statistic, the level, over how many what.

    Reads the number of rounds and of worlds from the rows and the unit from the family's grid
    (:attr:`treespec_sim.families.DDTreeGrid.unit` and the others), e.g. ``"95% t-interval
    over 64 contexts pooled over 3 worlds"``; the kind of interval follows
    :mod:`treespec_sim.stats` (these are the pooled intervals, not the between-world ones).
    """
    kind = {"ddtree": "t-interval", "stochastic": "t-interval",
            "caddtree": "percentile-bootstrap interval",
            "verifiers": "percentile-bootstrap interval"}.get(family, "interval")
    grid = FAMILIES.get(family)
    unit = grid.unit if grid is not None else "rounds"
    n = _counts(rows)
    worlds = sorted({int(r["worlds"]) for r in rows if r.get("worlds")})
    pooled = f" pooled over {'/'.join(map(str, worlds))} worlds" if worlds else ""
    if family == "caddtree":  # rounds are decoded in sequences; the bootstrap resamples those
        return f"95% {kind} over {n} {unit}{pooled} (resampled by sequence)"
    return f"95% {kind} over {n} {unit}{pooled}"


def _figure(n: int, w: float = 4.4, h: float = 3.4):
    """A constrained-layout grid of ``n`` panels (at most 4 a row); spare panels switched off.

    Constrained layout keeps every label and an ``"outside ..."`` figure legend inside the
    canvas (``tight_layout`` with a figure legend clips or overlaps it).
    """
    import matplotlib.pyplot as plt

    cols = min(4, n)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows + 0.8), squeeze=False,
                             layout="constrained")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)[:n]


def _budget_axis(ax, budgets: Sequence[int]) -> None:
    """Log-2 budget axis ticked at the grid's budgets, written as numbers (not 2^k)."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted(set(budgets))
    if len(ticks) > 8:  # keep tick labels from colliding: the powers of two among them
        ticks = [b for b in ticks if b & (b - 1) == 0] or ticks[::2]
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("budget B (draft nodes)")


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tau_vs_budget(rows: list[dict], path: Path) -> None:
    """Exact E[τ] vs budget per regime: DDTree (and dynamic) lines with interval bands per
    temperature, the chain as a dotted level; one legend for the figure."""
    from matplotlib.patches import Patch

    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    temps = sorted({r["temperature"] for r in rows})
    colors = {t: f"C{i}" for i, t in enumerate(temps)}
    fig, axes = _figure(len(regimes))
    handles: dict[str, object] = {}
    for ax, regime in zip(axes, regimes, strict=True):
        for t in temps:
            c = colors[t]
            for m, style in (("ddtree", "-"), ("dynamic", "--")):
                pts = sorted((r for r in rows if r["regime"] == regime and r["method"] == m
                              and r["temperature"] == t), key=lambda r: r["budget"])
                if not pts:
                    continue
                x = [r["budget"] for r in pts]
                line, = ax.plot(x, [r["tau_mean"] for r in pts], style, color=c, marker="o",
                                ms=3)
                handles.setdefault(f"{m}, T = {t:g}", line)
                ax.fill_between(x, [r["tau_ci_low"] for r in pts],
                                [r["tau_ci_high"] for r in pts], color=c, alpha=0.2, lw=0)
            for r in rows:
                if r["regime"] == regime and r["method"] == "chain" and r["temperature"] == t:
                    line = ax.axhline(r["tau_mean"], ls=":", color=c)
                    handles.setdefault(f"chain (L = {r['budget']} nodes), T = {t:g}", line)
        _budget_axis(ax, [r["budget"] for r in rows if r["method"] != "chain"])
        ax.set_title(regime, fontsize=10)
        ax.set_ylabel("E[τ] (tokens per round)")
        ax.grid(alpha=0.3)
    handles["shaded: " + interval_label(rows, "ddtree")] = Patch(color="0.5", alpha=0.3)
    figure_legend(fig, list(handles.values()), list(handles))
    _save(fig, path)


def _by_depth_cause(r: dict) -> tuple[np.ndarray, bool]:
    """``(D+1, 3)`` exit mass by depth and cause of a row, and whether the split is exact.

    Rows with ``exit_by_depth_cause`` carry it. Older rows carry only ``exit_by_depth``; then
    depth 0 (the root, an inner node) is ``uncovered`` and depth ``L`` (only leaves there) is
    ``depth cap`` exactly, while the depths between mix ``uncovered`` and ``budget``: that
    mass is returned in the ``uncovered`` column and flagged inexact.
    """
    if "exit_by_depth_cause" in r:
        return np.asarray(r["exit_by_depth_cause"], dtype=np.float64), True
    d = np.asarray(r["exit_by_depth"], dtype=np.float64)
    out = np.zeros((d.size, 3))
    out[:-1, 0] = d[:-1]
    out[-1, 2] = d[-1]
    return out, False


def plot_lost_mass(rows: list[dict], path: Path) -> None:
    """Where DDTree loses target mass: stacked bars of exit mass per depth, by cause.

    One panel per regime at the lowest temperature of the run and one budget (64 when the grid
    has it, else its middle one); bar heights at a depth sum to the exit mass there, and all
    bars of a panel sum to 1 (every target continuation leaves the tree somewhere).
    """
    from matplotlib.patches import Patch

    t0 = min(r["temperature"] for r in rows)
    budgets = sorted({r["budget"] for r in rows if r["method"] == "ddtree"})
    b = 64 if 64 in budgets else budgets[len(budgets) // 2]
    pts = [r for r in rows if r["method"] == "ddtree" and r["temperature"] == t0
           and r["budget"] == b and ("exit_by_depth" in r or "exit_by_depth_cause" in r)]
    if not pts:
        return
    fig, axes = _figure(len(pts), h=3.0)
    exact_all = True
    for ax, r in zip(axes, pts, strict=True):
        table, exact = _by_depth_cause(r)
        exact_all &= exact
        depth = np.arange(table.shape[0])
        bottom = np.zeros(depth.size)
        for j, (key, (name, _, color)) in enumerate(CAUSES.items()):
            label = name if exact or key != "uncovered" else "uncovered or budget"
            ax.bar(depth, table[:, j], bottom=bottom, width=0.8, color=color,
                   hatch=None if exact or key != "uncovered" else "//",
                   label=f"{label}: {r[f'lost_{key}']:.2f}")
            bottom += table[:, j]
        ax.set_xticks(depth[:: 1 if depth.size <= 16 else 2])
        ax.set_xlim(-0.6, depth[-1] + 0.6)
        # Headroom above the tallest bar for the legend (bars start at 0, no margin there).
        ax.set_ylim(0, max(float(bottom.max()), 1e-9) * 1.45)
        ax.set_title(f"{r['regime']} · DDTree B = {b} · T = {t0:g}", fontsize=9)
        ax.set_xlabel("depth of the node the target leaves at")
        ax.set_ylabel("exit mass")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, title="total lost", title_fontsize=7, loc="upper right")
    note = ("Each bar: the fraction of target continuations that leave the tree at that depth, "
            f"mean over {'/'.join(sorted({str(r['rounds']) for r in pts}))} "
            f"{FAMILIES['ddtree'].unit}{_pooled(pts)} (exact per context, no interval drawn). ")
    if not exact_all:
        note += ("Hatched: these rows record exit mass by depth only, so uncovered and budget "
                 "are not split at inner depths. ")
    labels = [f"{name}: {text}" for name, text, _ in CAUSES.values()]
    figure_legend(fig, [Patch(color=c) for *_, c in CAUSES.values()], labels,
                  title=note.strip(), max_cols=3)
    _save(fig, path)


def plot_throughput(rows: list[dict], path: Path) -> None:
    """CaDDTree family: modelled throughput vs fixed budget, each adaptive rule's choice
    marked; one panel per (regime, T, cost model), the cost model in the panel's title."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    panels = list(dict.fromkeys((r["regime"], r["temperature"], r["cost_model"]) for r in rows))
    fig, axes = _figure(len(panels))
    marks = {"ddtree-oracle": ("*", "tab:orange", 13, "best fixed B (oracle, after the fact)"),
             "caddtree": ("o", "tab:red", 10, "CaDDTree (adaptive per round)"),
             "longrun": ("s", "tab:green", 7, "long-run rule"),
             "exhaustive": ("x", "black", 7, "exhaustive per-round optimum")}
    for ax, (regime, t, cm) in zip(axes, panels, strict=True):
        sub = [r for r in rows if (r["regime"], r["temperature"], r["cost_model"])
               == (regime, t, cm)]
        fixed = sorted((r for r in sub if r["method"] == "ddtree"), key=lambda r: r["budget"])
        x = [r["budget"] for r in fixed]
        ax.plot(x, [r["throughput_tok_s"] for r in fixed], color="tab:blue")
        ax.fill_between(x, [r["throughput_ci"][0] for r in fixed],
                        [r["throughput_ci"][1] for r in fixed], color="tab:blue", alpha=0.2,
                        lw=0)
        for r in sub:
            if r["method"] in marks:
                m, c, s, _ = marks[r["method"]]
                ax.plot([r["tree_size_mean"]], [r["throughput_tok_s"]], m, color=c, ms=s,
                        mfc="none" if m in "os" else c)
        _budget_axis(ax, x)
        ax.set_title(f"{regime} · T = {t:g} · cost model {cm}", fontsize=9)
        ax.set_ylabel("tokens / s (modelled)")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color="tab:blue", label="DDTree at fixed B"),
               Patch(color="tab:blue", alpha=0.3,
                     label="shaded: " + interval_label(rows, "caddtree")),
               *(Line2D([], [], ls="", marker=m, color=c, ms=min(s, 9),
                        mfc="none" if m in "os" else c, label=f"{lab} at its mean B")
                 for m, c, s, lab in marks.values())]
    figure_legend(fig, handles, [h.get_label() for h in handles], max_cols=3,
                  title="tokens/s = E[τ] / (C_d + C_v(B + 1)) under the panel's latency preset "
                        "(treespec_sim.cost)")
    _save(fig, path)


def _tree_label(method: str) -> str:
    """``sampled-tree[2x5]`` -> ``2 wide × 5 deep``; ``tsubame-rrsw[B=64]`` -> ``Tsubame B=64``."""
    inner = method.split("[", 1)[1].split("]", 1)[0] if "[" in method else method
    if method.startswith("tsubame"):
        return f"Tsubame {inner}"
    return inner.replace("x", " wide × ") + " deep"


def plot_verifier_gains(rows: list[dict], path: Path) -> None:
    """Gain in exact E[τ] over RRSw on the same sampled trees, with interval bars.

    One group per (regime, T, tree); within it one bar per arm that the tree has (Tsubame
    trees have no Greedy-draft arm).
    """
    import matplotlib.pyplot as plt

    sub = [r for r in rows if not (r["verifier"] == "rrsw" and "greedy" not in r["method"])]
    groups = list(dict.fromkeys((r["regime"], r["temperature"], r["method"].removesuffix(
        "+greedy")) for r in sub))
    labels = [f"{g[0]}, T = {g[1]:g}\n{_tree_label(g[2])}" for g in groups]
    arms = [("traversal", False, "Traversal"), ("univer", False, "UniVer (safe)"),
            ("univer-guided", False, "UniVer (value-guided)"),
            ("univer-fixed", True, "fixed-order UniVer on Greedy drafts")]
    fig, ax = plt.subplots(figsize=(max(6.5, 1.8 * len(labels)), 4.4), layout="constrained")
    width = 0.8 / len(arms)
    for j, (verifier, greedy, name) in enumerate(arms):
        xs, ys, los, his = [], [], [], []
        for i, g in enumerate(groups):
            hit = [r for r in sub if (r["regime"], r["temperature"]) == g[:2]
                   and r["method"] == g[2] + ("+greedy" if greedy else "")
                   and r["verifier"] == verifier]
            if not hit:
                continue
            r = hit[0]
            y = 100 * (r["rel_to_baseline"] - 1)
            xs.append(i + (j - (len(arms) - 1) / 2) * width)
            ys.append(y)
            los.append(y - 100 * (r["rel_ci_low"] - 1))
            his.append(100 * (r["rel_ci_high"] - 1) - y)
        if xs:
            ax.bar(xs, ys, width, yerr=[los, his], capsize=2, label=name, color=f"C{j}")
    ax.axhspan(4.2, 8.5, color="gray", alpha=0.15, label="UniVer's reported +4.2–8.5%")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(labels)), labels, fontsize=8)
    ax.set_ylabel("E[τ] gain over RRSw (%)")
    ax.set_title("Verifiers on the same sampled trees\nbars: "
                 + interval_label(sub, "verifiers") + " (paired)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    # Below the axes: inside, it would cover the tallest interval bars.
    handles, labels = ax.get_legend_handles_labels()
    figure_legend(fig, handles, labels, max_cols=3)
    _save(fig, path)


def plot_tau_vs_temperature(rows: list[dict], path: Path) -> None:
    """Stochastic family: E[τ] vs T per method (B = 64, or the grid's first budget)."""
    budgets = sorted({r["budget"] for r in rows if uses_budget(r["method"])})
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
    # Drop the summary's own title line; keep the rest verbatim but for its links, written
    # from the run folder, which must be relative to the page to resolve.
    body = summary[1:] if summary and summary[0].startswith("# ") else summary
    body = _rebase_links(body, run_dir, page.parent)
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
