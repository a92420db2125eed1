"""The drafter's sampling law as a policy knob (``proposal_temperature``) and the regime map
(``docs/theory/tsubame.md`` §5): the knob draws the law it records, leaves the plan alone, and
the map's rounds are registered methods reading it as an option."""

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from proofs_check.sampled import enumerate_trees
from proofs_check.tsubame import TsubameWorld
from treespec_sim import DraftTree, engine, synth
from treespec_sim.families import stochastic as st
from treespec_sim.families import stochastic_map as sm
from treespec_sim.families import stochastic_map_report as smr
from treespec_sim.families.base import RunSettings
from treespec_sim.policies import tsubame, tsubame_shape
from treespec_sim.policies.sampled import fill_tree, sampled_chain, tempered
from treespec_sim.stats import MeanCI
from treespec_sim.sweep import get_preset

ALPHA = 1e-4


def _proposal(world: TsubameWorld):
    return lambda depth, parent: world.corrected(() if depth == 1 else (parent,))


@pytest.mark.parametrize(("scheme", "t_q"), [("iid", 0.5), ("without_replacement", 2.0)])
def test_proposal_temperature_draws_and_records_the_tempered_law(scheme, t_q):
    rng = np.random.default_rng(5)
    world = TsubameWorld(np.random.default_rng(8), 3, 2)
    shape = DraftTree.from_parents_multiset([-1, 0, 0, 1], [-1, 0, 0, 0])
    exact = {tuple(t.token[1:]): p for t, _, p in enumerate_trees(
        shape, lambda path: tempered(world.corrected(path[-1:]), t_q), scheme)}
    n = 20000
    seen = Counter()
    for i in range(n):
        d = fill_tree(shape, _proposal(world), scheme=scheme, rng=rng, temperature=1.0,
                      proposal_temperature=t_q)
        seen[tuple(d.tree.token[1:])] += 1
        if i == 0:
            assert d.temperature == 1.0            # verified at the target's T
            np.testing.assert_allclose(d.proposal[0], tempered(world.corrected(()), t_q))
            np.testing.assert_allclose(d.proposal[1], tempered(
                world.corrected((int(d.tree.token[1]),)), t_q))
    keys = sorted(exact)
    assert set(seen) <= set(exact)
    observed = np.array([seen[k] for k in keys])
    assert stats.chisquare(observed, np.array([exact[k] for k in keys]) * n).pvalue > ALPHA
    # and the law is not the untempered one: the same counts reject it
    plain = {tuple(t.token[1:]): p for t, _, p in enumerate_trees(
        shape, lambda path: world.corrected(path[-1:]), scheme)}
    assert stats.chisquare(observed, np.array([plain[k] for k in keys]) * n).pvalue < ALPHA


def test_proposal_temperature_default_and_equal_to_t_change_nothing():
    world = TsubameWorld(np.random.default_rng(2), 4, 3)
    for t in (0.7, 1.0):
        a = tsubame(world.log_marginals, 6, rng=np.random.default_rng(1), temperature=t,
                    proposal=_proposal(world))
        b = tsubame(world.log_marginals, 6, rng=np.random.default_rng(1), temperature=t,
                    proposal=_proposal(world), proposal_temperature=t)
        assert a.tree == b.tree and np.array_equal(np.asarray(a.proposal),
                                                   np.asarray(b.proposal))
    # the plan reads the drafter's scores only: the same shape at any proposal temperature
    c = tsubame(world.log_marginals, 6, rng=np.random.default_rng(1), temperature=1.0,
                proposal=_proposal(world), proposal_temperature=3.0)
    assert np.array_equal(c.tree.parent, a.tree.parent)   # a: T = 1, same plan, BFS order
    assert c.tree.size == tsubame_shape(world.log_marginals, 6).size
    with pytest.raises(ValueError, match="proposal_temperature"):
        sampled_chain(_proposal(world), 3, rng=np.random.default_rng(0), temperature=1.0,
                      proposal_temperature=0.0)
    # at T = 0 the fill is the deterministic top-k, whatever the knob
    z = sampled_chain(_proposal(world), 3, rng=np.random.default_rng(0), temperature=0.0,
                      proposal_temperature=2.0)
    assert z.scheme == "deterministic"


@pytest.mark.parametrize(("method", "rule"), [
    ("sampled-chain-corrected", "rrs"), ("tsubame-rrsw", "rrsw"), ("sampled-chain", "rrs"),
    ("tsubame-rrsw-marginal", "rrsw")])
def test_the_proposal_temperature_option_of_the_map_methods(method, rule):
    """The map's rounds are registered methods with ``options={"proposal_temperature": T_q}``:
    at ``T_q = T`` the same round as without the option, at another ``T_q`` other draws."""
    world = synth.make_world("small", seed=1)
    ctx = world.sample_context(np.random.default_rng(2))

    def rnd(**options):
        return engine.run_round(world, ctx, method=method, budget=6, rule=rule,
                                temperature=1.0, rng=np.random.default_rng(9), sample=False,
                                options=options)

    a, b, c = rnd(proposal_temperature=1.0), rnd(), rnd(proposal_temperature=3.0)
    assert a.tree == b.tree and a.expected_tau == b.expected_tau
    np.testing.assert_array_equal(np.asarray(a.proposal), np.asarray(b.proposal))
    assert not np.array_equal(np.asarray(c.proposal), np.asarray(b.proposal))
    if method == "tsubame-rrsw-marginal":  # Tsubame's plan, its children drawn from q_d
        q = np.exp(np.asarray(world.draft(ctx), dtype=np.float64))
        for v in np.flatnonzero(~b.tree.is_leaf()):
            np.testing.assert_allclose(b.proposal[v], q[int(b.tree.depth[v])]
                                       / q[int(b.tree.depth[v])].sum(), rtol=1e-9)


def test_a_small_map_cell_and_its_report():
    g = sm.StochasticMapGrid(("small",), logit_scales=(0.5,), proposal_temperatures=(1.0, 3.0),
                             correction_qualities=(0.9,), budget=6, rounds=6, worlds=2)
    (cell,) = g.cells()
    rows = sm.run(cell, RunSettings())
    by = {(r.method, r.proposal_temperature, r.correction_quality): r for r in rows}
    assert len(rows) == 2 + 2 * 2 + 2 * 2
    assert len({r.target_entropy for r in rows}) == 1 and rows[0].target_entropy > 0
    # DDTree and the argmax chain ignore the drafter's sampling law; the drafts do not
    assert by[("ddtree", None, None)].correction_levels_mean == 0
    assert by[("tsubame-rrsw", 1.0, 0.9)].correction_levels_mean >= 1
    assert by[("sampled-chain", 1.0, 0.0)].taus != by[("sampled-chain", 3.0, 0.0)].taus
    pts = smr.points(rows)
    assert len(pts) == 4 and {p.kappa for p in pts} == {0.0, 0.9}
    for p in pts:
        dd = np.asarray(by[("ddtree", None, None)].taus)
        chain = "sampled-chain-corrected" if p.kappa else "sampled-chain"
        sc = np.asarray(by[(chain, p.t_q, p.kappa)].taus)
        assert p.chain_gap.mean == pytest.approx(float(np.mean(dd - sc)))
        assert p.ddtree_behind == (p.chain_gap.high < 0)
    text = "\n".join(smr.tables(rows))
    assert "regime map" in text and "PR #169" in text
    claims = smr.claims(rows)
    assert len(claims) == 2 and all("map points" in c.reason for c in claims)
    # 6 contexts a point: a smoke test, no verdict
    assert {c.verdict for c in claims} == {"no verdict"}
    for c, (_, rule, _, _) in zip(claims, smr.MAP_CLAIMS, strict=True):
        assert {rule(p).verdict for p in pts} == {"no verdict"}
        assert "smoke test: 6 contexts" in c.reason


def _point(gap, vs_ddtree, vs_chain, contexts=40):
    ci = lambda x: MeanCI(*x)  # noqa: E731
    return smr.MapPoint("r", 1.0, 0.8, 1.0, 0.5, ci(gap), ci(vs_ddtree), ci(vs_chain), 0.5, 1.2,
                       3.0, 3.0, 3.0, contexts)


def test_map_claims_judge_each_point_by_the_one_rule(monkeypatch):
    behind, tsubame = smr.MAP_CLAIMS[0][1], smr.MAP_CLAIMS[1][1]
    # DDTree behind the chain: chain - DDTree > 0, i.e. the gap's interval below 0
    assert behind(_point((-0.5, -0.8, -0.2), (0, -1, 1), (0, -1, 1))).verdict == "holds"
    assert behind(_point((0.5, 0.2, 0.8), (0, -1, 1), (0, -1, 1))).verdict == "does not hold"
    assert behind(_point((-0.1, -0.4, 0.2), (0, -1, 1), (0, -1, 1))).verdict == "undecided"
    # Tsubame beats both: both intervals above 0; one below 0 refutes it
    assert tsubame(_point((0, -1, 1), (0.5, 0.2, 0.8), (0.4, 0.1, 0.7))).verdict == "holds"
    assert tsubame(_point((0, -1, 1), (0.5, 0.2, 0.8), (-0.4, -0.7, -0.1))).verdict == \
        "does not hold"
    assert tsubame(_point((0, -1, 1), (0.5, 0.2, 0.8), (0.1, -0.2, 0.4))).verdict == "undecided"
    # the existential headline: "does not hold" only when it fails at every point
    pts = [_point((0.5, 0.2, 0.8), (0, -1, 1), (0, -1, 1)),
           _point((-0.1, -0.4, 0.2), (0, -1, 1), (0, -1, 1))]
    monkeypatch.setattr(smr, "points", lambda rows: pts)
    assert smr.claims([])[0].verdict == "undecided"
    monkeypatch.setattr(smr, "points", lambda rows: pts[:1])
    assert smr.claims([])[0].verdict == "does not hold"


def test_the_map_preset_and_the_existing_presets():
    plan = get_preset("stochastic-map")
    (g,) = plan.grids
    assert isinstance(g, sm.StochasticMapGrid) and len(plan.cells()) == 8
    assert {c.family for c in plan.cells()} == {"stochastic-map"}
    assert all(c.temperature == 1.0 and c.budget == 64 for c in plan.cells())
    # the stochastic family's preset holds only its own grid
    assert all(isinstance(x, st.StochasticGrid) for x in get_preset("stochastic").grids)
    with pytest.raises(ValueError, match="correction_qualities"):
        sm.StochasticMapGrid(("small",), correction_qualities=(0.0,))
