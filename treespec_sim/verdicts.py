r"""The one verdict rule of treespec: what a 95% interval says of a claimed range.

A claim states that a number lies in a range (:class:`ClaimedRange`: a published range such as
UniVer's +4.2–8.5%, a one-sided threshold such as ``> 0`` for "a beats b", a tolerance such as
CaDDTree's "within 1% of the oracle budget", or a point). :func:`judge` reads the number's 95%
interval (:mod:`treespec_sim.stats`) against it: the claim *holds* only when the interval lies
inside the range, *does not hold* only when the interval lies entirely outside, and is
*undecided* otherwise, saying about how many units (contexts, decoded sequences, recorded
prompts) would decide it. Below :data:`MIN_UNITS` units there is *no verdict*: a smoke test.

Every verdict treespec prints -- the sweep's findings and tables, the calibration's published
cells, the adaptive second stage of the paired families (:func:`second_stage`) -- comes from
here (``tests/sweep/test_verdicts.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DECIDE_MARGIN", "MIN_UNITS", "NO_VERDICT", "VERDICTS", "ClaimedRange", "Judgement",
           "format_number", "judge", "second_stage"]

#: The verdicts a claim can have: its 95% interval lies inside the claimed range (``holds``),
#: entirely outside it (``does not hold``), across an edge (``undecided``), or the cell rests
#: on fewer than :data:`MIN_UNITS` independent units (``no verdict``: a smoke test).
VERDICTS = ("holds", "does not hold", "undecided", "no verdict")
#: The verdict of a cell (or a run) below :data:`MIN_UNITS`.
NO_VERDICT = "no verdict"
#: The fewest independent units (fresh contexts, decoded sequences, a trace's recorded
#: prompts) a cell's interval must rest on for a verdict. Below it a t-interval or a percentile
#: bootstrap is too unreliable to judge a claim by: the run is a smoke test, and its numbers
#: are reported without verdicts (the quick preset, a trace of a few prompts).
MIN_UNITS = 30
#: Beyond this multiple of a cell's units, "≈ N would decide it" is not worth printing as a
#: number: the estimate sits too close to an edge of the claimed range to decide by sampling.
_DECIDE_CAP = 1000


def _edge(x: float, unit: str = "") -> str:
    """An edge of a claimed range: ``"+4.2%"`` for a ``"%..."`` unit, else ``"0"``."""
    return f"{x:+.1f}%" if unit.startswith("%") else f"{x:g}"


def format_number(x: float, unit: str) -> str:
    """A claim's number as the findings print it: ``"+5.2%"`` for a ``"%..."`` unit, else
    ``"+0.45"``."""
    if math.isinf(x):
        return ("+" if x > 0 else "−") + "∞"
    return f"{x:+.1f}%" if unit.startswith("%") else f"{x:+.2f}"


@dataclass(frozen=True)
class ClaimedRange:
    """The set a claim says its number lies in: ``[low, high]``, either end may be infinite.

    ``ClaimedRange(low=0, strict=True)``: ``> 0`` (a beats b); ``ClaimedRange(low=0)``:
    ``>= 0``; ``ClaimedRange(4.2, 8.5)``: a published range; ``ClaimedRange(0, 0)``: exactly 0.
    ``strict`` makes the finite ends open.
    """

    low: float = -math.inf
    high: float = math.inf
    strict: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.low, int | float) and isinstance(self.high, int | float)
                and self.low <= self.high) or math.isnan(self.low) or math.isnan(self.high):
            raise ValueError(f"a claimed range needs low <= high; got [{self.low}, "
                             f"{self.high}]")
        if self.strict and self.low == self.high:
            raise ValueError("a strict (open) claimed range needs low < high")

    def inside(self, low: float, high: float) -> bool:
        """Whether the interval ``[low, high]`` lies inside the range."""
        if self.strict:
            return self.low < low and high < self.high
        return self.low <= low and high <= self.high

    def outside(self, low: float, high: float) -> bool:
        """Whether the interval ``[low, high]`` lies entirely outside the range."""
        if self.strict:
            return high <= self.low or low >= self.high
        return high < self.low or low > self.high

    def text(self, unit: str = "") -> str:
        """``"> 0"``, ``">= -1.0%"``, ``"[+4.2%, +8.5%]"``, ``"= 0"``."""
        f = functools.partial(_edge, unit=unit)
        if self.low == self.high:
            return f"= {f(self.low)}"
        if math.isinf(self.high):
            return f"{'>' if self.strict else '>='} {f(self.low)}"
        if math.isinf(self.low):
            return f"{'<' if self.strict else '<='} {f(self.high)}"
        return f"{'(' if self.strict else '['}{f(self.low)}, {f(self.high)}" \
               f"{')' if self.strict else ']'}"


@dataclass(frozen=True)
class Judgement:
    """What :func:`judge` says of an interval: the verdict, why, and (undecided) how many
    units would decide it (``inf``: no number would; ``0``: decided or not judged)."""

    verdict: str
    reason: str = ""
    needed: float = 0.0


def judge(estimate: float, low: float, high: float, claimed: ClaimedRange, *,
          units: int | None = None, unit_name: str = "contexts", unit: str = "") -> Judgement:
    """THE verdict rule of treespec, for every claim.

    *holds* only when the 95% interval ``[low, high]`` lies inside the claimed range (for a
    one-sided claim: beyond its threshold); *does not hold* only when it lies entirely outside;
    *undecided* otherwise. An undecided verdict says about how many units would decide it: a
    half-width shrinks as ``1/sqrt(n)``, so with the estimate where it is, the interval clears
    an edge at distance ``d`` from the estimate, whose side of the interval now reaches ``h``
    past the estimate, at ``n (h / d)^2`` units (the largest such over the edges to clear).
    Below :data:`MIN_UNITS` units there is no verdict (a smoke test).

    Parameters
    ----------
    estimate, low, high : float
        The measured number and its 95% interval.
    claimed : ClaimedRange
        The claim's range.
    units : int, optional
        The independent units the interval rests on (contexts, decoded sequences, prompts);
        None: not known (no "would decide" count, and no minimum applied).
    unit_name : str
        What a unit is, in the reason (``"contexts"``, ``"decoded sequences"``,
        ``"prompts"``).
    unit : str
        The number's unit (``"%"`` formats the edges as percentages).

    Returns
    -------
    Judgement
    """
    if units is not None and units < MIN_UNITS:
        return Judgement(NO_VERDICT, f"smoke test: {units} {unit_name}, below the {MIN_UNITS} "
                                     "a verdict needs")
    if claimed.inside(low, high):
        return Judgement("holds")
    if claimed.outside(low, high):
        side = "below" if high <= claimed.low else "above"
        return Judgement("does not hold", f"the interval lies entirely {side} the claimed range "
                                          f"({claimed.text(unit)})")
    # the edges the interval must clear, each with the half-width on its side
    if claimed.low < estimate < claimed.high or (
            not claimed.strict and claimed.low <= estimate <= claimed.high):
        # to hold: clear every edge it crosses
        edges = [(estimate - claimed.low, estimate - low)] if low <= claimed.low else []
        if high >= claimed.high:
            edges.append((claimed.high - estimate, high - estimate))
    elif estimate <= claimed.low:  # to not hold: clear the near edge from below
        edges = [(claimed.low - estimate, high - estimate)]
    else:
        edges = [(estimate - claimed.high, estimate - low)]
    crossed = " and ".join(_edge(x, unit) for x in dict.fromkeys((claimed.low, claimed.high))
                           if low <= x <= high and math.isfinite(x))
    head = f"the interval crosses {crossed}" if crossed else "the interval meets an edge"
    if units is None:
        return Judgement("undecided", head, math.inf)
    ratios = [(h / d) ** 2 if d > 0 else math.inf for d, h in edges]
    need = max(ratios, default=math.inf) * units
    if not math.isfinite(need) or need > _DECIDE_CAP * units:
        return Judgement("undecided", f"{head} on {units:,} {unit_name}; the estimate lies too "
                                      "close to that edge for sampling to decide it",
                         math.inf)
    need = max(units + 1, math.ceil(need))
    return Judgement("undecided", f"{head} on {units:,} {unit_name}; ≈ {need:,} would "
                                  "decide it", float(need))


#: How far past the pilot's estimate of the units that decide a claim a second stage goes
#: (that estimate rests on the pilot's interval, itself uncertain).
DECIDE_MARGIN = 1.25


def second_stage(judgements: Sequence[Judgement], units: int, cap: int) -> int:
    """How many units to add to a cell's pilot of ``units`` so that its undecided claims get
    decided, within ``cap`` units in all (0: none to add).

    The adaptive design of the ``stochastic`` and ``verifiers`` families (a pilot, then at most
    this one second stage, the verdict read on all units): every claim :func:`judge` left
    undecided whose "would decide it" count is finite and at most ``cap`` asks for that many
    (times :data:`DECIDE_MARGIN`); the largest such ask, capped, is the cell's new size. Claims
    that would need more than ``cap`` -- or that no number decides -- ask for nothing, so the
    run's time goes where it can decide something. The stopping size depends on the pilot's
    estimate and interval (a two-stage design): the final interval is the usual one over all
    units, not adjusted for the choice, so its coverage is close to but not exactly 95%.
    """
    asks = [j.needed for j in judgements
            if j.verdict == "undecided" and math.isfinite(j.needed) and j.needed <= cap]
    if not asks or units >= cap:
        return 0
    return max(0, min(cap, math.ceil(DECIDE_MARGIN * max(asks))) - units)
