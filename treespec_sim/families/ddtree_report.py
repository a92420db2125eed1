r"""How the ``ddtree`` family is presented: its tables in ``summary.md``, its figures (the
tree's paired gain over the chain by budget; where target mass is lost, by depth and cause),
its claim and its console rows, read off the rows of :mod:`.ddtree`.

Its claim: DDTree's tree accepts more tokens per round than the chain of the same drafter
(``docs/theory/ddtree_surrogate.md``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .base import (
    Claim,
    ClaimedRange,
    FigureSpec,
    headline,
    interval_units,
    is_trace,
    seconds_per_unit,
)
from .ddtree import DDTreeGrid, DDTreeRow, name
from .render import (
    between_worlds,
    budget_axis,
    cost_label,
    counts,
    figure_grid,
    figure_legend,
    missing,
    pooled,
    save_figure,
    worlds_label,
)
from .render import interval_label as render_interval

__all__ = ["CAUSES", "CLAIM", "CLAIMED", "THEORY_PAGE", "claims", "console_rows", "figures",
           "interval_label", "plot_lost_mass", "plot_tau_vs_budget", "tables"]


def tables(rows: list[DDTreeRow]) -> list[str]:
    """The family's section of ``summary.md``: τ per budget (pooled and between worlds) per T,
    then where target mass is lost (exit law by cause) at three budgets."""
    k = worlds_label(rows)
    n = counts(rows)
    out = ["## DDTree across budgets (exact E[τ])", "",
           f"Per regime, two rows. The first: the mean and its 95% t-interval over the {n} "
           f"contexts of its {k} worlds pooled. The second (↳ {k} worlds): the 95% t-interval "
           f"over the {k} per-world means (k − 1 degrees of freedom), then those means in "
           "parentheses; the chain shows its means only. The third (↳ − chain, paired): "
           "DDTree's E[τ] minus the chain's on the contexts both hold, with the paired 95% "
           "t-interval.", ""]
    temps = sorted({r.temperature for r in rows})
    budgets = sorted({r.budget for r in rows if r.method != "chain"})
    for t in temps:
        sub = [r for r in rows if r.temperature == t]
        out.append(f"T = {t:g}:")
        out.append("")
        out.append("| regime | chain (L) | " + " | ".join(f"DDTree B={b}" for b in budgets)
                   + " | best B (tok/s, cost model) |")
        out.append("|---|---|" + "---|" * len(budgets) + "---|")
        for regime in dict.fromkeys(r.regime for r in sub):
            rr = [r for r in sub if r.regime == regime]
            chain = next((r for r in rr if r.method == "chain"), None)
            cells = [f"{chain.tau_mean:.2f}" if chain else "—"]
            dd = {r.budget: r for r in rr if r.method == "ddtree"}
            for b in budgets:
                r = dd.get(b)
                cells.append(f"{r.tau_mean:.2f} [{r.tau_ci_low:.2f}, "
                             f"{r.tau_ci_high:.2f}]" if r else "—")
            best = max(dd.values(), key=lambda r: r.throughput_tok_s, default=None)
            cells.append(f"{best.budget} ({best.throughput_tok_s:.0f}, "
                         f"{cost_label(best.cost_model, on_trace=is_trace(regime))})" if best
                         else "—")
            out.append(f"| {regime} | " + " | ".join(cells) + " |")
            if any(r.tau_world_means for r in rr):
                means = chain.tau_world_means if chain else None
                worlds = ["(" + " / ".join(f"{x:.2f}" for x in means) + ")" if means else "—"]
                worlds += [between_worlds(dd[b]) if b in dd else "—" for b in budgets]
                n = len(next(r.tau_world_means for r in rr if r.tau_world_means))
                out.append(f"| ↳ {n} world{'s' * (n > 1)} | " + " | ".join(worlds) + " | |")
            if any(not missing(r.diff_to_baseline) for r in dd.values()):
                gains = ["0"] + [_gain_text(dd.get(b)) for b in budgets]
                out.append("| ↳ − chain, paired | " + " | ".join(gains) + " | |")
        out.append("")
    out += ["Where target mass is lost (exit law, DDTree; fractions of a round's target "
            "continuations that leave the tree at an inner node = uncovered, at a leaf below "
            f"the depth cap = budget, at the depth cap; means over the contexts of {k} worlds "
            "pooled):", "",
            "| regime | T | B | uncovered | budget | depth cap | coverage C_p |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.method == "ddtree" and r.budget in (min(budgets), 64, max(budgets)):
            out.append(f"| {r.regime} | {r.temperature:g} | {r.budget} | "
                       f"{r.lost_uncovered:.3f} | {r.lost_budget:.3f} | "
                       f"{r.lost_depth_cap:.3f} | {r.coverage_mean:.2f} |")
    return [*out, ""]


def _gain_text(r: DDTreeRow | None) -> str:
    """``"+2.31 [+2.20, +2.42]"``: a row's paired difference to the chain, or ``"—"``."""
    if r is None or missing(r.diff_to_baseline):
        return "—"
    return f"{r.diff_to_baseline:+.2f} [{r.diff_ci_low:+.2f}, {r.diff_ci_high:+.2f}]"


#: Exit causes as the figures spell them out (keys: the row columns ``lost_<cause>``).
CAUSES = {
    "uncovered": ("uncovered", "the target chose a token none of the node's children carry",
                  "tab:red"),
    "budget": ("budget", "exit at a leaf above the depth limit (the budget ran out)",
               "tab:orange"),
    "depth_cap": ("depth cap", "exit at a leaf at the drafter's depth L", "tab:gray"),
}


def plot_tau_vs_budget(rows: list[DDTreeRow], path: Path) -> None:
    """What the tree gains over the chain, by budget: per regime, the paired difference
    ``E[tau](DDTree at B) - E[tau](chain)`` on the same contexts (:func:`_paired_columns`)
    with its paired 95% t-interval as a band, per temperature (the dynamic tree dashed); the
    chain is the line at 0 and its own E[tau] is in the panel's title. Rows without paired
    differences (cells of an earlier release) are left out. One legend for the figure."""
    from matplotlib.patches import Patch

    paired = [r for r in rows if r.baseline == "chain"
              and not missing(r.diff_to_baseline)]
    regimes = list(dict.fromkeys(r.regime for r in paired)) or ["—"]
    temps = sorted({r.temperature for r in rows})
    colors = {t: f"C{i}" for i, t in enumerate(temps)}
    fig, axes = figure_grid(len(regimes))
    handles: dict[str, object] = {}
    for ax, regime in zip(axes, regimes, strict=True):
        levels = []
        for t in temps:
            c = colors[t]
            for m, style in (("ddtree", "-"), ("dynamic", "--")):
                pts = sorted((r for r in paired if r.regime == regime and r.method == m
                              and r.temperature == t), key=lambda r: r.budget)
                if not pts:
                    continue
                x = [r.budget for r in pts]
                line, = ax.plot(x, [r.diff_to_baseline for r in pts], style, color=c,
                                marker="o", ms=3)
                handles.setdefault(f"{m} − chain, T = {t:g}", line)
                ax.fill_between(x, [r.diff_ci_low for r in pts],
                                [r.diff_ci_high for r in pts], color=c, alpha=0.25, lw=0)
            levels += [f"{r.tau_mean:.2f} (T = {t:g})" for r in rows
                       if r.regime == regime and r.method == "chain"
                       and r.temperature == t]
        ax.axhline(0.0, color="k", lw=0.8)
        budget_axis(ax, [r.budget for r in paired])
        ax.set_title(f"{regime}\nchain E[τ] = {', '.join(levels) or '—'}", fontsize=9)
        ax.set_ylabel("Δ E[τ] vs the chain (tokens/round)")
        ax.grid(alpha=0.3)
    used = sorted({int(r.diff_contexts) for r in paired})
    n = (f"{used[0]:,} to {used[-1]:,}" if len(used) > 3 else "/".join(map(str, used))) or "the"
    handles["shaded: paired 95% t-interval"] = Patch(color="0.5", alpha=0.3)
    figure_legend(fig, list(handles.values()), list(handles),
                  title="exact E[τ] of the tree minus the chain's on the same contexts "
                        f"(chain: L nodes; 0 = the chain); intervals over {n} shared "
                        f"contexts{pooled(paired)}")
    save_figure(fig, path)


def _by_depth_cause(r: DDTreeRow) -> tuple[np.ndarray, bool]:
    """``(D+1, 3)`` exit mass by depth and cause of a row, and whether the split is exact.

    Rows with ``exit_by_depth_cause`` carry it. Older rows carry only ``exit_by_depth``; then
    depth 0 (the root, an inner node) is ``uncovered`` and depth ``L`` (only leaves there) is
    ``depth cap`` exactly, while the depths between mix ``uncovered`` and ``budget``: that
    mass is returned in the ``uncovered`` column and flagged inexact.
    """
    if r.exit_by_depth_cause is not None:
        return np.asarray(r.exit_by_depth_cause, dtype=np.float64), True
    d = np.asarray(r.exit_by_depth, dtype=np.float64)
    out = np.zeros((d.size, 3))
    out[:-1, 0] = d[:-1]
    out[-1, 2] = d[-1]
    return out, False


def plot_lost_mass(rows: list[DDTreeRow], path: Path) -> None:
    """Where DDTree loses target mass: stacked bars of exit mass per depth, by cause.

    One panel per regime at the lowest temperature of the run and one budget (64 when the grid
    has it, else its middle one); bar heights at a depth sum to the exit mass there, and all
    bars of a panel sum to 1 (every target continuation leaves the tree somewhere).
    """
    from matplotlib.patches import Patch

    t0 = min(r.temperature for r in rows)
    budgets = sorted({r.budget for r in rows if r.method == "ddtree"})
    b = 64 if 64 in budgets else budgets[len(budgets) // 2]
    pts = [r for r in rows if r.method == "ddtree" and r.temperature == t0
           and r.budget == b and (r.exit_by_depth is not None
                                         or r.exit_by_depth_cause is not None)]
    if not pts:
        return
    fig, axes = figure_grid(len(pts), h=3.0)
    exact_all = True
    for ax, r in zip(axes, pts, strict=True):
        table, exact = _by_depth_cause(r)
        exact_all &= exact
        depth = np.arange(table.shape[0])
        bottom = np.zeros(depth.size)
        for j, (key, (word, _, color)) in enumerate(CAUSES.items()):
            label = word if exact or key != "uncovered" else "uncovered or budget"
            ax.bar(depth, table[:, j], bottom=bottom, width=0.8, color=color,
                   hatch=None if exact or key != "uncovered" else "//",
                   label=f"{label}: {r.get(f'lost_{key}'):.2f}")
            bottom += table[:, j]
        ax.set_xticks(depth[:: 1 if depth.size <= 16 else 2])
        ax.set_xlim(-0.6, depth[-1] + 0.6)
        # Headroom above the tallest bar for the legend (bars start at 0, no margin there).
        ax.set_ylim(0, max(float(bottom.max()), 1e-9) * 1.45)
        ax.set_title(f"{r.regime} · DDTree B = {b} · T = {t0:g}", fontsize=9)
        ax.set_xlabel("depth of the node the target leaves at")
        ax.set_ylabel("exit mass")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, title="total lost", title_fontsize=7, loc="upper right")
    n = counts(pts).removesuffix(" (each row's `rounds`)")
    note = ("Each bar: the fraction of target continuations that leave the tree at that depth, "
            f"mean over {n} "
            f"{DDTreeGrid.unit}{pooled(pts)} (exact per context, no interval drawn). ")
    if not exact_all:
        note += ("Hatched: these rows record exit mass by depth only, so uncovered and budget "
                 "are not split at inner depths. ")
    labels = [f"{word}: {text}" for word, text, _ in CAUSES.values()]
    figure_legend(fig, [Patch(color=c) for *_, c in CAUSES.values()], labels,
                  title=note.strip(), max_cols=3)
    save_figure(fig, path)


def interval_label(rows: list[DDTreeRow]) -> str:
    """What the family's τ intervals are, e.g. ``"95% t-interval over 64 contexts"``."""
    return render_interval(rows, "t-interval", DDTreeGrid.unit)


#: File name -> figure.
figures = {
    "tau_vs_budget.png": FigureSpec("DDTree's gain over the chain vs budget (paired)",
                                    plot_tau_vs_budget),
    "lost_mass_by_depth.png": FigureSpec("where target mass is lost (by depth and cause)",
                                         plot_lost_mass),
}


# ----------------------------------------------------------------------------------- claims
#: The claim, as the DDTree paper states it (tokens per round, one drafter, any budget).
CLAIM = "DDTree's tree (B = {b}) accepts more tokens per round than the chain"


THEORY_PAGE = "[ddtree_surrogate.md](docs/theory/ddtree_surrogate.md#statements)"


#: What the claim says of DDTree's E[tau] minus the chain's: more than 0.
CLAIMED = ClaimedRange(0.0, strict=True)


def _difference(dd: DDTreeRow, chain: DDTreeRow) -> tuple[float, float, float, bool]:
    """``tau(dd) - tau(chain)``, a 95% interval, and whether the interval is paired.

    Rows of this release carry the paired difference over the contexts both methods hold
    (``diff_to_baseline``, :func:`_paired_columns`). Rows without it (a run resumed from
    cells of an earlier release) carry means and intervals only; then the half-widths are
    added in quadrature, as for independent samples -- the contexts are shared (positively
    correlated values), so that interval is wider than the paired one: conservative.
    """
    if not missing(dd.diff_to_baseline) and dd.baseline == "chain":
        return (float(dd.diff_to_baseline), float(dd.diff_ci_low),
                float(dd.diff_ci_high), True)
    d = float(dd.tau_mean) - float(chain.tau_mean)
    half = math.hypot((float(dd.tau_ci_high) - float(dd.tau_ci_low)) / 2,
                      (float(chain.tau_ci_high) - float(chain.tau_ci_low)) / 2)
    return d, d - half, d + half, False


def claims(rows: list[DDTreeRow]) -> list[Claim]:
    """DDTree at B = 64 (the grid's largest budget below it if 64 is absent) vs the chain, in
    every (regime, T): one headline claim (``> 0`` tokens per round, :func:`judge`), the
    weakest cell's paired difference shown."""
    budgets = sorted({int(r.budget) for r in rows if r.method == "ddtree"})
    if not budgets:
        return []
    b = 64 if 64 in budgets else max([x for x in budgets if x < 64] or budgets[:1])
    evidence, all_paired = [], True
    for (regime, t) in dict.fromkeys((r.regime, r.temperature) for r in rows):
        cell = [r for r in rows if (r.regime, r.temperature) == (regime, t)]
        chain = next((r for r in cell if r.method == "chain"), None)
        dd = next((r for r in cell if r.method == "ddtree" and int(r.budget) == b), None)
        if chain is None or dd is None:
            continue
        d, lo, hi, paired = _difference(dd, chain)
        all_paired &= paired
        n, what = min(interval_units(r) for r in ((dd,) if paired else (dd, chain)))
        evidence.append(Claim.judged(CLAIM.format(b=b), d, lo, hi, "tokens per round",
                                     CLAIMED, units=n or None, unit_name=what,
                                     scope=f"{regime}, T = {float(t):g}", page=THEORY_PAGE,
                                     family=name,
                                     seconds_per_unit=seconds_per_unit(rows, dd, n)))
    reason = ("paired 95% t-intervals over shared contexts" if all_paired
              else "unpaired 95% intervals (rows without paired differences), conservative")
    one = headline(CLAIM.format(b=b), evidence, margin=lambda c: c.low, cells="(regime, T) cells",
                   reason=reason)
    return [one] if one else []


def console_rows(rows: list[DDTreeRow]) -> list[DDTreeRow]:
    """The chain and DDTree at B = 64 (else the grid's largest budget) in every (regime, T)."""
    budgets = sorted({int(r.budget) for r in rows if r.method == "ddtree"})
    b = 64 if 64 in budgets else (budgets[-1] if budgets else None)
    return [r for r in rows if r.method == "chain"
            or (r.method == "ddtree" and int(r.budget) == b)]
