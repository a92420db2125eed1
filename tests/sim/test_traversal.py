"""Traversal and the UniVer rules: losslessness by exact enumeration, reductions, sampling,
bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from proofs_check.enumerate import max_law_gap
from proofs_check.theorems import SHAPES, RandomWorld, _lossless_gap, _package
from treespec_sim import DraftTree
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import RULES, expected_length, verify
from treespec_sim.verify.block import block_round_law
from treespec_sim.verify.traversal import _POINT, _lazy_trials, _residual
from treespec_sim.verify.univer import trials

EXACT_TOL = 1e-9


@pytest.mark.parametrize("rule,scheme", [("traversal", "without_replacement"),
                                         ("univer", "without_replacement"),
                                         ("univer-guided", "without_replacement"),
                                         ("univer-fixed", "without_replacement"),
                                         ("univer-fixed", "greedy")])
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_lossless_by_enumeration(rule, scheme, shape_name):
    """Mixture over every drafted tree of the exact round law, continued with target draws,
    equals the target's law (V = 3, worlds with exact zeros included)."""
    rng = np.random.default_rng(hash((rule, scheme, shape_name)) % 2**32)
    for _ in range(3):
        world = RandomWorld(rng, 3, alpha=0.5, zeros=True)
        assert _lossless_gap(world, SHAPES[shape_name], scheme, _package(rule)) < EXACT_TOL


@pytest.mark.parametrize("rule", ["traversal", "univer", "univer-guided", "univer-fixed"])
def test_wrong_scheme_is_caught(rule):
    """Greedy drafts verified by a rule with Traversal steps, or drafts tempered differently
    from the proposal the verifier is told, break losslessness: the same enumeration flags
    them."""
    rng = np.random.default_rng(1)
    shape = SHAPES["2 x 2"]
    gaps = []
    for _ in range(3):
        world = RandomWorld(rng, 3)
        law = _package(rule)
        bad_scheme = "tempered" if rule == "univer-fixed" else "greedy"
        gaps.append(_lossless_gap(world, shape, bad_scheme, law))
    assert max(gaps) > 1e-3


def test_chain_is_block_verification():
    rng = np.random.default_rng(2)
    for gamma in (1, 2, 4):
        target = rng.dirichlet(np.full(4, 0.5), size=gamma + 1)
        drafts = rng.dirichlet(np.full(4, 0.5), size=gamma)
        x = [int(rng.choice(4, p=drafts[i])) for i in range(gamma)]
        tree = DraftTree.from_parents(list(range(-1, gamma)), [-1, *x])
        prop = np.vstack([drafts, np.full((1, 4), 0.25)])
        for rule in ("traversal", "univer", "univer-guided", "univer-fixed"):
            got = RULES[rule].round_law(tree, ArrayOracle(target, tree), prop)
            assert max_law_gap(got, block_round_law(x, target, drafts)) < EXACT_TOL


def test_expected_length_matches_round_law_and_samples():
    """E[tau] equals the mean length under the exact law, and sampled outcomes pass a
    chi-square test against that law (false-alarm rate 1e-3)."""
    rng = np.random.default_rng(3)
    tree = DraftTree.from_parents([-1, 0, 0, 1, 1, 2], [-1, 0, 2, 1, 3, 0])
    rows = rng.dirichlet(np.ones(4), size=tree.n_nodes)
    prop = 0.5 * rows + 0.5 * rng.dirichlet(np.ones(4), size=tree.n_nodes)
    for rule in ("traversal", "univer", "univer-guided", "univer-fixed"):
        law = RULES[rule].round_law(tree, ArrayOracle(rows, tree), prop)
        assert abs(sum(law.values()) - 1) < EXACT_TOL
        mean = sum(len(s) * p for s, p in law.items())
        assert abs(expected_length(tree, rows, rule=rule, proposal=prop) - mean) < EXACT_TOL
        keys = sorted(law)
        counts = dict.fromkeys(keys, 0)
        draws = np.random.default_rng(4)
        n = 4000
        for _ in range(n):
            counts[verify(tree, rows, rule=rule, rng=draws, proposal=prop).tokens] += 1
        expected = np.array([law[k] * n for k in keys])
        observed = np.array([counts[k] for k in keys])
        big = expected >= 5
        obs = np.append(observed[big], observed[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        assert stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue > 1e-3


def test_traversal_one_level_equals_rrsw():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    tree = DraftTree.from_parents([-1, 0, 0, 0], [-1, 3, 0, 4])
    rows = np.vstack([p] + [np.full(5, 0.2)] * 3)
    prop = np.vstack([q] * 4)
    a = expected_length(tree, rows, rule="traversal", proposal=prop)
    b = expected_length(tree, rows, rule="rrsw", proposal=prop)
    assert abs(a - b) < EXACT_TOL


@pytest.mark.parametrize("rule", ["traversal", "univer", "univer-guided", "univer-fixed"])
def test_bad_input(rule):
    tree = DraftTree.from_parents([-1, 0, 0], [0, 1, 2])
    rows = np.full((3, 3), 1 / 3)
    good = np.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="needs a proposal"):
        verify(tree, rows, rule=rule, rng=np.random.default_rng(0))
    bad = good.copy()
    bad[0] = [0.5, 0.5, 0.0]
    with pytest.raises(ValueError, match=r"node 2 drafted token 2 with zero proposal mass"):
        expected_length(tree, rows, rule=rule, proposal=bad)
    bad[0] = [0.5, 0.4, 0.1 - 1e-3]
    with pytest.raises(ValueError, match=r"proposal\[0\] sums to"):
        expected_length(tree, rows, rule=rule, proposal=bad)
    bad[0] = [0.5, 0.6, -0.1]
    with pytest.raises(ValueError, match=r"proposal\[0, 2\] = -0.1 is negative"):
        expected_length(tree, rows, rule=rule, proposal=bad)
    dup = DraftTree.from_parents_multiset([-1, 0, 0], [0, 1, 1])
    with pytest.raises(ValueError, match="duplicate siblings"):
        expected_length(dup, rows, rule=rule, proposal=good)


@pytest.mark.parametrize("step", ["traversal", "conditional", "reverse", "condrev"])
def test_lazy_trials_are_the_trials(step):
    """The run's trials (proposals built only on demand, point masses never built) are
    univer.trials' bit for bit: the same positions, tried entries and proposals."""
    rng = np.random.default_rng(31)
    for _ in range(100):
        vocab = int(rng.integers(3, 30))
        q = rng.dirichlet(np.full(vocab, 0.5))
        k = 2 if step in ("reverse", "condrev") else int(rng.integers(1, 4))
        tokens = rng.choice(vocab, size=k, replace=False)
        if rng.random() < 0.5:  # a law whose sum is exactly 1.0: the first trial is q itself
            q = q / q.sum()
        scratch = np.empty(vocab)
        ref = list(trials(step, q, tokens))
        # with and without the builder's q.sum() (the same float: the run's law statistics)
        for q_sum in (None, q.sum()):
            # a built proposal lives in scratch until the next trial: copy it before resuming
            lazy = [(pos, rho_x, rho().copy() if callable(rho) else rho)
                    for pos, rho_x, rho in _lazy_trials(step, q, tokens, scratch, q_sum)]
            assert [p for p, _, _ in lazy] == [p for p, _ in ref]
            for (pos, rho_x, rho), (_, want) in zip(lazy, ref, strict=True):
                assert rho_x == want[tokens[pos]]
                if rho is _POINT:
                    assert want[tokens[pos]] == 1.0 and want.sum() == 1.0
                else:
                    assert np.array_equal(rho, want)


def test_residual_is_the_positive_part_and_its_masses_in_eight_lanes():
    # the compiled residual against its definition: out = max(s r - rho, 0) (numpy's floats),
    # Z and R summed in the stated order spelled out in Python
    rng = np.random.default_rng(11)
    for n, s in ((1, 1.0), (9, 0.5), (4099, 0.83), (32768, 1.0)):
        r = rng.dirichlet(np.ones(n))
        rho = rng.dirichlet(np.ones(n))
        out = np.empty(n)
        z, big_r = _residual(r, s, rho, out)
        np.testing.assert_array_equal(out, np.maximum(np.multiply(r, s) - rho, 0.0))
        lanes_z, lanes_r = [0.0] * 8, [0.0] * 8
        for i, d in enumerate((np.multiply(r, s) - rho).tolist()):
            if d > 0.0:
                lanes_z[i % 8] += d
            else:
                lanes_r[i % 8] -= d
        for got, lanes in ((z, lanes_z), (big_r, lanes_r)):
            assert got == ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
        assert z - big_r == pytest.approx(s - 1.0, abs=1e-12)   # sum(s r - rho) = s - 1
