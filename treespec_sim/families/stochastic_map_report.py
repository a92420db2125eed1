r"""How the ``stochastic-map`` family is presented: the regime map's points (paired
differences of DDTree, the sampled chain and Tsubame-RRSw at each point), its table in
``summary.md`` with where the public ratios fall, its figure, its claims (the existential
claims of Tsubame's abstract, each point judged by the one rule) and its console rows, read
off the rows of :mod:`.stochastic_map`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..stats import MeanCI, mean_ci
from .base import NO_VERDICT, Claim, ClaimedRange, FigureSpec, Judgement, judge
from .render import figure_legend
from .stochastic_map import StochasticMapRow, name

__all__ = ["CONSOLE_METHODS", "LUCEBOX_RATIO", "MAP_CLAIMS", "MAP_PAGE", "PR169_RATIO",
           "MapPoint", "claims", "console_rows", "crossings", "figures", "plot_regime_map",
           "points", "tables"]


#: The public points the map places (``docs/theory/tsubame.md`` §5).
PR169_RATIO = 1.16 / 2.96    # z-lab/dflash#169: independent marginal sampling / argmax chain
LUCEBOX_RATIO = 6.74 / 5.57  # Luce-Org/lucebox#413: sampled tree / chain, T = 1


@dataclass(frozen=True)
class MapPoint:
    """One point of the regime map: a (regime, logit-scale factor, correction quality, proposal
    temperature) and what its paired differences say.

    ``kappa = 0`` is the marginal drafter (the marginal sampled chain and Tsubame filled from
    the marginals); ``chain_gap`` is DDTree minus the sampled chain, ``vs_ddtree`` and
    ``vs_chain`` Tsubame-RRSw minus DDTree and minus the sampled chain (paired over the
    cell's contexts); the ratios are of mean E[tau].
    """

    regime: str
    factor: float
    kappa: float
    t_q: float
    entropy: float
    chain_gap: MeanCI
    vs_ddtree: MeanCI
    vs_chain: MeanCI
    marginal_over_argmax: float
    tree_over_argmax: float
    ddtree_tau: float
    chain_tau: float
    tsubame_tau: float
    #: The shared contexts the paired intervals rest on.
    contexts: int = 0

    @property
    def ddtree_behind(self) -> bool:
        """DDTree falls behind the sampled chain (the paired interval below 0)."""
        return self.chain_gap.high < 0

    @property
    def tsubame_best(self) -> bool:
        """Tsubame-RRSw beats both DDTree and the sampled chain (both intervals above 0)."""
        return self.vs_ddtree.low > 0 and self.vs_chain.low > 0

    @property
    def scope(self) -> str:
        return (f"{self.regime} α×{self.factor:g} (H = {self.entropy:.2f} nats), "
                f"κ = {self.kappa:g}, T_q = {self.t_q:g}")


def points(rows: Sequence[StochasticMapRow]) -> list[MapPoint]:
    """Every point of the regime map in ``rows``."""
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r.regime, r.logit_scale_factor), {})[
            (r.method, r.proposal_temperature, r.correction_quality)] = r
    out = []
    for (regime, factor), c in sorted(cells.items()):
        dd = next((r for (m, _, _), r in c.items() if m == "ddtree"), None)
        am = next((r for (m, _, _), r in c.items() if m == "chain"), None)
        if dd is None or am is None:
            continue
        for (m, t_q, kappa), sc in sorted(c.items(), key=lambda kv: str(kv[0])):
            if m not in ("sampled-chain", "sampled-chain-corrected"):
                continue
            tree = c.get(("tsubame-rrsw" if m.endswith("corrected") else
                          "tsubame-rrsw-marginal", t_q, kappa))
            marg = c.get(("sampled-chain", t_q, 0.0))
            if tree is None or marg is None:
                continue
            d, s, ts = (np.asarray(x.taus) for x in (dd, sc, tree))
            out.append(MapPoint(regime, float(factor), float(kappa), float(t_q),
                                float(dd.target_entropy), mean_ci(d - s), mean_ci(ts - d),
                                mean_ci(ts - s), marg.tau_mean / am.tau_mean,
                                tree.tau_mean / am.tau_mean, dd.tau_mean,
                                sc.tau_mean, tree.tau_mean, int(d.size)))
    return sorted(out, key=lambda p: (p.regime, p.kappa, -p.entropy, p.t_q))


def _crossing(xs: Sequence[float], ys: Sequence[float], level: float) -> float | None:
    """The ``x`` (log-interpolated) where ``ys`` first crosses ``level``, or None."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), list(zip(xs, ys, strict=True))[1:],
                                  strict=False):
        if (y0 - level) * (y1 - level) <= 0 and y0 != y1:
            f = (level - y0) / (y1 - y0)
            return float(np.exp(np.log(x0) + f * (np.log(x1) - np.log(x0))))
    return None


def crossings(pts: Sequence[MapPoint]) -> list[StochasticMapRow]:
    """Where the public ratios fall on each (regime, α, κ) row of the map: the proposal
    temperature at which the marginal sampled chain keeps PR #169's 0.39 of the argmax chain,
    and at which Tsubame reaches Lucebox #413's 1.21 of it (None: not crossed in range)."""
    rows: dict[tuple, list[MapPoint]] = {}
    for p in pts:
        rows.setdefault((p.regime, p.factor, p.kappa), []).append(p)
    out = []
    for (regime, factor, kappa), ps in sorted(rows.items()):
        ps = sorted(ps, key=lambda p: p.t_q)
        xs = [p.t_q for p in ps]
        out.append({"regime": regime, "factor": factor, "kappa": kappa,
                    "entropy": ps[0].entropy,
                    "pr169_t_q": _crossing(xs, [p.marginal_over_argmax for p in ps],
                                           PR169_RATIO),
                    "lucebox_t_q": _crossing(xs, [p.tree_over_argmax for p in ps],
                                             LUCEBOX_RATIO)})
    return out


def _map_region_text(points: Sequence[MapPoint], test) -> str:
    """Where ``test(point)`` holds, grouped per (regime, κ): the α factors and T_q values."""
    groups: dict[tuple, list[str]] = {}
    for p in points:
        if test(p):
            groups.setdefault((p.regime, p.kappa), []).append(f"α×{p.factor:g}/T_q {p.t_q:g}")
    if not groups:
        return "nowhere on the map"
    return "; ".join(f"{r}, κ = {k:g}: {', '.join(v)}" for (r, k), v in groups.items())


def tables(rows: Sequence[StochasticMapRow]) -> list[str]:
    """The map's section of ``summary.md``: one line per point, then the public ratios."""
    pts = points(rows)
    if not pts:
        return []
    n = "/".join(sorted({str(len(r.taus)) for r in rows}))
    out = ["## The regime map at T = 1: where sampled trees beat deterministic ones", "",
           f"Paired differences of exact E[τ] over {n} shared contexts per point (95% "
           "t-intervals), B = 64 (chains: L nodes). α×: the target's logit scale as a multiple "
           "of the calibrated one (its mean next-token entropy H at T = 1 in nats); κ: the "
           "drafter's correction quality (0: the marginal sampled chain and Tsubame filled "
           "from the marginals); T_q: the temperature the drafter's laws are tempered to for "
           "the draws (1: its own law; its ranking, hence DDTree, the argmax chain and "
           "Tsubame's plan, never changes). The figure is `regime_map.png`.", "",
           "| regime | α× | H (nats) | κ | T_q | DDTree τ | sampled chain τ | Tsubame τ | "
           "DDTree − chain [95% CI] | Tsubame − DDTree | Tsubame − chain | marginal chain / "
           "argmax | Tsubame / argmax | region |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|"]
    for p in pts:
        region = ("Tsubame beats both" if p.tsubame_best else "") + (
            "; " if p.tsubame_best and p.ddtree_behind else "") + (
            "DDTree behind the chain" if p.ddtree_behind else "")
        out.append(
            f"| {p.regime} | {p.factor:g} | {p.entropy:.2f} | {p.kappa:g} | {p.t_q:g} | "
            f"{p.ddtree_tau:.2f} | {p.chain_tau:.2f} | {p.tsubame_tau:.2f} | "
            f"{p.chain_gap.mean:+.2f} [{p.chain_gap.low:+.2f}, {p.chain_gap.high:+.2f}] | "
            f"{p.vs_ddtree.mean:+.2f} [{p.vs_ddtree.low:+.2f}, {p.vs_ddtree.high:+.2f}] | "
            f"{p.vs_chain.mean:+.2f} [{p.vs_chain.low:+.2f}, {p.vs_chain.high:+.2f}] | "
            f"{p.marginal_over_argmax:.2f} | {p.tree_over_argmax:.2f} | {region or '—'} |")
    out += ["", f"Public points placed on the map (ratios of mean E[τ] to the argmax chain): "
            f"z-lab/dflash#169, independent marginal sampling / argmax = {PR169_RATIO:.2f}; "
            f"Luce-Org/lucebox#413, sampled tree / chain = {LUCEBOX_RATIO:.2f} (read as "
            "Tsubame-RRSw / argmax chain). The proposal temperature T_q at which each (regime, "
            "α, κ) row crosses them (log-interpolated; — : not crossed in the grid):", "",
            "| regime | α× | H (nats) | κ | T_q at PR #169's 0.39 (marginal chain / argmax) | "
            "T_q at Lucebox's 1.21 (Tsubame / argmax) |", "|---|---:|---:|---:|---:|---:|"]
    def f(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    for c in crossings(pts):
        out.append(f"| {c['regime']} | {c['factor']:g} | {c['entropy']:.2f} | {c['kappa']:g} | "
                   f"{f(c['pr169_t_q'])} | {f(c['lucebox_t_q'])} |")
    return [*out, ""]


def _beats(ci: MeanCI, contexts: int) -> Judgement:
    """:func:`judge` of a paired difference against ``> 0``."""
    return judge(ci.mean, ci.low, ci.high, ClaimedRange(0.0, strict=True), units=contexts)


def _both(a: Judgement, b: Judgement) -> Judgement:
    """Two claims at once: holds when both hold, does not hold when either does not, no verdict
    when either has none, else undecided (the larger count of units deciding it)."""
    vs = (a.verdict, b.verdict)
    if "does not hold" in vs:
        return next(j for j in (a, b) if j.verdict == "does not hold")
    if NO_VERDICT in vs:
        return next(j for j in (a, b) if j.verdict == NO_VERDICT)
    if vs == ("holds", "holds"):
        return a
    return max((j for j in (a, b) if j.verdict == "undecided"), key=lambda j: j.needed)


#: The map's claims: (statement, its verdict at a point by :func:`judge`, the number shown,
#: what the number is).
MAP_CLAIMS = (
    ("At T = 1 a deterministic tree (DDTree) falls behind the sampled chain in some settings "
     "(Tsubame's abstract; DFlash PR #169)",
     lambda p: _beats(MeanCI(-p.chain_gap.mean, -p.chain_gap.high, -p.chain_gap.low),
                      p.contexts),
     lambda p: (-p.chain_gap.mean, -p.chain_gap.high, -p.chain_gap.low),
     "sampled chain − DDTree"),
    ("At T = 1 Tsubame-RRSw beats both DDTree and the sampled chain (it keeps the tree's "
     "structure and gains sampling's acceptance)",
     lambda p: _both(_beats(p.vs_ddtree, p.contexts), _beats(p.vs_chain, p.contexts)),
     lambda p: (p.vs_ddtree.mean, p.vs_ddtree.low, p.vs_ddtree.high), "Tsubame − DDTree"),
)


def claims(rows: Sequence[StochasticMapRow]) -> list[Claim]:
    """One claim per :data:`MAP_CLAIMS`: the existential claims of the abstract ("in some
    settings"), each point judged by the one rule (:func:`judge`), the points where it holds
    listed in the reason (the number: the point with the largest margin). ``holds`` when it
    holds at more points than one-sided 2.5% tails of 95% intervals would by chance alone
    (``0.025 n`` of ``n``), ``does not hold`` when it does not hold at any point, ``no
    verdict`` at fewer than :data:`~treespec_sim.verdicts.MIN_UNITS` contexts a point,
    else ``undecided``."""
    pts = points(rows)
    if not pts:
        return []
    out = []
    chance = 0.025 * len(pts)
    for text, rule, number, what in MAP_CLAIMS:
        judged = [(p, rule(p)) for p in pts]
        where = [p for p, j in judged if j.verdict == "holds"]
        best = max(where or pts, key=lambda p: number(p)[1])
        est, lo, hi = number(best)
        if any(j.verdict == NO_VERDICT for _, j in judged):
            verdict, note = NO_VERDICT, f"; {next(j.reason for _, j in judged if j.reason)}"
        elif len(where) > chance:
            verdict, note = "holds", ""
        elif all(j.verdict == "does not hold" for _, j in judged):
            verdict, note = "does not hold", "; it does not hold at any point"
        else:
            verdict = "undecided"
            note = f"; by chance alone about {chance:.1f} of {len(pts)} points would show it"
        reason = (f"in {len(where)} of {len(pts)} map points{note}: "
                  f"{_map_region_text(pts, lambda p, rule=rule: rule(p).verdict == 'holds')}; "
                  f"shown ({what}): {best.scope}")
        out.append(Claim(text, est, lo, hi, "tokens per round", verdict, reason=reason,
                         page=MAP_PAGE, scope=f"regime map, {best.scope}", family=name,
                         units=best.contexts))
    return out


#: The regime map's section of the Tsubame page.
MAP_PAGE = "[tsubame.md §5](docs/theory/tsubame.md#5-the-regime-map-at-t--1)"


#: Region colours of the map figure.
_REGION_STYLE = {"both": ("tab:purple", "Tsubame beats both, and DDTree is behind the chain"),
                 "tsubame": ("tab:red", "Tsubame beats both DDTree and the sampled chain"),
                 "chain": ("tab:blue", "DDTree behind the sampled chain"),
                 "none": ("0.75", "neither")}


def plot_regime_map(rows: Sequence[StochasticMapRow], path: Path) -> None:
    """The regime map: one panel per (regime, κ); x the proposal temperature, y the target's
    entropy at T = 1; each point coloured by its region, labelled Tsubame / DDTree; the
    proposal temperatures where PR #169's and Lucebox #413's ratios are crossed, and the
    calibrated regime (α×1, T_q = 1), marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = points(rows)
    panels = list(dict.fromkeys((p.regime, p.kappa) for p in pts)) or [("—", 0.0)]
    regimes = list(dict.fromkeys(r for r, _ in panels))
    kappas = sorted({k for _, k in panels})
    fig, axes = plt.subplots(len(regimes), len(kappas), figsize=(4.4 * len(kappas),
                             3.7 * len(regimes) + 1.2), squeeze=False, layout="constrained")
    cross = crossings(pts)
    for i, regime in enumerate(regimes):
        for j, kappa in enumerate(kappas):
            ax = axes[i][j]
            ps = [p for p in pts if (p.regime, p.kappa) == (regime, kappa)]
            for p in ps:
                kind = ("both" if p.tsubame_best and p.ddtree_behind else
                        "tsubame" if p.tsubame_best else "chain" if p.ddtree_behind else
                        "none")
                ax.scatter(p.t_q, p.entropy, s=150, color=_REGION_STYLE[kind][0],
                           edgecolor="k", lw=0.5, zorder=3)
                ax.annotate(f"{p.tsubame_tau / p.ddtree_tau:.2f}", (p.t_q, p.entropy),
                            textcoords="offset points", xytext=(0, 9), ha="center",
                            fontsize=7)
                if p.factor == 1.0 and p.t_q == 1.0:
                    ax.scatter(p.t_q, p.entropy, s=420, facecolor="none", edgecolor="k",
                               lw=1.5, marker="*", zorder=4)
            for c in (c for c in cross if (c["regime"], c["kappa"]) == (regime, kappa)):
                if c["pr169_t_q"] is not None and kappa == 0:  # a marginal-sampling ratio
                    ax.scatter(c["pr169_t_q"], c["entropy"], marker="x", color="tab:green",
                               s=60, zorder=5)
                if c["lucebox_t_q"] is not None:
                    ax.scatter(c["lucebox_t_q"], c["entropy"], marker="+", color="tab:orange",
                               s=90, zorder=5)
            ax.set_xscale("log")
            tq = sorted({p.t_q for p in ps}) or [1.0]
            ax.set_xticks(tq, [f"{x:g}" for x in tq])
            ax.minorticks_off()
            ax.set_title(f"{regime} · κ = {kappa:g}" + (" (marginal drafter)" if kappa == 0
                                                         else " (corrected)"), fontsize=9)
            ax.set_xlabel("proposal temperature T_q (drafter's sampling law)")
            ax.set_ylabel("target entropy at T = 1 (nats)")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], ls="", marker="o", ms=9, color=c, mec="k", label=lab)
               for c, lab in _REGION_STYLE.values()]
    handles += [plt.Line2D([], [], ls="", marker="*", ms=13, mfc="none", mec="k",
                           label="calibrated regime (α×1, T_q = 1)"),
                plt.Line2D([], [], ls="", marker="x", color="tab:green",
                           label=f"PR #169: marginal chain / argmax = {PR169_RATIO:.2f}"),
                plt.Line2D([], [], ls="", marker="+", ms=10, color="tab:orange",
                           label=f"Lucebox #413: sampled tree / chain = {LUCEBOX_RATIO:.2f}")]
    figure_legend(fig, handles, [h.get_label() for h in handles], max_cols=3,
                  title="T = 1, B = 64; numbers: Tsubame-RRSw τ / DDTree τ; regions by "
                        "paired 95% intervals")
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: File name -> figure.
figures = {
    "regime_map.png": FigureSpec("The regime map at T = 1: where sampled trees beat "
                                 "deterministic ones", plot_regime_map),
}


#: The methods the console table shows (the claims' main arms).
CONSOLE_METHODS = ("ddtree", "sampled-chain-corrected", "tsubame-rrsw", "tsubame-univer")


def console_rows(rows: list[StochasticMapRow]) -> list[StochasticMapRow]:
    """DDTree, the corrected sampled chain and Tsubame-RRSw at the drafter's own sampling law
    (``T_q = 1``), every cell."""
    return [r for r in rows if r.method in CONSOLE_METHODS
            and r.proposal_temperature in (None, 1.0)]
