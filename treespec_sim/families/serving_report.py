r"""How the ``serving`` family is presented: which budget at each batch size and what sharing
it across the batch gains (``summary.md``), throughput against batch size (the figure), its
claim and its console rows, read off the rows of :mod:`.serving`.

Its claim: one budget shared across a batch (:func:`treespec_sim.policies.batch_caddtree`)
matches or beats the best fixed budget chosen after the fact, at every batch size
(``docs/theory/batch_caddtree.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .base import Claim, ClaimedRange, FigureSpec, headline, seconds_per_unit
from .render import cost_label, figure_grid, figure_legend, padded_limits, pct, save_figure
from .serving import MIXED, ServingRow, name

__all__ = ["CLAIM", "CLAIMED", "MATCH_TOLERANCE", "claims", "console_rows", "figures",
           "plot_throughput_vs_batch", "tables"]

#: How far below the oracle fixed budget "matches" reaches, in percent.
MATCH_TOLERANCE = 1.0
CLAIM = (f"one budget shared across a batch (batch CaDDTree) matches (within "
         f"{MATCH_TOLERANCE:g}%) or beats the best fixed budget chosen after the fact")
CLAIMED = ClaimedRange(-MATCH_TOLERANCE)
THEORY_PAGE = "[batch_caddtree.md](docs/theory/batch_caddtree.md)"


def _keys(rows: Sequence[ServingRow]) -> list[tuple[str, float, str]]:
    return list(dict.fromkeys((r.regime, r.temperature, r.cost_model) for r in rows))


def _by(rows: Sequence[ServingRow], key, b: int) -> dict[str, ServingRow]:
    return {(f"ddtree@{r.budget}" if r.method == "ddtree" else r.method): r for r in rows
            if (r.regime, r.temperature, r.cost_model) == key and r.batch_size == b}


def _rel(r: ServingRow | None) -> str:
    if r is None:
        return "—"
    return f"{pct(r.rel_to_baseline)} [{pct(r.rel_ci_low)}, {pct(r.rel_ci_high)}]"


def tables(rows: list[ServingRow]) -> list[str]:
    """The family's section of ``summary.md``: per (composition, T, cost model), each batch
    size's best fixed budget and what every rule gains over it; for mixed batches, each
    regime's requests' tokens per second."""
    out = ["## How big should the trees be at batch size b?", "",
           "Each batch verifies its requests' trees in one target pass priced by the batched "
           "cost model; a request's budget is chosen by each rule from the drafter's curves. "
           "*Best fixed B*: the one budget for every request with the best throughput on these "
           "batches, chosen after the fact (its range: the best B over the bootstrap "
           "replicates); every other rule is its paired ratio to it, with its percentile-"
           "bootstrap 95% interval over batches. Tokens per second are the batch's (a "
           "request's: divided by b).", ""]
    for key in _keys(rows):
        comp, t, cm = key
        what = ("mixed batches (the regimes' requests alternate)" if comp == MIXED
                else f"{comp} batches")
        out += [f"### {what}, T = {t:g}, cost model {cost_label(cm)}", "",
                "| b | best fixed B [range] | its tok/s [95% CI] | per request | shared (batch "
                "CaDDTree): mean B, vs best fixed | CaDDTree per request vs best fixed | "
                "shared chains vs best fixed | DFlash chain vs best fixed |",
                "|---|---|---|---|---|---|---|---|"]
        sizes = sorted({r.batch_size for r in rows if (r.regime, r.temperature,
                                                       r.cost_model) == key})
        for b in sizes:
            rr = _by(rows, key, b)
            orc, sh = rr.get("ddtree-oracle"), rr.get("batch-caddtree")
            if orc is None:
                continue
            lo, hi = orc.best_budget_range or (orc.budget, orc.budget)
            out.append(
                f"| {b} | {orc.budget} [{lo}–{hi}] | {orc.throughput_tok_s:.0f} "
                f"[{orc.throughput_ci[0]:.0f}, {orc.throughput_ci[1]:.0f}] | "
                f"{orc.request_tok_s[0]:.1f} | "
                + (f"{sh.tree_size_mean:.1f}, {_rel(sh)} | " if sh else "— | ")
                + f"{_rel(rr.get('caddtree-each'))} | {_rel(rr.get('batch-chains'))} | "
                f"{_rel(rr.get('chain'))} |")
        if comp == MIXED:
            out += ["", "Each regime's requests in these mixed batches, tokens per second per "
                    "request [95% CI]: under the best fixed B and under the shared budget:", "",
                    "| b | regime | best fixed B | shared budget | change |",
                    "|---|---|---|---|---|"]
            for b in sizes:
                rr = _by(rows, key, b)
                orc, sh = rr.get("ddtree-oracle"), rr.get("batch-caddtree")
                if not (orc and sh and orc.regime_tok_s and sh.regime_tok_s):
                    continue
                for g, (p, lo, hi) in orc.regime_tok_s.items():
                    q, qlo, qhi = sh.regime_tok_s[g]
                    out.append(f"| {b} | {g} | {p:.1f} [{lo:.1f}, {hi:.1f}] | "
                               f"{q:.1f} [{qlo:.1f}, {qhi:.1f}] | {pct(q / p)} |")
        out.append("")
    return out


#: The rules in the figure: method -> (marker, colour, label).
RULE_MARKS = {"ddtree-oracle": ("s", "black", "DDTree, best fixed B (after the fact)"),
              "batch-caddtree": ("o", "tab:red", "shared budget (batch CaDDTree)"),
              "caddtree-each": ("^", "tab:blue", "CaDDTree per request"),
              "batch-chains": ("D", "tab:green", "shared chains (TETRIS-style)"),
              "chain": ("v", "tab:gray", "DFlash chain")}


def plot_throughput_vs_batch(rows: list[ServingRow], path: Path) -> None:
    """Each rule's throughput against the batch size, relative to the best fixed budget on
    the same batches (0: that budget, chosen after the fact), with the paired bootstrap
    interval; one panel per (composition, T, cost model). Under each batch size, the best
    fixed budget and its batch tokens per second (absolute throughput grows ~b-fold across the
    axis, so on one scale the rules' differences would not show)."""
    from matplotlib.lines import Line2D

    keys = _keys(rows)
    fig, axes = figure_grid(len(keys), w=4.4, h=3.4, cols=3)
    shown_rules = {k: v for k, v in RULE_MARKS.items() if k != "ddtree-oracle"}
    for ax, key in zip(axes, keys, strict=True):
        here = [r for r in rows if (r.regime, r.temperature, r.cost_model) == key]
        sizes = sorted({r.batch_size for r in here})
        pos = {b: i for i, b in enumerate(sizes)}
        shown = [0.0]
        step = 0.6 / len(shown_rules)
        for k, (method, (marker, color, _)) in enumerate(shown_rules.items()):
            pts = sorted((r for r in here if r.method == method), key=lambda r: r.batch_size)
            if not pts:
                continue
            # each rule a little apart along the axis so that no bar hides another
            xs = [pos[r.batch_size] + (k - (len(shown_rules) - 1) / 2) * step for r in pts]
            ys = [100 * (r.rel_to_baseline - 1) for r in pts]
            lo = [max(0.0, y - 100 * (r.rel_ci_low - 1)) for y, r in zip(ys, pts, strict=True)]
            hi = [max(0.0, 100 * (r.rel_ci_high - 1) - y) for y, r in zip(ys, pts, strict=True)]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker=marker, color=color, ms=4, lw=1,
                        capsize=2, mfc="none" if marker in "sD" else color)
            shown += [y - a for y, a in zip(ys, lo, strict=True)]
            shown += [y + a for y, a in zip(ys, hi, strict=True)]
        ax.axhline(0.0, color="black", lw=1)
        oracle = {r.batch_size: r for r in here if r.method == "ddtree-oracle"}
        ax.set_xticks(range(len(sizes)),
                      [f"b = {b}\nB* = {oracle[b].budget}\n{oracle[b].throughput_tok_s:,.0f} "
                       "tok/s" if b in oracle else f"b = {b}" for b in sizes], fontsize=7)
        ax.set_xlim(-0.6, len(sizes) - 0.4)
        padded_limits(ax, shown)
        comp, t, cm = key
        ax.set_title(f"{comp} · T = {t:g} · {cost_label(cm)}", fontsize=9)
        ax.set_ylabel("batch tokens/s vs best fixed B (%)")
        ax.grid(alpha=0.3, axis="y")
    handles = [Line2D([], [], color="black", lw=1, label="0: DDTree at the best fixed B* "
                      "(one B for every request, chosen after the fact; under each b with its "
                      "tokens/s)"),
               *(Line2D([], [], marker=m, color=c, ms=4, mfc="none" if m in "sD" else c,
                        label=lab) for m, c, lab in shown_rules.values())]
    n_batches = sorted({r.batches for r in rows})
    figure_legend(fig, handles, [h.get_label() for h in handles], max_cols=3,
                  title="tokens/s = Σ τ / Σ (C_d(b) + C_v(Σ (B_i + 1))) over the batches; bars: "
                        "paired percentile-bootstrap 95% intervals over "
                        f"{n_batches[0]}–{n_batches[-1]} batches")
    save_figure(fig, path)


#: File name -> figure.
figures = {
    "throughput_vs_batch.png": FigureSpec("throughput against batch size: a shared budget, "
                                          "per-request CaDDTree and chains against the best "
                                          "fixed budget",
                                          plot_throughput_vs_batch),
}


def claims(rows: list[ServingRow]) -> list[Claim]:
    """The shared budget against the best fixed budget in every (composition, T, cost model,
    b): its paired throughput ratio, minus 1, in percent, read off the bootstrap interval
    over batches; the headline shows the weakest cell."""
    evidence = []
    for r in rows:
        if r.method != "batch-caddtree":
            continue
        est, lo, hi = (100 * (v - 1) for v in (r.rel_to_baseline, r.rel_ci_low, r.rel_ci_high))
        evidence.append(Claim.judged(
            CLAIM, est, min(lo, est), max(hi, est), "% throughput", CLAIMED, units=r.batches,
            unit_name="batches", scope=f"{r.regime}, T = {r.temperature:g}, "
                                      f"{r.cost_model}, b = {r.batch_size}",
            page=THEORY_PAGE, family=name,
            seconds_per_unit=seconds_per_unit(rows, r, r.batches)))
    one = headline(CLAIM, evidence, margin=lambda c: c.low,
                   cells="(composition, T, cost model, batch size) cells",
                   reason=f"matches: the paired bootstrap interval of the ratio lies at or "
                          f"above −{MATCH_TOLERANCE:g}%")
    return [one] if one else []


def console_rows(rows: list[ServingRow]) -> list[ServingRow]:
    """The best fixed budget and the shared budget at every batch size."""
    return [r for r in rows if r.method in ("ddtree-oracle", "batch-caddtree")]


def best_budgets(rows: Sequence[ServingRow]) -> dict[tuple[str, float, str], dict[int, int]]:
    """The best fixed budget per batch size, per (composition, T, cost model): the schedule
    an engine can load (:mod:`treespec_sim.export`)."""
    out: dict[tuple[str, float, str], dict[int, int]] = {}
    for r in rows:
        if r.method == "ddtree-oracle":
            out.setdefault((r.regime, r.temperature, r.cost_model), {})[r.batch_size] = r.budget
    return {k: dict(sorted(v.items())) for k, v in out.items()}


