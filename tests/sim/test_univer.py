"""UniVer's per-node step choice: steps, choosers, closed forms, guarantees, sampler vs exact."""

from __future__ import annotations

import numpy as np
import pytest

from proofs_check.buggy import BUGGY_VARIANTS
from proofs_check.enumerate import max_law_gap
from proofs_check.sampled import mean_length, round_law
from proofs_check.switch import oracle_chooser, oracle_value, rule_value
from proofs_check.theorems import (
    ALL_STEPS,
    BINARY_3,
    DDTREE_LIKE,
    SHAPES,
    RandomWorld,
    _chooser_law,
    _fixed_step,
    _lossless_gap,
    _no_rule_dominates,
    _package,
    _traversal_below_rrsw,
)
from treespec_sim import DraftTree
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import MATCHING_RULES, RULES, expected_length, verify
from treespec_sim.verify.univer import (
    CHOOSERS,
    COIN,
    ENUM_LIMIT,
    NodeView,
    _argmax,
    _inclusion_bound,
    _LawTerms,
    _sorted_support,
    _two_child_reference,
    candidate_steps,
    choose_guided,
    choose_safe,
    enumerated_accepts,
    n_ordered_draws,
    step_value,
    two_child_accepts,
)

EXACT_TOL = 1e-9
WO = "without_replacement"
ALL_SHAPES = SHAPES | {"binary depth 3": BINARY_3, "ddtree-like": DDTREE_LIKE}


def _world(rng, vocab=3):
    return RandomWorld(rng, vocab, alpha=float(rng.choice([0.3, 1.0, 3.0])),
                       zeros=bool(rng.random() < 0.3))


def test_rules_registered_for_their_schemes():
    for rule in ("univer", "univer-guided", "univer-fixed"):
        assert rule in RULES and rule in MATCHING_RULES[WO]
    assert MATCHING_RULES["greedy"] == ("univer-fixed",)


@pytest.mark.parametrize("step", ["traversal", "conditional", "reverse", "condrev"])
def test_k2_closed_form_equals_enumeration(step):
    rng = np.random.default_rng(0)
    for _ in range(200):
        vocab = int(rng.integers(2, 7))
        q = rng.dirichlet(np.full(vocab, float(rng.choice([0.05, 0.3, 1.0]))))
        if vocab > 2 and rng.random() < 0.3:
            q[rng.integers(vocab)] = 0.0
            q /= q.sum()
        if np.count_nonzero(q) < 2:  # two draws without replacement need two tokens
            continue
        s = 1.0 if rng.random() < 0.3 else float(rng.uniform(0.01, 1.0))
        mu = s * rng.dirichlet(np.full(vocab, float(rng.choice([0.2, 1.0]))))
        got = two_child_accepts(mu, q, step)
        assert np.abs(got - enumerated_accepts(mu, q, 2, step)).max() < 1e-12
        assert got.sum() <= s + 1e-12


@pytest.mark.parametrize("step", ALL_STEPS)
def test_every_step_is_lossless(step):
    """Each fixed step (every shape with k = 2 nodes it applies to) emits the target's law."""
    rng = np.random.default_rng(abs(hash(step)) % 2**32)
    for name in ("one level, k=2", "2 x 2", "deep-second", "link + deep-second",
                 "three children, middle deep"):
        world = RandomWorld(rng, 3, alpha=0.5, zeros=True)
        assert _lossless_gap(world, SHAPES[name], WO, _chooser_law(_fixed_step(step))) \
            < EXACT_TOL, name


def test_peeking_chooser_is_caught():
    """A chooser that reads the node's drafted children is not lossless."""
    rng = np.random.default_rng(1)
    v = BUGGY_VARIANTS["univer_chooser_peeks"]
    gaps = [_lossless_gap(_world(rng), SHAPES["one level, k=2"], v.scheme, v.law)
            for _ in range(3)]
    assert max(gaps) > 1e-3


def test_safe_rule_on_greedy_drafts_is_caught():
    rng = np.random.default_rng(2)
    gaps = [_lossless_gap(_world(rng), SHAPES["2 x 2"], "greedy", _package("univer"))
            for _ in range(3)]
    assert max(gaps) > 1e-3


@pytest.mark.parametrize("shape_name", list(ALL_SHAPES))
def test_safe_dominates_traversal_in_expectation(shape_name):
    """univer >= traversal in exact E[tau] over draws and coins, on every shape."""
    rng = np.random.default_rng(abs(hash(shape_name)) % 2**32)
    shape = ALL_SHAPES[shape_name]
    for _ in range(8):
        world = _world(rng, 3 if shape.size > 8 else int(rng.choice([3, 4])))
        safe = rule_value(shape, world, CHOOSERS["univer"])
        trav = rule_value(shape, world, CHOOSERS["traversal"])
        assert safe >= trav - 1e-12


def test_safe_strictly_better_somewhere_and_guided_wins_deep_second():
    """The guarantee is not vacuous (a strict gain at one level), and the guided rule's point
    (deep subtree under the second draw) shows in the exact means."""
    rng = np.random.default_rng(3)
    k2, deep2 = SHAPES["one level, k=2"], SHAPES["deep-second"]
    gains, guided, trav = [], [], []
    for _ in range(10):
        world = _world(rng)
        gains.append(rule_value(k2, world, CHOOSERS["univer"])
                     - rule_value(k2, world, CHOOSERS["traversal"]))
        guided.append(rule_value(deep2, world, CHOOSERS["univer-guided"]))
        trav.append(rule_value(deep2, world, CHOOSERS["traversal"]))
    assert max(gains) > 1e-3
    assert np.mean(guided) > 1.1 * np.mean(trav)


@pytest.mark.parametrize("shape_name", ["one level, k=2", "2 x 2", "deep-first", "deep-second",
                                        "link + deep-second"])
def test_node_values_equal_package_and_oracle_is_the_ceiling(shape_name):
    """The node-by-node value recursion equals the package's E[tau] averaged over all filled
    trees; the exact switch is >= every rule and RRSw, and runs losslessly through the
    package."""
    rng = np.random.default_rng(4)
    shape = SHAPES[shape_name]
    world = _world(rng)
    for rule in ("traversal", "univer", "univer-guided", "univer-fixed", "rrsw"):
        exact = mean_length(shape, world.p, world.q, scheme=WO, rule=rule)
        chooser = _fixed_step("coin+traversal") if rule == "rrsw" else CHOOSERS[rule]
        assert abs(rule_value(shape, world, chooser) - exact) < EXACT_TOL
        assert exact <= oracle_value(shape, world) + EXACT_TOL
    law_fn = _chooser_law(oracle_chooser(shape, world))
    assert _lossless_gap(world, shape, WO, law_fn) < EXACT_TOL
    law = round_law(shape, world.p, world.q, scheme=WO, law_fn=law_fn)
    assert abs(sum(len(k) * p for k, p in law.items()) - oracle_value(shape, world)) < EXACT_TOL


def test_coin_traversal_is_rrsw():
    rng = np.random.default_rng(5)
    for name in ("2 x 2", "link + deep-second"):
        world = _world(rng)
        a = round_law(SHAPES[name], world.p, world.q, scheme=WO, law_fn=_package("rrsw"))
        b = round_law(SHAPES[name], world.p, world.q, scheme=WO,
                      law_fn=_chooser_law(_fixed_step("coin+traversal")))
        assert max_law_gap(a, b) < EXACT_TOL


def _view(k_sizes, s=0.7, vocab=5, seed=0):
    rng = np.random.default_rng(seed)
    return NodeView(1, (0,), s, rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab)),
                    tuple(k_sizes))


def test_choosers_where_they_choose():
    """safe: traversal unless all children are leaves; both: traversal on chains; k >= 3
    beyond the enumeration limit: traversal."""
    for seed in range(20):
        assert choose_safe(_view((1, 3), seed=seed)) == "traversal"
        assert choose_safe(_view((1,), seed=seed)) == "traversal"
        assert choose_guided(_view((4,), seed=seed)) == "traversal"
    big = _view((1, 1, 1), vocab=12)
    assert n_ordered_draws(big.proposal, 3) > ENUM_LIMIT
    assert choose_safe(big) == "traversal" and choose_guided(big) == "traversal"
    picked = {choose_safe(_view((1, 1), s=s, seed=seed))
              for seed in range(30) for s in (0.3, 1.0)}
    assert picked - {"traversal"}, picked  # the exact choice does leave traversal


def _tree_with_choices():
    """A tree whose nodes get non-traversal steps under univer and univer-guided."""
    tree = DraftTree.from_parents([-1, 0, 0, 1, 1, 2, 5, 6], [-1, 0, 2, 1, 3, 0, 2, 1])
    rng = np.random.default_rng(0)
    rows = rng.dirichlet(np.full(4, 0.7), size=tree.n_nodes)
    prop = 0.4 * rows + 0.6 * rng.dirichlet(np.ones(4), size=tree.n_nodes)
    return tree, rows, prop


@pytest.mark.parametrize("rule", ["univer", "univer-guided", "univer-fixed"])
def test_sampler_mean_matches_expected_length(rule):
    """Mean emitted length of the sampler equals the exact expected_length (z-test, 4.5
    standard errors: false alarm < 1e-5), and its law sums to 1 with the same mean."""
    tree, rows, prop = _tree_with_choices()
    exact = expected_length(tree, rows, rule=rule, proposal=prop)
    law = RULES[rule].round_law(tree, ArrayOracle(rows, tree), prop)
    assert abs(sum(law.values()) - 1) < EXACT_TOL
    assert abs(sum(len(k) * p for k, p in law.items()) - exact) < EXACT_TOL
    var = sum((len(k) - exact) ** 2 * p for k, p in law.items())
    draws = np.random.default_rng(12)
    n = 6000
    lengths = [len(verify(tree, rows, rule=rule, rng=draws, proposal=prop).tokens)
               for _ in range(n)]
    assert abs(np.mean(lengths) - exact) < 4.5 * np.sqrt(var / n)


def test_sampler_exercises_non_traversal_steps():
    """The sampler test above is not a Traversal test in disguise. (On this one drawn tree
    univer is below traversal: its guarantee is over the draws, not per drawn tree.)"""
    tree, rows, prop = _tree_with_choices()
    t = expected_length(tree, rows, rule="traversal", proposal=prop)
    for rule in ("univer", "univer-guided"):
        assert abs(expected_length(tree, rows, rule=rule, proposal=prop) - t) > 1e-6


def test_large_vocabulary_uses_closed_forms():
    """V = 4096 (beyond any enumeration): every rule's exact E[tau] comes from the k = 2 closed
    forms and lies in [1, 1 + depth]. (Dominance holds over the draws, not per drawn tree.)"""
    rng = np.random.default_rng(13)
    vocab = 4096
    tree = DraftTree.from_parents([-1, 0, 0, 1, 1, 2, 2], [-1, 5, 9, 1, 2, 3, 4])
    rows = rng.dirichlet(np.full(vocab, 0.05), size=tree.n_nodes)
    prop = 0.5 * rows + 0.5 * rng.dirichlet(np.full(vocab, 0.05), size=tree.n_nodes)
    for rule in ("univer", "univer-guided", "univer-fixed"):
        e = expected_length(tree, rows, rule=rule, proposal=prop)
        assert 1.0 <= e <= 1.0 + tree.depth.max()


def test_no_rule_dominates_witness():
    """Two worlds alike at the root: every root step (exact switch below) falls short of
    max(traversal, univer-fixed) in one of them."""
    _, value = _no_rule_dominates(np.random.default_rng(0), 1)
    assert value > 0.01


def test_traversal_below_rrsw_witness():
    _, value = _traversal_below_rrsw(np.random.default_rng(0), 10)
    assert value > 1e-3


def _closed_form_case(rng):
    """A random (q, r, s) for the k = 2 closed forms: zeros, ties (rounded laws), r == q."""
    vocab = int(rng.integers(2, 40))
    q = rng.dirichlet(np.full(vocab, float(rng.choice([0.05, 0.3, 1.0]))))
    if rng.random() < 0.3:
        q[rng.integers(vocab, size=vocab // 3)] = 0.0
    if rng.random() < 0.2:
        q = np.round(q * 8) / 8  # many tied ratios
    if np.count_nonzero(q) < 2:
        return None
    q /= q.sum()
    r = rng.dirichlet(np.full(vocab, float(rng.choice([0.2, 1.0]))))
    if rng.random() < 0.3:
        r = np.round(r * 6) / 6
        if r.sum() == 0:
            return None
        r /= r.sum()
    if rng.random() < 0.2:
        r = q.copy()
    s = 1.0 if rng.random() < 0.3 else float(rng.uniform(0.001, 1.0))
    return q, r, s


def test_closed_forms_are_the_full_sort_floats():
    """The support-only sorts, the order shared across scales and the scratch arrays give
    the floats of one full sort per step, bit for bit (ties included: the fallback), on
    every step and coin variant of a node, with the node's terms shared as _argmax shares
    them."""
    rng = np.random.default_rng(21)
    checked = 0
    for _ in range(600):
        case = _closed_form_case(rng)
        if case is None:
            continue
        q, r, s = case
        fast, ref = _LawTerms(q), _LawTerms(q)
        for step in candidate_steps(2):
            coin = step.startswith(COIN)
            inner = step[len(COIN):] if coin else step
            mu = (1.0 if coin else s) * r
            got = two_child_accepts(mu, q, inner, _terms=fast)
            assert np.array_equal(got, _two_child_reference(mu, inner, ref)), (step, q, mu)
            checked += 1
    assert checked > 2000


def test_tied_ratios_with_different_terms_fall_back():
    """Equal ratios carried by different (g, h) pairs: the sums depend on the order inside
    the tie, so the sorted support refuses them and the reference sort decides."""
    g = np.array([0.25, 0.125, 0.75])
    h = np.array([0.5, 0.25, 0.25])  # ratios 0.5, 0.5, 3 (exact)
    assert _sorted_support(g, h, presorted=False) is None
    same = _sorted_support(np.array([0.75, 0.125, 0.125]), np.array([0.25, 0.25, 0.25]), False)
    assert same is not None and np.array_equal(same[0], [0.5, 0.5, 3.0])


def test_argmax_shortcuts_change_no_choice():
    """Skipping a node by its scale bound and a step by its inclusion bound picks the step
    the exhaustive argmax picks; every step's value is within its inclusion bound."""
    rng = np.random.default_rng(22)
    n = 0
    for _ in range(800):
        case = _closed_form_case(rng)
        if case is None:
            continue
        q, r, s = case
        s = float(rng.choice([s, 10 ** rng.uniform(-14, -9), 1.0]))
        view = NodeView(1, (0,), s, r, q, (1, 1))
        weights = np.ones(2) if rng.random() < 0.5 else rng.integers(1, 6, 2).astype(float)
        terms, cache = _LawTerms(q), {}
        for step in candidate_steps(2):
            val = step_value(view, step, weights, _terms=terms)
            assert val <= _inclusion_bound(view, weights, terms, step.startswith(COIN), cache)
        assert _argmax(view, weights) == _argmax(view, weights, shortcuts=False)
        n += 1
    assert n > 500
