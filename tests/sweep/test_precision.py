"""The DDTree family's precision target: a pilot, then more contexts until every chain and
DDTree τ interval is within the target (issue 23, item 4)."""

import numpy as np
import pytest

from treespec_sim.families import DDTreeGrid, RunSettings, run_cell


def _rows(budgets=(4, 16), temperature=1.0, **kw):
    g = DDTreeGrid(("mid-entropy",), methods=("chain", "ddtree"), budgets=budgets,
                   temperatures=(temperature,), worlds=3, **kw)
    return {(r.method, r.budget): r for r in run_cell(g.cells()[0], RunSettings(seed=5))}


def _half_width(r):
    return (r.tau_ci_high - r.tau_ci_low) / 2 / r.tau_mean


def test_precision_target_is_met_and_the_rows_say_how_many_contexts():
    pilot = _rows(rounds=12)
    assert max(_half_width(r) for r in pilot.values()) > 0.04  # the pilot alone misses it
    rows = _rows(rounds=12, precision=0.04, max_rounds=5000)
    trees = {r.rounds for (m, _), r in rows.items() if m == "ddtree"}
    assert len(trees) == 1 and trees.pop() > 12  # every budget of one nested tree per context
    assert all(_half_width(r) <= 0.04 for r in rows.values())


def test_the_cap_stops_it_and_a_cap_at_the_pilot_is_the_fixed_design():
    fixed = _rows(rounds=12)
    capped = _rows(rounds=12, precision=0.001, max_rounds=12)
    for k, r in fixed.items():
        assert capped[k].rounds == 12 and capped[k].tau_mean == r.tau_mean
    some = _rows(rounds=12, precision=0.001, max_rounds=30)
    assert {r.rounds for r in some.values()} == {30}


def test_more_contexts_continue_the_pilot_streams():
    """The first contexts of each world are the pilot's: the precise run's world means move
    towards, not away from, a run that simply asked for as many contexts."""
    for kw, h in (({}, 0.04), ({"budgets": (64,), "temperature": 0.0}, 0.08)):
        rows = _rows(rounds=12, precision=h, max_rounds=5000, **kw)
        for k, r in rows.items():
            n = r.rounds
            assert n % 3 == 0  # every stage adds as many contexts to each world
            fixed = _rows(rounds=n, **kw)[k]
            assert r.tau_mean == pytest.approx(fixed.tau_mean, rel=1e-12)
            assert np.allclose(r.tau_world_means, fixed.tau_world_means, rtol=1e-12)


def test_the_chain_takes_more_contexts_than_the_trees_when_it_needs_them():
    # At T = 0 the chain's tau varies far more across contexts than DDTree@64's: each method
    # group stops at its own target, so the trees are not computed on the chain's extra ones.
    rows = _rows(budgets=(64,), temperature=0.0, rounds=12, precision=0.04, max_rounds=5000)
    chain, tree = rows[next(k for k in rows if k[0] == "chain")], rows[("ddtree", 64)]
    assert chain.rounds > 1.5 * tree.rounds
    assert _half_width(chain) <= 0.04 and _half_width(tree) <= 0.04


@pytest.mark.parametrize(("kw", "match"), [
    ({"precision": -0.1}, "ddtree.precision"), ({"precision": "0.02"}, "ddtree.precision"),
    ({"precision": 1.5}, "ddtree.precision"), ({"max_rounds": 5}, "ddtree.max_rounds"),
    ({"max_rounds": 2.5}, "ddtree.max_rounds")])
def test_bad_precision_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        DDTreeGrid(("mid-entropy",), rounds=12, **kw)
