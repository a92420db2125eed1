"""Writing a family's tables and figures: number formats, intervals, verdicts, pages, panels.

The helpers every family's ``tables`` and ``figures`` share (so that one convention is written
once): how a ratio, an interval and a between-world interval are printed, what an interval is
called, which theory page explains a result that does not go the way its claim says, and the
panel grid, budget axis and saving of a figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..cost import get_cost_model
from ..plot import figure_legend
from .base import RECORDED_COST, TSUBAME_PAGE, UNIVER_PAGE, Row

__all__ = ["PAGE_NOTES", "between_worlds", "budget_axis",
           "cost_label", "counts", "figure_grid", "figure_legend", "finite", "interval_label",
           "missing", "notes", "padded_limits", "pct", "pooled", "save_figure", "verdict_cell",
           "worlds_label"]


def pct(x: float) -> str:
    """A ratio as a signed percentage: ``1.052 -> "+5.2%"``."""
    return f"{100 * (x - 1):+.1f}%"


def cost_label(name: str, *, on_trace: bool = False) -> str:
    """``"a800-qwen3-8b (measured)"`` or ``"h200-qwen3-8b (estimate)"``: every table and figure
    that prices latency says whether its model was measured (``LatencyModel.estimate``; the
    provenance is in ``run.json``). A trace's own timings read ``"recorded (measured on the
    trace's machine)"``; a preset pricing a trace's rows (``on_trace``) says it is another
    machine's, so that its tokens/s is not read as the recorded models' speed. A name no model
    answers to is returned as it is."""
    if name == RECORDED_COST:
        return f"{name} (measured on the trace's machine)"
    try:
        estimate = bool(get_cost_model(name).estimate)
    except (ValueError, OSError):
        return name
    kind = "estimate" if estimate else "measured"
    if on_trace:
        return f"{name} ({kind} for another machine and model, not the trace's)"
    return f"{name} ({kind})"


#: What a table says under itself when one of its rows links a page (the pages:
#: :data:`~treespec_sim.families.base.UNIVER_PAGE`, ``TSUBAME_PAGE``).
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


def verdict_cell(j, page: str) -> str:
    """A table's verdict column from a :class:`~treespec_sim.families.base.Judgement` (``None``:
    no claim reads the row, ``"—"``): the verdict, its reason and, when the claim does not
    hold or is undecided, the page that discusses it."""
    if j is None:
        return "—"
    if j.verdict == "holds":
        return "holds"
    if j.verdict == "no verdict":
        return f"no verdict ({j.reason})"
    head = "**does not hold**" if j.verdict == "does not hold" else "undecided"
    return f"{head}: {j.reason}, see {page}" if j.reason else f"{head}, see {page}"


def notes(lines: Sequence[str]) -> list[str]:
    """The notes of the pages that ``lines`` link, one paragraph each (empty if none)."""
    text = "\n".join(lines)
    return [x for page, note in PAGE_NOTES.items() if page in text for x in ("", note)]


def finite(*xs: object) -> bool:
    """Every value a finite number (a CSV round trip leaves strings and NaN)."""
    return all(isinstance(x, int | float) and np.isfinite(x) for x in xs)


def between_worlds(r: Row, *, prefix: str = "tau", pct: bool = False) -> str:
    """A row's between-world interval and per-world values, e.g. ``[7.10, 7.80] (7.35 / 7.49 /
    7.51)``; ``pct`` writes ratios as signed percentages. A dash without per-world values."""
    means = r.get(f"{prefix}_world_means")
    if not means:
        return "—"
    fmt = (lambda x: f"{100 * (x - 1):+.1f}%") if pct else (lambda x: f"{x:.2f}")
    each = "(" + " / ".join(fmt(x) for x in means) + ")"
    lo, hi = r.get(f"{prefix}_world_ci_low"), r.get(f"{prefix}_world_ci_high")
    if not finite(lo, hi):
        return f"one world {each}"
    head = f"{fmt(float(np.mean(means)))} " if pct else ""
    return f"{head}[{fmt(lo)}, {fmt(hi)}] {each}"


def worlds_label(rows: Sequence[Row]) -> str:
    """The rows' worlds per regime, e.g. ``"3"`` (``"?"`` for rows from before worlds)."""
    return "/".join(sorted({str(r.get("worlds")) for r in rows if r.get("worlds")})) or "?"


def trace_units(rows: Sequence[Row]) -> str | None:
    """The recorded prompts behind the intervals when every row replays a trace (their
    ``trace_units``, e.g. ``"4"``), else None (``docs/traces.md``, "The sweep on a trace")."""
    units = {r.get("trace_units") for r in rows}
    if not rows or None in units or "" in units:
        return None
    return "/".join(sorted(str(int(u)) for u in units))


def pooled(rows: Sequence[Row]) -> str:
    """``" pooled over 3 worlds"`` (empty for rows from before worlds; for a trace's rows,
    the recorded prompts the intervals are over)."""
    units = trace_units(rows)
    if units is not None:
        return f" of a trace (units: its {units} recorded prompts)"
    k = worlds_label(rows)
    return "" if k == "?" else f" pooled over {k} worlds"


def counts(rows: Sequence[Row]) -> str:
    """The rows' context counts: ``"63"``, ``"33/36"``, or their range when a precision
    target gave each cell its own (``"642 to 7,596 (each row's rounds)"``)."""
    used = sorted({int(r.get("rounds")) for r in rows if r.get("rounds")})
    if len(used) > 3:
        return f"{used[0]:,} to {used[-1]:,} (each row's `rounds`)"
    return "/".join(map(str, used)) if used else "the"


def missing(value: object) -> bool:
    """An empty cell: absent, empty (a CSV round trip) or NaN."""
    if value is None or value == "":
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def interval_label(rows: Sequence[Row], kind: str, unit: str, *,
                   by_sequence: bool = False) -> str:
    """What an interval of a family's rows is: the statistic, the level, over how many what.

    Reads the number of rounds and of worlds from the rows, e.g. ``"95% t-interval over 64
    contexts pooled over 3 worlds"``; the kind follows :mod:`treespec_sim.stats` (these are
    the pooled intervals, not the between-world ones).

    Parameters
    ----------
    rows : sequence of dict
    kind : str
        ``"t-interval"``, ``"percentile-bootstrap interval"``, ...
    unit : str
        What one round is (the family's grid ``unit``).
    by_sequence : bool
        The bootstrap resamples decoded sequences, not rounds (said in the label).
    """
    n = counts(rows)
    units = trace_units(rows)
    if units is not None:
        return f"95% {kind} over the {units} recorded prompts ({n} recorded {unit}) of a trace"
    worlds = sorted({int(r.get("worlds")) for r in rows if r.get("worlds")})
    pool = f" pooled over {'/'.join(map(str, worlds))} worlds" if worlds else ""
    tail = " (resampled by sequence)" if by_sequence else ""
    return f"95% {kind} over {n} {unit}{pool}{tail}"


def figure_grid(n: int, w: float = 4.4, h: float = 3.4, *, cols: int = 4):
    """A constrained-layout grid of ``n`` panels (at most ``cols`` a row, each ``w`` by ``h``
    inches); spare panels switched off.

    Constrained layout keeps every label and an ``"outside ..."`` figure legend inside the
    canvas (``tight_layout`` with a figure legend clips or overlaps it).
    """
    import matplotlib.pyplot as plt

    cols = min(cols, n)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows + 0.8), squeeze=False,
                             layout="constrained")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)[:n]


def budget_axis(ax, budgets: Sequence[int]) -> None:
    """Log-2 budget axis ticked at the grid's budgets, written as numbers (not 2^k)."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted(set(budgets))
    if len(ticks) > 8:  # keep tick labels from colliding: the powers of two among them
        ticks = [b for b in ticks if b & (b - 1) == 0] or ticks[::2]
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("budget B (draft nodes)")


def padded_limits(ax, values: Sequence[float], *, floor: float | None = None,
                  pad: float = 0.08) -> None:
    """Vertical limits that hold every value of ``values`` (drawn points, interval ends, 0 for
    a reference line) with ``pad`` of the span to spare on both sides, so that no line sits on
    a panel's edge; ``floor`` cuts the range from below (what lies lower leaves the panel)."""
    vals = [float(v) for v in values if finite(v)]
    if floor is not None:
        vals = [max(v, floor) for v in vals]
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    span = hi - lo or max(abs(hi), 1.0)
    ax.set_ylim(lo - pad * span, hi + pad * span)


def save_figure(fig, path: Path) -> None:
    """Write ``fig`` to ``path`` (PNG, 110 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)


