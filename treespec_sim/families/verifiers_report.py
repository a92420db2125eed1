r"""How the ``verifiers`` family is presented: every rule against RRSw (and the UniVer rules
against Traversal) in ``summary.md``, the engines' table (every rule on the trees a DDTree port
verifies, lossy ones with their bias), its figures, its claims (UniVer's published gain,
Traversal ≥ RRSw; ``docs/theory/univer.md``) and its console rows, read off the rows of
:mod:`.verifiers`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import (
    UNIVER_PAGE,
    Claim,
    ClaimedRange,
    FigureSpec,
    headline,
    interval_units,
    judge,
    seconds_per_unit,
)
from .render import (
    between_worlds,
    figure_legend,
    missing,
    notes,
    pct,
    save_figure,
    verdict_cell,
    worlds_label,
)
from .render import interval_label as render_interval
from .verifiers import (
    ARMS,
    CLAIM_RANGE,
    CLAIMS,
    TRAVERSAL_CLAIMED,
    UNIVER_CLAIMED,
    VerifierGrid,
    VerifierRow,
    name,
)

__all__ = ["ENGINE_BARS", "claimed_range", "claims", "console_rows", "engine_table", "figures",
           "has_engine_rows", "interval_label", "is_lossless", "plot_engine_rules",
           "plot_verifier_gains", "row_judgement", "tables"]


def tables(rows: list[VerifierRow]) -> list[str]:
    """The family's section of ``summary.md``: every rule against RRSw (pooled, between
    worlds) and the UniVer rules against Traversal, each row read against the claims."""
    out = ["## UniVer's and Traversal's gain over RRSw (same sampled trees)", "",
           "UniVer reports +4.2–8.5% over RRSw. Here `univer` is the safe per-node step choice "
           "(≥ Traversal in expectation), `univer-guided` the value-guided one (no guarantee), "
           "`univer-fixed` the earlier fixed-order reconstruction (the rule for Greedy drafts); "
           "Traversal ≥ RRSw holds on balanced and deep-first shapes, not on every shape "
           "(`python -m proofs_check`). *vs RRSw*: the ratio of pooled means with the "
           f"{interval_label(rows)} (paired); *between worlds*: the mean of the "
           f"per-world gains with their 95% t-interval ({worlds_label(rows)} worlds, k − 1 degrees "
           "of freedom), then each world's gain; *vs Traversal*: a UniVer rule against "
           "Traversal on the same trees (pooled, paired bootstrap). Trees: `sampled-tree[WxD]` "
           "full W-ary trees of depth D (the UniVer paper's balanced trees), "
           "`tsubame-rrsw[B=..]` Tsubame's DDTree-shaped trees. The last column reads the "
           "pooled interval against the claims by the one verdict rule (holds: inside the "
           "claimed range; does not hold: entirely outside; undecided: across an edge): every "
           f"UniVer rule against UniVer's published +{CLAIM_RANGE[0]:g}–{CLAIM_RANGE[1]:g}%, "
           "Traversal against ≥ 0.", "",
           "| regime | T | tree | verifier | E[τ] | vs RRSw (pooled, bootstrap) | "
           "vs RRSw between worlds (t) | vs Traversal (pooled) | against the claim |",
           "|---|---|---|---|---|---|---|---|---|"]
    engine_rows = [r for r in rows if _engine_cell(r)]
    for r in rows:
        if r.verifier == "rrsw" and "greedy" not in r.method:
            continue
        if not is_lossless(r) or (r.baseline or "rrsw") != "rrsw" \
                or str(r.method).startswith("ddtree["):
            continue  # lossy rows, chains and DDTree's own tree: the engines' table below
        note = verdict_cell(row_judgement(r), UNIVER_PAGE)
        trav = ("—" if missing(r.rel_traversal) else
                f"{pct(float(r.rel_traversal))} [{pct(float(r.rel_traversal_ci_low))}, "
                f"{pct(float(r.rel_traversal_ci_high))}]")
        out.append(f"| {r.regime} | {r.temperature:g} | {r.method} | {r.verifier} "
                   f"| {r.tau_mean:.3f} | {pct(r.rel_to_baseline)} "
                   f"[{pct(r.rel_ci_low)}, {pct(r.rel_ci_high)}] | "
                   f"{between_worlds(r, prefix='rel', pct=True)} | {trav} | {note} |")
    out = [*out, *notes(out), ""]
    return out + engine_table(engine_rows) if engine_rows else out


def is_lossless(row: VerifierRow) -> bool:
    """A row's ``lossless`` column (True when empty: rows written before lossy rules were
    measured)."""
    return row.lossless is not False


def _engine_cell(row: VerifierRow) -> bool:
    """A row of a DDTree, Tsubame or chain cell (the trees the engines verify)."""
    m = str(row.method)
    return m.split("[")[0] in ("ddtree", "sampled-ddtree", "tsubame-rrsw", "tsubame-rrs",
                               "chain", "sampled-chain-corrected")


def engine_table(rows: list[VerifierRow]) -> list[str]:
    """The rules engines ship beside the exact ones, on the trees a DDTree port would verify
    at ``T > 0``: every arm of every DDTree, Tsubame and chain cell, lossless or not."""
    out = ["## Which rule should a DDTree port use at T > 0 (DDTree, Tsubame and chain trees)",
           "",
           "Every rule on the same contexts: DDTree's own deterministic tree (`ddtree[B=..]`: "
           "`follow`, `tev` and SGLang's target-only `sample-match`, lossless with thresholds 1, "
           "all three E[τ] = 1 + C_p; SGLang's thresholds below 1 and the sibling-order "
           "`min(1, p/q)` rule `sibling-ratio`, lossy), DDTree's shape filled by draws "
           "(`sampled-ddtree[B=..]`: RRS on an i.i.d. fill, RRSw, Traversal and UniVer without "
           "replacement), Tsubame's trees, and the drafter's chain (`sampled-chain-corrected`: "
           "token-wise `rrs` and vLLM's `block` verification; `chain`: the argmax chain). "
           "*E[τ]* is exact over the verifier's coins (a lossy rule's is *apparent*: the tokens "
           "it counts do not follow the target); *tok/s* is modelled from it and the tree size "
           "(`cost_model` column); *vs baseline*: the paired ratio of pooled means to the "
           "cell's first arm (RRSw; RRS on chains) with its percentile-bootstrap interval; "
           "*first-token TV*: a lossy rule's bias, the total-variation distance of the law of "
           "a round's first token from the target's, mean over contexts [95% t-interval] "
           "(0 for the lossless rules, by the theorems `python -m proofs_check` checks).", "",
           "| regime | T | tree | rule | lossless | E[τ] | tok/s (modelled) | vs baseline | "
           "first-token TV |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = is_lossless(r)
        tv = ("0" if ok else f"**{float(r.first_token_tv):.3f}** "
              f"[{float(r.first_token_tv_ci_low):.3f}, "
              f"{float(r.first_token_tv_ci_high):.3f}]")
        base = "baseline" if float(r.rel_to_baseline) == 1.0 and r.verifier == \
            r.baseline else (f"{pct(float(r.rel_to_baseline))} "
                                    f"[{pct(float(r.rel_ci_low))}, "
                                    f"{pct(float(r.rel_ci_high))}]")
        out.append(f"| {r.regime} | {float(r.temperature):g} | {r.method} | "
                   f"{r.verifier} | {'yes' if ok else '**no**'} | "
                   f"{float(r.tau_mean):.3f}{'' if ok else ' (apparent)'} | "
                   f"{float(r.throughput_tok_s):.0f} | {base} | {tv} |")
    return [*out, ""]


def _tree_label(method: str) -> str:
    """``sampled-tree[2x5]`` -> ``2 wide × 5 deep``; ``tsubame-rrsw[B=64]`` -> ``Tsubame B=64``."""
    inner = method.split("[", 1)[1].split("]", 1)[0] if "[" in method else method
    if method.startswith("recorded"):
        return f"recorded {method.split()[1].split('[')[0]} {inner}"
    if method.startswith("tsubame"):
        return f"Tsubame {inner}"
    if method.startswith("sampled-ddtree"):
        return f"DDTree shape, drawn {inner}"
    return inner.replace("x", " wide × ") + " deep"


def plot_verifier_gains(rows: list[VerifierRow], path: Path) -> None:
    """Gain in exact E[τ] over RRSw on the same sampled trees, with paired interval bars.

    One panel per regime (two columns when the panels are narrow), in it one group per (T,
    tree) and one bar per rule that the tree has (every rule of the table: Traversal and the
    three UniVer rules on the same sampled trees, and the fixed-order rule on Greedy drafts,
    hatched; Tsubame trees have no Greedy-draft arm); the band is UniVer's published gain
    (:data:`CLAIM_RANGE`). All panels share the gain axis.
    """
    import matplotlib.pyplot as plt

    # every rule of the table but the baseline: the fixed-order reconstruction on the sampled
    # trees too (it can fall far behind RRSw there), and on Greedy drafts of k-ary shapes
    arms = [("traversal", False, "Traversal"), ("univer", False, "UniVer (safe)"),
            ("univer-guided", False, "UniVer (value-guided)"),
            ("univer-fixed", False, "fixed-order UniVer (same sampled trees)"),
            ("univer-fixed", True, "fixed-order UniVer on Greedy drafts")]
    plotted = {a[0] for a in arms}
    sub = [r for r in rows if r.verifier in plotted and is_lossless(r)
           and not str(r.method).startswith("ddtree[")]
    regimes = list(dict.fromkeys(r.regime for r in sub))
    groups = {reg: list(dict.fromkeys((r.temperature, r.method.removesuffix("+greedy"))
                                      for r in sub if r.regime == reg)) for reg in regimes}
    per = max(len(g) for g in groups.values())
    cols = 1 if per >= 4 or len(regimes) == 1 else 2
    nrows = -(-len(regimes) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(cols * (1.5 * per + 1.6), 2.9 * nrows + 1.2),
                             squeeze=False, sharey=True, layout="constrained")
    width = 0.8 / len(arms)
    low, high = CLAIM_RANGE
    for ax, regime in zip(axes.flat, regimes, strict=False):
        for j, (verifier, greedy, label) in enumerate(arms):
            xs, ys, los, his = [], [], [], []
            for i, (t, method) in enumerate(groups[regime]):
                hit = [r for r in sub if (r.regime, r.temperature) == (regime, t)
                       and r.method == method + ("+greedy" if greedy else "")
                       and r.verifier == verifier]
                if not hit:
                    continue
                r = hit[0]
                y = 100 * (r.rel_to_baseline - 1)
                xs.append(i + (j - (len(arms) - 1) / 2) * width)
                ys.append(y)
                # a percentile interval may miss its point estimate on few rounds: clip at 0
                los.append(max(0.0, y - 100 * (r.rel_ci_low - 1)))
                his.append(max(0.0, 100 * (r.rel_ci_high - 1) - y))
            if xs:
                ax.bar(xs, ys, width, yerr=[los, his], capsize=2, label=label, color=f"C{j}",
                       hatch="//" if greedy else None)
        ax.axhspan(low, high, color="gray", alpha=0.15,
                   label=f"UniVer's reported +{low:g}–{high:g}%")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(np.arange(len(groups[regime])),
                      [f"T = {t:g}\n{_tree_label(m)}" for t, m in groups[regime]], fontsize=8)
        ax.set_title(regime, fontsize=10)
        ax.set_ylabel("E[τ] gain over RRSw (%)")
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(regimes):]:
        ax.axis("off")
    # Below the panels: inside, it would cover the tallest interval bars.
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure_legend(fig, handles, labels, max_cols=3,
                  title="Verifiers on the same sampled trees; bars: " + interval_label(sub)
                  + " (paired)")
    save_figure(fig, path)


def interval_label(rows: list[VerifierRow]) -> str:
    """What the family's gain intervals are (a paired bootstrap over contexts)."""
    return render_interval(rows, "percentile-bootstrap interval", VerifierGrid.unit)


#: The bars of :func:`plot_engine_rules`: (row method prefix, rule, legend label), by tree.
ENGINE_BARS = (
    ("ddtree[", "follow", "DDTree tree: follow = tev = sample-match"),
    ("ddtree[", "sample-match[acc=0.7]", "DDTree tree: SGLang acc = 0.7"),
    ("ddtree[", "sample-match[single=0.5]", "DDTree tree: SGLang single = 0.5"),
    ("ddtree[", "sibling-ratio", "DDTree tree: sibling-order min(1, p/q)"),
    ("sampled-ddtree[", "rrsw", "DDTree shape drawn: RRSw"),
    ("sampled-ddtree[", "univer", "DDTree shape drawn: UniVer"),
    ("tsubame-rrsw[", "rrsw", "Tsubame: RRSw"),
    ("tsubame-rrsw[", "univer", "Tsubame: UniVer"),
    ("sampled-chain-corrected", "rrs", "drafter's chain: token-wise RRS"),
    ("sampled-chain-corrected", "block", "drafter's chain: block"),
)


def has_engine_rows(rows: list[VerifierRow]) -> bool:
    """Whether a run has DDTree or chain cells (the trees only the engines' preset runs)."""
    return any(str(r.method).startswith(("ddtree[", "sampled-chain-corrected"))
               for r in rows)


def plot_engine_rules(rows: list[VerifierRow], path: Path) -> None:
    """E[τ] of the rules a DDTree port chooses between, per regime, with 95% t-interval bars.

    One panel per regime, one bar per :data:`ENGINE_BARS` entry the run has; a lossy rule's
    bar is hatched and labelled with its first-token TV (its E[τ] is apparent).
    """
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(r.regime for r in rows if has_engine_rows([r])))
    cols = 1 if len(regimes) == 1 else 2
    nrows = -(-len(regimes) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.2 * cols, 2.6 * nrows + 1.6),
                             squeeze=False, layout="constrained")
    # one hue per tree, the first rule of a pair lighter
    colors = ("C0", "C3", "C3", "C3", "#fdbf6f", "C1", "#98df8a", "C2", "#c7c7c7", "C7")
    for ax, regime in zip(axes.flat, regimes, strict=False):
        for j, (prefix, rule, label) in enumerate(ENGINE_BARS):
            hit = [r for r in rows if r.regime == regime and r.verifier == rule
                   and str(r.method).startswith(prefix)]
            if not hit:
                continue
            r = hit[0]
            y, lo, hi = (float(x) for x in (r.tau_mean, r.tau_ci_low, r.tau_ci_high))
            lossy = not is_lossless(r)
            ax.bar(j, y, 0.8, yerr=[[y - lo], [hi - y]], capsize=2, color=colors[j],
                   alpha=0.45 if lossy else 0.9, hatch="//" if lossy else None,
                   edgecolor="black" if lossy else None, label=label)
            if lossy:
                ax.annotate(f"TV {float(r.first_token_tv):.2f}", (j, hi), ha="center",
                            va="bottom", fontsize=6.5)
        ax.set_xticks([])
        ax.set_title(regime, fontsize=10)
        ax.set_ylabel("E[τ] (lossy: apparent)")
        ax.set_ylim(0, None)
        ax.margins(y=0.12)
        ax.grid(alpha=0.3, axis="y")
    for ax in list(axes.flat)[len(regimes):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure_legend(fig, handles, labels, max_cols=2,
                  title=f"T = 1, B = 64; hatched: lossy (E[τ] apparent, first-token TV above "
                        f"the bar); bars: 95% t-interval over {interval_units(rows[0])[0]} "
                        "contexts")
    save_figure(fig, path)


#: File name -> figure.
figures = {"verifier_gains.png": FigureSpec("verifier gains over RRSw", plot_verifier_gains),
           "engine_rules.png": FigureSpec("the rules a DDTree port chooses between at T > 0 "
                                          "(E[τ]; lossy rules hatched, with their bias)",
                                          plot_engine_rules, has_engine_rows)}


def _gain(r: VerifierRow) -> tuple[float, float, float]:
    """A row's pooled gain over RRSw in percent, ``(estimate, low, high)``; a percentile
    interval may miss its point estimate on few rounds: it is widened to hold it."""
    est, lo, hi = (100 * (float(x) - 1) for x in (r.rel_to_baseline, r.rel_ci_low,
                                                   r.rel_ci_high))
    return est, min(lo, est), max(hi, est)


def claimed_range(verifier: str) -> ClaimedRange | None:
    """What the family's claims say of ``verifier``'s gain over RRSw (every UniVer rule is
    read against UniVer's published range; None: no claim)."""
    if verifier.startswith("univer"):
        return UNIVER_CLAIMED
    return TRAVERSAL_CLAIMED if verifier == "traversal" else None


def row_judgement(r: VerifierRow):
    """:func:`judge` of a row's gain over RRSw against :func:`claimed_range` (None if no claim
    reads the row)."""
    claimed = claimed_range(r.verifier)
    if claimed is None:
        return None
    n, what = interval_units(r)
    return judge(*_gain(r), claimed, units=n or None, unit_name=what, unit="%")


def _gains(rows: list[VerifierRow], verifier: str) -> list[Claim]:
    """Per (regime, T, tree) evidence: ``verifier``'s pooled gain over RRSw, in percent."""
    text, claimed = CLAIMS[verifier]
    out = []
    for r in rows:
        if r.verifier != verifier or "greedy" in r.method:
            continue
        n, what = interval_units(r)
        out.append(Claim.judged(text, *_gain(r), "% E[τ] over RRSw", claimed, units=n or None,
                                unit_name=what, page=UNIVER_PAGE,
                                scope=f"{r.regime}, T = {float(r.temperature):g}, "
                                      f"{r.method}", family=name,
                                seconds_per_unit=seconds_per_unit(rows, r, n)))
    return out


def claims(rows: list[VerifierRow]) -> list[Claim]:
    """UniVer's (safe rule) published +4.2–8.5% over RRSw (holds where the pooled interval
    lies inside the range), and Traversal ≥ RRSw on the same trees; each over every (regime,
    T, tree) cell, by :func:`judge`."""
    low, high = CLAIM_RANGE
    out = [headline(CLAIMS["univer"][0], _gains(rows, "univer"),
                    margin=lambda c: min(c.low - low, high - c.high),
                    cells="(regime, T, tree) cells"),
           headline(CLAIMS["traversal"][0], _gains(rows, "traversal"),
                    margin=lambda c: c.low, cells="(regime, T, tree) cells")]
    return [c for c in out if c is not None]


def console_rows(rows: list[VerifierRow]) -> list[VerifierRow]:
    """The baseline (RRSw) and the first UniVer arm (the safe rule) of :data:`ARMS` on every
    tree."""
    shown = {ARMS[0][2], next(rule for label, _, rule in ARMS if label.startswith("univer"))}
    return [r for r in rows if r.verifier in shown]
