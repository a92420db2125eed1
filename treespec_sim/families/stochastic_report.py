r"""How the ``stochastic`` family is presented: the paired claims table of ``summary.md``
with its verdicts, the figure of each method's paired difference to DDTree against T, its
headline claims and its console rows, read off the rows of :mod:`.stochastic` (their
``taus``: every method of a cell on the same contexts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..methods import uses_budget
from ..stats import MeanCI, mean_ci, world_ci
from ..synth import DRAFTER_VARIANTS
from .base import Claim, ClaimedRange, FigureSpec, Judgement, headline, judge, seconds_per_unit
from .render import figure_legend, notes, verdict_cell, worlds_label
from .stochastic import CLAIMS, PairClaim, StochasticRow, claimed_range, name

__all__ = ["BASELINE", "CONSOLE_METHODS", "STYLES", "PairedDifference", "at_budget", "claims",
           "console_rows", "default_budget", "figures", "paired_differences",
           "plot_tau_vs_temperature", "tables"]


def at_budget(row: StochasticRow, budget: int) -> bool:
    """A row at ``budget`` (chains, whatever their budget, stand beside every budget)."""
    return row.budget == budget or not uses_budget(row.method)


def default_budget(rows: Sequence[StochasticRow]) -> int:
    """The budget the family's table, figure and claims read: 64, else the grid's first."""
    budgets = sorted({r.budget for r in rows if uses_budget(r.method)})
    return 64 if 64 in budgets else (budgets[0] if budgets else 0)


@dataclass(frozen=True)
class PairedDifference:
    """``a - b`` of one :class:`PairClaim` in one (regime, drafter, T) cell.

    ``pooled``: the mean and 95% t-interval over the paired contexts of every world;
    ``relative``: the mean difference over ``b``'s mean; ``worlds``: each world's difference
    of means, and ``between``: their t-interval (``k - 1`` degrees of freedom; None with fewer
    than two worlds or without per-world means).
    """

    claim: PairClaim
    regime: str
    drafter: str
    temperature: float
    pooled: MeanCI
    relative: float
    contexts: int
    worlds: tuple[float, ...] = ()
    between: MeanCI | None = None
    #: What one context of the cell cost in its run (:func:`seconds_per_unit`; 0: not known).
    seconds_per_unit: float = 0.0

    @property
    def scope(self) -> str:
        """The cell, as the findings name it (``"math500, drafter corrected, T = 0"``)."""
        return f"{self.regime}, drafter {self.drafter}, T = {self.temperature:g}"

    @property
    def claimed(self) -> ClaimedRange | None:
        """The claimed range of ``a - b`` (None: no claim)."""
        return claimed_range(self.claim.sign)

    def judgement(self) -> Judgement:
        """The claim's verdict on the pooled interval by the one rule (:func:`judge`), its
        reason saying what the interval alone does not: a difference of exactly 0, a contrary
        result by design, or one that holds pooled but not between worlds."""
        d, sign = self.pooled, self.claim.sign
        j = judge(d.mean, d.low, d.high, self.claimed, units=self.contexts)
        extra = ""
        if j.verdict == "holds" and sign == 0:
            extra = "exactly 0: the same tree on every context"
        elif j.verdict == "holds" and self.between is not None and not self.claimed.inside(
                self.between.low, self.between.high):
            extra = "pooled; not shown between worlds"
        elif (j.verdict == "does not hold" and sign == 0
              and DRAFTER_VARIANTS.get(self.drafter, {}).get("correction_quality", 0.0) > 0):
            extra = (f"by design: with the `{self.drafter}` drafter Tsubame's T = 0 tree is the "
                     "top-k of the corrected proposals, a better deterministic tree than "
                     "DDTree's on the marginals; with marginal proposals (drafter `none`) the "
                     "difference is exactly 0")
        return replace(j, reason="; ".join(x for x in (extra, j.reason) if x))

    def verdict(self) -> tuple[str, str]:
        """``(verdict, reason)`` of :meth:`judgement`."""
        j = self.judgement()
        return j.verdict, j.reason


def paired_differences(rows: Sequence[StochasticRow], budget: int) -> list[PairedDifference]:
    """Every :data:`CLAIMS` comparison at ``budget`` (chains at their own length) in every
    (regime, drafter, T) cell whose rows carry per-context values (``taus``), claim by claim,
    cells in sorted order."""
    index = {(r.regime, r.drafter, r.temperature, r.method): r for r in rows
             if r.taus is not None and at_budget(r, budget)}
    cells = sorted({k[:3] for k in index})
    out = []
    for claim in CLAIMS:
        for regime, drafter, t in cells:
            if claim.label.endswith("T = 0") != (t == 0.0):
                continue
            ra, rb = index.get((regime, drafter, t, claim.a)), index.get((regime, drafter, t,
                                                                          claim.b))
            if ra is None or rb is None or len(ra.taus) != len(rb.taus):
                continue
            d = mean_ci(np.asarray(ra.taus) - np.asarray(rb.taus))
            wa, wb = ra.tau_world_means, rb.tau_world_means
            worlds = (tuple(float(x) for x in np.subtract(wa, wb))
                      if wa and wb and len(wa) == len(wb) else ())
            between = world_ci(worlds) if len(worlds) >= 2 else None
            n = len(ra.taus)
            cost = (seconds_per_unit(rows, ra, n)
                    + (seconds_per_unit(rows, rb, n) if ra.cell != rb.cell else 0))
            out.append(PairedDifference(claim, regime, drafter, float(t), d,
                                        d.mean / rb.tau_mean, n, worlds, between, cost))
    return out


def _between_text(p: PairedDifference) -> str:
    """``a - b`` between worlds: the t-interval over per-world differences, then each world's."""
    if not p.worlds:
        return "—"
    each = " / ".join(f"{x:+.2f}" for x in p.worlds)
    if p.between is None:
        return f"one world ({each})"
    ci = p.between
    return f"{ci.mean:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}] ({each})"


def _verdict_cell(p: PairedDifference) -> str:
    """The table's last two columns: what is claimed, and whether it holds."""
    sign = p.claim.sign
    if sign is None or not p.claim.applies(p.temperature):
        return "— | —"
    claimed = "a = b" if sign == 0 else "a > b" if sign > 0 else "a < b"
    j = p.judgement()
    if j.verdict != "holds":
        return f"{claimed} | {verdict_cell(j, p.claim.page)}"
    text = ("holds pooled; not shown between worlds" if j.reason.startswith("pooled")
            else "holds, also between worlds" if p.between is not None and sign != 0
            else f"holds ({j.reason})" if j.reason else "holds")
    return f"{claimed} | {text}"


def tables(rows: list[StochasticRow]) -> list[str]:
    """The family's section of ``summary.md``: the paired claims table with its verdicts."""
    b = default_budget(rows)
    k = worlds_label(rows)
    out = ["## Sampled trees at T > 0: does Tsubame reverse the sampled-chain advantage?", "",
           f"Paired differences of exact E[τ] on shared contexts, B = {b} (chains: L nodes). "
           f"First the 95% t-interval over the contexts of {k} worlds pooled (the verdict in the "
           f"last column reads this one, and says when a claim that holds on it also holds on "
           f"the next); then the 95% t-interval over the {k} per-world differences (k − 1 "
           "degrees of freedom) and each world's difference:", "",
           "| claim | regime | drafter | T | Δτ = a − b [95% CI, contexts pooled] | relative | "
           "Δτ between worlds [95% t, k − 1 dof] | claimed | holds? |",
           "|---|---|---|---|---|---|---|---|---|"]
    lines = [f"| {p.claim.label} | {p.regime} | {p.drafter} | {p.temperature:g} | "
             f"{p.pooled.mean:+.2f} [{p.pooled.low:+.2f}, {p.pooled.high:+.2f}] | "
             f"{100 * p.relative:+.1f}% | {_between_text(p)} | {_verdict_cell(p)} |"
             for p in paired_differences(rows, b)]
    return out + lines + notes(lines) + [""]


def _margin(sign: int):
    """How far a claim's interval lies on its side (larger: more in its favour)."""
    if sign == 0:
        return lambda c: -max(abs(c.low), abs(c.high))
    return (lambda c: c.low) if sign > 0 else (lambda c: -c.high)


def claims(rows: list[StochasticRow]) -> list[Claim]:
    """One headline per claim of :data:`CLAIMS` that states a sign, over the cells at the
    temperatures it is stated at (Δτ in tokens per round, pooled intervals)."""
    diffs = paired_differences(rows, default_budget(rows))
    out = []
    for claim in CLAIMS:
        if claim.sign is None:
            continue
        evidence = []
        for p in diffs:
            if p.claim is not claim or not claim.applies(p.temperature):
                continue
            j = p.judgement()
            evidence.append(Claim(claim.statement, p.pooled.mean, p.pooled.low, p.pooled.high,
                                  "tokens per round", j.verdict, reason=j.reason,
                                  page=claim.page, scope=p.scope, family=name,
                                  units=p.contexts, needed=j.needed,
                                  seconds_per_unit=p.seconds_per_unit))
        one = headline(claim.statement, evidence, margin=_margin(claim.sign),
                       cells="(regime, drafter, T) cells")
        if one is not None:
            out.append(one)
    return out


#: Colour and line style of each method in the family's figure.
STYLES = {"chain": ("k", ":"), "dynamic": ("tab:cyan", "--"), "sampled-chain": ("tab:gray", ":"),
          "sampled-chain-corrected": ("tab:brown", "-."), "tsubame-rrs": ("tab:orange", "--"),
          "tsubame-rrsw": ("tab:red", "-"), "tsubame-univer": ("tab:purple", "-"),
          "tsubame-rrsw-tempered-plan": ("tab:pink", "--")}


#: The method every other is drawn against.
BASELINE = "ddtree"


def plot_tau_vs_temperature(rows: list[StochasticRow], path: Path,
                            budget: int | None = None) -> None:
    """Each method's paired difference in E[tau] to DDTree vs T, one panel per (regime,
    drafter), at ``budget`` (default: 64, or the grid's first budget without 64).

    The methods are drawn on the same contexts, so the comparison is the paired difference
    ``tau(method) - tau(ddtree)`` per context; its mean and 95% t-interval over the contexts
    pooled over the worlds (:func:`treespec_sim.stats.mean_ci`) are plotted, DDTree being the
    line at 0 (its own τ is in the panel's title). The methods are spread a little along T so
    that their bars do not hide each other. Rows without per-context values (``taus``) are
    left out. One legend for the figure, below the panels and inside the canvas.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if budget is None:
        budget = default_budget(rows)
    at = [r for r in rows if r.taus is not None and at_budget(r, budget)]
    panels = list(dict.fromkeys((r.regime, r.drafter) for r in at)) or [("—", "—")]
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    # at least 9 inches wide: the legend (up to nine methods and a long title) below one or
    # two panels would otherwise be as large as the panels themselves
    fig, axes = plt.subplots(nrows, cols, figsize=(max(4.6 * cols, 9.0), 3.6 * nrows + 1.0),
                             squeeze=False, layout="constrained")
    temps = sorted({r.temperature for r in at})
    step = 0.012 * max(1.0, (temps[-1] - temps[0]) / 0.5) if temps else 0.0
    handles: dict[str, object] = {}
    for ax, (regime, drafter) in zip(axes.flat, panels, strict=False):
        cell = {(r.method, r.temperature): r for r in at
                if (r.regime, r.drafter) == (regime, drafter)}
        base = {t: cell[(BASELINE, t)] for t in temps if (BASELINE, t) in cell}
        shown = [m for m in STYLES if any((m, t) in cell for t in base)]
        for k, method in enumerate(shown):
            color, ls = STYLES[method]
            pts = []
            for t in sorted(base):
                r = cell.get((method, t))
                if r is None or len(r.taus) != len(base[t].taus):
                    continue
                pts.append((t, mean_ci(np.subtract(r.taus, base[t].taus)),
                            r.verifier))
            if not pts:
                continue
            x = [t + (k - (len(shown) - 1) / 2) * step for t, _, _ in pts]
            art = ax.errorbar(x, [d.mean for _, d, _ in pts],
                              yerr=[[d.mean - d.low for _, d, _ in pts],
                                    [d.high - d.mean for _, d, _ in pts]],
                              color=color, ls=ls, marker="o", ms=3, capsize=2)
            verifiers = "/".join(dict.fromkeys(v for *_, v in pts))
            handles.setdefault(f"{method} ({verifiers})", art)
        ax.axhline(0.0, color="tab:blue", lw=1.2)
        levels = ", ".join(f"{base[t].tau_mean:.2f}" for t in sorted(base))
        ax.set_title(f"{regime} · drafter {drafter} · B = {budget}\nDDTree τ = {levels} "
                     f"at T = {', '.join(f'{t:g}' for t in sorted(base))}", fontsize=9)
        ax.set_xlabel("temperature T")
        ax.set_ylabel("Δ E[τ] vs DDTree (tokens per round)")
        ax.set_xticks(temps)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    n = "/".join(sorted({str(len(r.taus)) for r in at})) or "the"
    worlds = "/".join(sorted({str(r.worlds) for r in at if r.worlds}))
    pooled = f" pooled over {worlds} worlds" if worlds else ""
    handles["DDTree (follow), the baseline: 0"] = plt.Line2D([], [], color="tab:blue")
    figure_legend(fig, list(handles.values()), list(handles), max_cols=4,
                  title=f"method (verifier at T = 0 / T > 0) minus DDTree on the same contexts; "
                  f"bars: paired 95% t-interval over {n} contexts{pooled}; chains have L nodes")
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: File name -> figure.
figures = {
    "tau_vs_temperature.png": FigureSpec("τ vs temperature: each method minus DDTree, paired",
                                         plot_tau_vs_temperature),
}


#: The methods the console table shows (the claims' main arms).
CONSOLE_METHODS = ("ddtree", "sampled-chain-corrected", "tsubame-rrsw", "tsubame-univer")


def console_rows(rows: list[StochasticRow]) -> list[StochasticRow]:
    """DDTree, the corrected sampled chain and Tsubame at the default budget, every cell."""
    b = default_budget(rows)
    return [r for r in rows if r.method in CONSOLE_METHODS and at_budget(r, b)]
