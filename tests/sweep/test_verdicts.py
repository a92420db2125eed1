"""The one verdict rule (issue 42): a claim holds only when its 95% interval lies inside the
claimed range, does not hold only when it lies entirely outside, and is undecided otherwise,
saying how many units would decide it; below MIN_UNITS units there is no verdict."""

import math

import pytest

from treespec_sim.calibrate import published_verdict
from treespec_sim.families.base import Claim, deciding_cost, headline, smoke_test
from treespec_sim.verdicts import MIN_UNITS, NO_VERDICT, ClaimedRange, judge, second_stage

RANGE = ClaimedRange(4.2, 8.5)          # a published two-sided range (UniVer's, in %)
ABOVE = ClaimedRange(0.0, strict=True)  # "a beats b": a - b > 0
AT_LEAST = ClaimedRange(0.0)            # "a >= b"
POINT = ClaimedRange(0.0, 0.0)          # "a = b"


@pytest.mark.parametrize("claimed, interval, verdict", [
    # two-sided: inside, across one edge, across both, entirely outside on either side
    (RANGE, (6.0, 5.0, 7.0), "holds"),
    (RANGE, (4.2, 4.2, 8.5), "holds"),                # closed edges: the range itself holds
    (RANGE, (5.0, 3.0, 7.0), "undecided"),
    (RANGE, (9.0, 8.0, 10.0), "undecided"),
    (RANGE, (6.0, 2.0, 10.0), "undecided"),
    (RANGE, (3.2, -3.1, 10.2), "undecided"),          # the trace: holds before
    (RANGE, (2.5, -1.0, 6.1), "undecided"),           # the quick preset: holds before
    (RANGE, (1.0, -1.0, 3.0), "does not hold"),
    (RANGE, (10.0, 9.0, 11.0), "does not hold"),
    # one-sided, strict: beyond the threshold, across it, at or below it
    (ABOVE, (1.0, 0.5, 1.5), "holds"),
    (ABOVE, (0.5, 0.0, 1.0), "undecided"),            # touching 0 is not beyond it
    (ABOVE, (0.0, -0.5, 0.5), "undecided"),
    (ABOVE, (-1.0, -1.5, -0.5), "does not hold"),
    (ABOVE, (-0.5, -1.0, 0.0), "does not hold"),      # at most 0: entirely outside (0, inf)
    # one-sided, closed
    (AT_LEAST, (0.5, 0.0, 1.0), "holds"),
    (AT_LEAST, (0.0, -0.1, 0.1), "undecided"),
    (AT_LEAST, (-0.5, -1.0, -0.1), "does not hold"),
    # a point: only an interval that is the point lies inside it
    (POINT, (0.0, 0.0, 0.0), "holds"),
    (POINT, (0.1, -0.1, 0.3), "undecided"),
    (POINT, (0.5, 0.2, 0.8), "does not hold"),
])
def test_the_rule_on_intervals_inside_across_and_outside(claimed, interval, verdict):
    assert judge(*interval, claimed, units=100).verdict == verdict
    assert judge(*interval, claimed).verdict == verdict   # units unknown: the same verdict


def test_undecided_says_how_many_units_would_decide_it():
    # inside the range, across the lower edge: the lower side must shrink from 3 to 1
    j = judge(5.0, 2.0, 7.0, RANGE, units=40, unit_name="contexts", unit="%")
    assert j.verdict == "undecided" and j.needed == math.ceil(40 * (3.0 / 0.8) ** 2)
    assert f"the interval crosses +4.2% on 40 contexts; ≈ {int(j.needed):,} would decide it" \
        == j.reason
    # across both edges: the tighter one decides how many
    j = judge(6.0, 2.0, 10.0, RANGE, units=40)
    assert j.needed == math.ceil(40 * max(4.0 / 1.8, 4.0 / 2.5) ** 2)
    # outside the range, across its near edge: to show it does not hold
    j = judge(3.2, -3.1, 10.2, RANGE, units=40)
    assert j.needed == math.ceil(40 * (7.0 / 1.0) ** 2)
    # an estimate on the edge: no number of units decides it
    j = judge(0.0, -0.5, 0.5, ABOVE, units=33)
    assert j.verdict == "undecided" and j.needed == math.inf
    assert "too close to that edge for sampling to decide" in j.reason
    # the count is never below one more unit than there are
    assert judge(0.5, -0.001, 1.0, ABOVE, units=30).needed == 31


def test_below_the_minimum_there_is_no_verdict():
    for interval in ((6.0, 5.0, 7.0), (1.0, -1.0, 3.0), (5.0, 3.0, 7.0)):
        j = judge(*interval, RANGE, units=MIN_UNITS - 1, unit_name="recorded prompts")
        assert j.verdict == NO_VERDICT
        assert j.reason == (f"smoke test: {MIN_UNITS - 1} recorded prompts, below the "
                            f"{MIN_UNITS} a verdict needs")
    assert judge(6.0, 5.0, 7.0, RANGE, units=MIN_UNITS).verdict == "holds"


def test_a_claimed_range_is_checked():
    with pytest.raises(ValueError, match="low <= high"):
        ClaimedRange(2.0, 1.0)
    with pytest.raises(ValueError, match="strict"):
        ClaimedRange(0.0, 0.0, strict=True)
    assert RANGE.text("%") == "[+4.2%, +8.5%]" and ABOVE.text() == "> 0"
    assert AT_LEAST.text() == ">= 0" and POINT.text() == "= 0"


def test_a_judged_claim_carries_the_rule_s_verdict_and_units():
    c = Claim.judged("c", 5.0, 2.0, 7.0, "%", RANGE, units=40, scope="s",
                     seconds_per_unit=0.5, reason="why")
    assert c.verdict == "undecided" and c.units == 40 and c.needed > 40
    assert c.reason.startswith("why; the interval crosses")


def test_headlines_count_cells_and_say_what_deciding_would_cost():
    cells = [Claim.judged("c", 6.0, 5.0, 7.0, "%", RANGE, units=40, scope="a",
                          seconds_per_unit=0.1),
             Claim.judged("c", 5.0, 3.0, 7.0, "%", RANGE, units=40, scope="b",
                          seconds_per_unit=0.1)]
    h = headline("c", cells, margin=lambda c: c.low)
    assert h.verdict == "undecided" and "holds in 1, undecided in 1 of 2 cells" in h.reason
    need = int(cells[1].needed)
    assert f"deciding it would take ≈ {need:,} contexts a cell (now 40" in h.reason
    assert "more of one worker at this run's pace" in h.reason
    assert deciding_cost(cells[:1]) == ""
    small = Claim.judged("c", 6.0, 5.0, 7.0, "%", RANGE, units=9, scope="q")
    h = headline("c", [*cells, small], margin=lambda c: c.low)
    assert h.verdict == NO_VERDICT
    out = Claim.judged("c", 1.0, -1.0, 3.0, "%", RANGE, units=40, scope="z")
    assert headline("c", [*cells, small, out], margin=lambda c: c.low).verdict == \
        "does not hold"
    banner = smoke_test([cells[0], small])
    assert banner.startswith("**Smoke test, not a result.** 1 of 2 claims")
    assert "as few as 9 contexts" in banner and smoke_test(cells) == ""


def test_a_published_cell_is_reproduced_only_when_its_interval_is_inside_the_band():
    # the calibration's cells (treespec_sim.calibrate.TOLERANCE = 5%) by the same rule
    assert published_verdict(10.0, 9.8, 10.2, 10.0) == "yes"
    assert published_verdict(9.6, 9.4, 9.8, 10.0) == "undecided"   # -4%, the interval past -5%
    assert published_verdict(9.0, 8.8, 9.2, 10.0) == "NO"


def test_the_second_stage_asks_for_what_decides_a_claim_within_the_cap():
    holds = judge(1.0, 0.5, 1.5, ClaimedRange(0.0, strict=True), units=40)
    close = judge(0.5, -0.1, 1.1, ClaimedRange(0.0, strict=True), units=40)   # ≈ 58 decide
    far = judge(0.05, -0.5, 0.6, ClaimedRange(0.0, strict=True), units=40)    # thousands
    assert second_stage([holds], 40, 300) == 0
    assert second_stage([holds, close], 40, 300) == math.ceil(1.25 * close.needed) - 40
    assert second_stage([far], 40, 300) == 0             # beyond the cap: nothing asked
    assert second_stage([close, far], 40, 300) == math.ceil(1.25 * close.needed) - 40
    assert second_stage([close], 40, 60) == 20           # within the cap, the ask capped
    assert second_stage([close], 40, 50) == 0            # needs more than the cap allows
    assert second_stage([close], 300, 300) == 0
